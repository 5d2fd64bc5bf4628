"""Package attributes imported on first use (PEP 562).

Why: torch, Hugging Face datasets, autodp and dp-accounting take seconds to import; a package
that re-exports names from its submodules should not make ``fedgs --help`` pay for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, names_by_module: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``, which exports the names
    each of its submodules is listed with (space-separated: ``{"load": "load_federated"}``)."""
    exports = {name: module for module, names in names_by_module.items() for name in names.split()}

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(package)
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(exports))

    return __getattr__, __dir__, sorted(exports)
