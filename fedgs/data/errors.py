"""The one exception the data layer raises for bad input.

Callers (the CLI, training scripts) catch a single type and show its message; the message always
names the file or directory and what is wrong with it, so nobody has to read a traceback from deep
inside ``json`` or ``gzip`` to find out which of hundreds of shards is broken.
"""

from __future__ import annotations


class DataError(ValueError):
    """Input data is missing, malformed or inconsistent; ``str(err)`` says where and why."""
