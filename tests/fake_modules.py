"""A module built from source text: the stand-in for a Flower module whose internals a patch
checks (fedgs.deploy.flower_waits, fedgs.deploy.doorbell)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def module_from_source(tmp_path: Path, source: str) -> ModuleType:
    path = tmp_path / "fake_flower_module.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("fake_flower_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
