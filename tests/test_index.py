"""tests/make_index.py: tests/INDEX.md is current, and the index finds what a test file uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import make_index


def test_the_index_is_current() -> None:
    """Fails after a test file or a module is added, renamed or imports differently: run
    `python tests/make_index.py` and commit tests/INDEX.md."""
    current = make_index.INDEX.read_text(encoding="utf-8") if make_index.INDEX.exists() else ""
    assert current == make_index.render(), "out of date: run python tests/make_index.py"


def test_every_module_is_listed_with_its_file() -> None:
    """By dotted name, with the file it is in (server/, client/, simulations/: package-dir).
    Paths, not names, here: a module's name in a string counts as this file using it."""
    by_path = {path: name for name, path in make_index.module_paths().items()}
    assert by_path["server/gswgan_strategy.py"].split(".") == ["fedgs", "server", "gswgan_strategy"]
    assert by_path["client/__init__.py"].split(".") == ["fedgs", "client"]
    assert "test_privacy_ledger.py" in make_index.index()[by_path["fedgs/privacy/ledger.py"]]


def test_imports_reexports_helpers_and_named_modules_are_found(tmp_path: Path) -> None:
    """A toy package (names the real one does not have) in a folder of its own."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "fedgs" = "fedgs", "fedgs.server" = "server" }\n',
        encoding="utf-8",
    )
    package = tmp_path / "fedgs"
    (package / "toy_privacy").mkdir(parents=True)
    (tmp_path / "server").mkdir()
    (tmp_path / "tests").mkdir()
    files = {
        "fedgs/__init__.py": "",
        "fedgs/toy_cli.py": "",
        "fedgs/toy_unused.py": "",
        "fedgs/toy_privacy/__init__.py": (
            "from fedgs.lazy_exports import lazy_exports\n"
            "__getattr__, __dir__, __all__ = lazy_exports(__name__, {'ledger': 'Ledger other'})\n"
        ),
        "fedgs/toy_privacy/ledger.py": "class Ledger: ...\n",
        "fedgs/toy_privacy/events.py": "",
        "server/__init__.py": "",
        "server/toy_strategy.py": "",
        "tests/apps.py": "from fedgs.server.toy_strategy import Strategy\n",
        "tests/test_direct.py": (
            "import fedgs.toy_privacy.events\nfrom fedgs.toy_privacy import ledger\n"
        ),
        "tests/test_reexport.py": "from fedgs.toy_privacy import Ledger\n",
        "tests/test_helper.py": "from apps import x\n",
        "tests/test_command.py": "COMMAND = ['python', '-m', 'fedgs.toy_cli', 'simulate']\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    found = make_index.index(tmp_path)
    assert found["fedgs.toy_privacy.events"] == ["test_direct.py"]
    assert found["fedgs.toy_privacy.ledger"] == ["test_direct.py", "test_reexport.py"]
    assert found["fedgs.toy_privacy"] == ["test_reexport.py"]
    assert found["fedgs.server.toy_strategy"] == ["test_helper.py"]  # through tests/apps.py
    assert found["fedgs.toy_cli"] == ["test_command.py"]
    assert found["fedgs.toy_unused"] == []
    unused = "| `fedgs.toy_unused` | `fedgs/toy_unused.py` | *(none)* |"
    assert unused in make_index.render(tmp_path)


def test_the_script_s_check_agrees() -> None:
    done = subprocess.run(
        [sys.executable, str(Path(make_index.__file__)), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
