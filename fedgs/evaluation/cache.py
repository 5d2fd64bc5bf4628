"""Results cached on disk by what they were computed from, so a repeated evaluation is free.

A key is a JSON-able dict (the generator.pt hash, the options, a version); its SHA-256 names the
file. Entries are written atomically and hold their key, so a stale or foreign file is ignored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fedgs.private_files import close_dir
from fedgs.training.run_dir import write_atomic

CACHE_VERSION = 1


class ResultCache:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, key: dict[str, Any]) -> Path:
        text = json.dumps({**key, "cache_version": CACHE_VERSION}, sort_keys=True)
        return self.folder / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"

    def get(self, key: dict[str, Any]) -> Any | None:
        path = self._path(key)
        try:
            entry = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return entry["value"] if entry.get("key") == key else None

    def put(self, key: dict[str, Any], value: Any) -> None:
        close_dir(self.folder)  # scores of real writers' data: the owner's alone
        payload = json.dumps({"key": key, "value": value}, sort_keys=True, indent=1)
        write_atomic(self._path(key), payload.encode())
