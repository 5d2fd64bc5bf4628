"""The two exceptions of the SecAgg+ protocol, so a transport can tell a refusal from an abort.

``SecAggError`` is a refused message: malformed, foreign, out of order, or asking for something
the protocol forbids. A client raises it instead of answering (the server then treats it as
dropped); the server raises it only for its own misuse, and drops a client whose reply fails.
``SecAggAbort`` ends the whole step with no sum released: too few survivors, or too few shares.
"""

from __future__ import annotations


class SecAggError(ValueError):
    """A message or a call that the protocol refuses."""


class SecAggAbort(SecAggError):
    """The step cannot finish without weakening privacy, so no sum is released."""
