"""Files and folders that only their owner can read: a shared host's other users see nothing.

A node's critic is trained on its raw data, ledgers say how much of a budget was spent, and
secrets and keys authenticate the deployment: fedgs writes every such file with mode 0600 in a
directory of mode 0700, whatever the umask. The run directory's outputs are written the same way
(an operator who shares them runs ``chmod``).
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def private_open(path: str | Path, flags: int) -> int:
    """An ``opener`` for ``open``: a file it creates is the owner's alone (0600)."""
    return os.open(path, flags, PRIVATE_FILE)


def private_dir(path: Path, *, existing: bool = True) -> Path:
    """``path`` as a directory only its owner can enter (0700; its missing parents as the umask
    makes them). ``existing``: a directory already there is made so too (one fedgs owns); else
    it keeps its mode (a folder the user named, e.g. ``--out .``)."""
    created = not path.is_dir()
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if created or existing:
        path.chmod(PRIVATE_DIR)
    return path


def close_dir(path: Path) -> Path:
    """``path`` (made if missing) as a directory only its owner can enter, if this user owns it:
    a cache's folders hold what was derived from data; one of another user's (a cache shared on
    purpose) keeps its mode."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    status = path.stat()
    if status.st_uid == os.getuid() and status.st_mode & 0o077:
        path.chmod(PRIVATE_DIR)
    return path
