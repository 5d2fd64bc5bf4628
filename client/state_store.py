"""Disk-backed client state: a private critic must outlive a message, but not live in Context.

Flower pickles every node's Context through the driver on each message, so thousands of 13 MB
critics cannot live there. Each client's state is one file under the state directory, written to a
temporary file and renamed over the old one: a crash mid-write leaves the previous state readable.
A lock file beside it serializes the requests to one client across threads, Ray workers and
SuperNode processes (``fcntl.flock``): read-ledger, check, train, record and save are one step.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from fedgs.private_files import private_dir, private_open
from fedgs.training.run_dir import write_atomic


def _file_name(client_id: str) -> str:
    """A safe, unique file name: readable prefix plus a hash of the exact id."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", client_id)[:40]
    digest = hashlib.sha256(client_id.encode()).hexdigest()[:16]
    return f"{readable}-{digest}.pt"


class ClientStateStore:
    """Maps a client id to its saved state (a dict of tensors, numbers and strings). The critic
    is trained on raw data and the ledger says how much was spent: the directory is the node
    owner's alone (0700), every file in it too (0600)."""

    def __init__(self, root: str | Path) -> None:
        self.root = private_dir(Path(root))

    def path(self, client_id: str) -> Path:
        return self.root / _file_name(client_id)

    def load(self, client_id: str) -> dict[str, Any] | None:
        path = self.path(client_id)
        if not path.exists():
            return None
        return torch.load(path, map_location="cpu", weights_only=True)

    def save(self, client_id: str, state: dict[str, Any]) -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        write_atomic(self.path(client_id), buffer.getvalue())

    @contextmanager
    def locked(self, client_id: str) -> Iterator[None]:
        """Hold the client's exclusive lock: a second request to it waits here until the first
        has saved its state (a separate open file per holder, so threads exclude each other)."""
        lock = self.path(client_id).with_name(f".{self.path(client_id).name}.lock")
        with open(lock, "a+b", opener=private_open) as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def count_failure(self, client_id: str) -> int:
        """Add one to the client's count of diverged answers (kept on disk, never sent)."""
        path = self.path(client_id).with_suffix(".diverged")
        count = int(path.read_text()) + 1 if path.exists() else 1
        write_atomic(path, str(count).encode())
        return count

    def failures(self, client_id: str) -> int:
        path = self.path(client_id).with_suffix(".diverged")
        return int(path.read_text()) if path.exists() else 0

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.root.glob("*.pt"))
