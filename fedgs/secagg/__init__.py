"""SecAgg+ secure aggregation (Bell et al., CCS 2020), the protocol core, free of any transport.

A cohort of clients each holds a vector of integers mod 2^k (already quantized and noised by
the caller); the server learns only their sum mod 2^k over the clients that survive the step.
Five stages: setup (parameters and neighbour graph), advertise keys (two SECP384R1 key pairs),
share keys (Shamir shares of a self-mask seed and of the mask key's scalar, encrypted to each
neighbour), masked input (the input plus a self mask and pairwise masks), unmask (shares of the
survivors' seeds and of the dropped clients' mask keys, so the server can take the masks off).

A transport drives :class:`ServerSession` (``messages()`` / ``receive()`` / ``result()``) and,
on each node, :class:`ClientSession` (``handle()``, its state kept between stages with
``to_dict()`` / ``from_dict()``). Messages are plain dicts of ints, bytes, strings and lists,
plus one numpy vector for the masked input.

Cost, measured in one process (all clients and the server) on a shared 2-core machine: 50
clients, complete graph, 25,088 values, k = 32, t = 26, one client dropped before the unmask:
7.5 s in all (11.5 s under load) with Flower's GF(2^128) Shamir sharing, where share keys took
about 0.07 s a client and the server's unmask 2.5 s (rebuilding 50 seeds from 26 shares each).
Since the secrets are shared as one element of a 384-bit prime field each (``shamir.py``), both
fell about 4x and 50x: see results/log/secure-aggregation.md. The masked input costs about
0.03 s a client (49 key agreements, 50 ChaCha20 masks). The slow test
``test_fifty_clients_25088_values`` prints the figure again.

Not covered: a server that tells different clients different survivor lists (the consistency
round of Bonawitz et al.'s malicious-server variant), and a client that reveals a wrong seed
share: it spoils the sum like a wrong input would, and the step usually aborts on it.
"""

from fedgs.secagg.client import ClientSession
from fedgs.secagg.errors import SecAggAbort, SecAggError
from fedgs.secagg.graph import neighbour_graph
from fedgs.secagg.params import SecAggParams
from fedgs.secagg.prg import mask_vector
from fedgs.secagg.server import ServerSession

__all__ = [
    "ClientSession",
    "SecAggAbort",
    "SecAggError",
    "SecAggParams",
    "ServerSession",
    "mask_vector",
    "neighbour_graph",
]
