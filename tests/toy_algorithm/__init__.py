"""A toy strategy that exists only in the tests: docs/architecture.md's "Adding a strategy",
followed.

Registered through the environment, never in fedgs' own registry::

    FEDGS_ALGORITHMS=toy_algorithm.entry:TOY fedgs simulate --strategy toy ...

with this folder's parent (``tests/``) on PYTHONPATH, so the driver and every Ray worker import it.
The pieces, one per layer, as for a built-in algorithm:

- ``protocol.py``: the wire protocol (core; its message type comes from the entry below);
- ``strategy.py`` and ``run.py``: the server strategy and the run that drives it;
- ``session.py``: the client session that answers its query behind the node's gate;
- ``entry.py``: the registry entry. It stays light (no torch, no Flower): ``fedgs.algorithms``
  imports it while it is itself being imported, so this package's ``__init__`` imports nothing
  of fedgs (``python -m toy_algorithm.gate_probe`` imports it before fedgs).

The mechanism is DataLens' (top-k gradient sign votes, Gaussian noise added to their sum by a
trusted aggregator), under its own name and message type: each step is paid for in the shared
teacher ledger with DataLens' event and privacy.json is written by the one shared writer.
"""
