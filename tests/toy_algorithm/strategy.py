"""The toy server strategy: the teacher template's sampling, charging and checking of replies
(``TeacherStrategy``), DataLens' noisy vote aggregation, the toy message type and name."""

from fedgs.server.datalens_strategy import DataLensStrategy
from toy_algorithm import protocol
from toy_algorithm.entry import TOY


class ToyStrategy(DataLensStrategy):
    message_type = protocol.QUERY
    name = "Toy"
    strategy = TOY.name  # a reply's policy-used must name it
