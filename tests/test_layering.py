"""The import graph keeps its layers (issue 19), read from the source with `ast` (nothing imported).

- The core (``fedgs/``) is usable without the apps: it never imports ``fedgs.server``,
  ``fedgs.client`` or ``fedgs.simulations`` (the checkout-root packages mapped into ``fedgs``).
- The server never imports the client, and neither imports the simulations: a deployment runs
  them in separate processes, and the server must not depend on code that touches private data.
- The privacy math, the models and the training steps import no Flower, nor the wire protocols
  (``fedgs.protocols``, which speak Flower records): they are what a reviewer audits and what
  other frameworks could reuse.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# layer folder (relative to the checkout root) -> module prefixes it must not import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "fedgs": ("fedgs.server", "fedgs.client", "fedgs.simulations"),
    "server": ("fedgs.client", "fedgs.simulations"),
    "client": ("fedgs.server", "fedgs.simulations"),
    "fedgs/privacy": ("flwr", "fedgs.protocols"),
    "fedgs/models": ("flwr", "fedgs.protocols"),
    "fedgs/training": ("flwr", "fedgs.protocols"),
}


def imported_modules(path: Path) -> Iterator[str]:
    """Every absolute module an ``import`` statement in ``path`` names, lazy imports included."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def violations(root: Path, forbidden: dict[str, tuple[str, ...]]) -> list[str]:
    """``file: module`` for each import that crosses a forbidden edge."""
    found = []
    for layer, prefixes in forbidden.items():
        for path in sorted((root / layer).rglob("*.py")):
            for module in imported_modules(path):
                if any(module == p or module.startswith(p + ".") for p in prefixes):
                    found.append(f"{path.relative_to(root)}: {module}")
    return sorted(found)


def test_the_checkout_keeps_its_layers() -> None:
    assert violations(ROOT, FORBIDDEN) == []


def test_a_crossing_import_is_found(tmp_path: Path) -> None:
    (tmp_path / "fedgs" / "privacy").mkdir(parents=True)
    (tmp_path / "server").mkdir()
    (tmp_path / "client").mkdir()
    (tmp_path / "fedgs" / "evaluation.py").write_text(
        "def late():\n    from fedgs.simulations.simulate import run\n"
    )
    (tmp_path / "fedgs" / "privacy" / "math.py").write_text("import flwr.app\n")
    (tmp_path / "fedgs" / "privacy" / "codec.py").write_text("from fedgs.protocols import common\n")
    (tmp_path / "server" / "run.py").write_text("from fedgs.client import gswgan_session\n")
    (tmp_path / "client" / "app.py").write_text("from fedgs.server_helpers import x\n")  # allowed
    assert violations(tmp_path, FORBIDDEN) == [
        "fedgs/evaluation.py: fedgs.simulations.simulate",
        "fedgs/privacy/codec.py: fedgs.protocols",
        "fedgs/privacy/math.py: flwr.app",
        "server/run.py: fedgs.client",
    ]
