"""JSON text for the ledgers: every ledger is saved as the JSON of its ``to_dict``."""

from __future__ import annotations

import json
from typing import Any, Self


class JsonRecord:
    """``to_json`` / ``from_json`` for a class that has ``to_dict`` / ``from_dict``."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        raise NotImplementedError

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls.from_dict(json.loads(text))
