"""The toy client session: a DataLens teacher (private critic, top-k sign votes) whose replies
name the toy policy. The gate (``fedgs.client.gate``) admits its query only on a node whose
policy-strategy is ``toy``, checks the batch size and takes the client's lock first."""

from fedgs.client.datalens_session import DataLensTeacher
from toy_algorithm.entry import TOY


class ToyTeacher(DataLensTeacher):
    strategy = TOY.name
