"""The toy protocol (the core module a strategy adds under ``fedgs/protocols/``).

Down, message type ``train.toy``: ArrayRecord ``fakes`` (``fedgs.protocols.common``'s format).
Up: ArrayRecord ``votes``, DataLens' packed top-k signs (``fedgs.protocols.datalens``), with the
identity and policy records every reply carries.
"""

from fedgs.protocols import datalens
from toy_algorithm.entry import TOY

QUERY = TOY.query
VOTES = datalens.VOTES
encode_votes, decode_votes = datalens.encode_votes, datalens.decode_votes
