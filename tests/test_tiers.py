"""tests/conftest.py's tiers: a plain run leaves the `slow` tests out and says how to run them;
-m slow runs only them, --all both, and a test file named on the command line runs whole."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A two-test suite with this project's conftest.py and marker."""
    (tmp_path / "tests").mkdir()
    shutil.copy(HERE / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\nmarkers = ["slow: the slow tier"]\n',
        encoding="utf-8",
    )
    (tmp_path / "tests" / "test_two.py").write_text(
        "import pytest\n\n\ndef test_fast():\n    pass\n\n\n"
        "@pytest.mark.slow\ndef test_slow():\n    pass\n",
        encoding="utf-8",
    )
    return tmp_path


def _run(suite: Path, *args: str) -> tuple[set[str], str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = {line.split("::")[1].split()[0] for line in done.stdout.splitlines() if " PASSED" in line}
    return ran, done.stdout


def test_a_plain_run_is_the_fast_tier_and_says_how_to_run_the_slow_one(suite: Path) -> None:
    ran, output = _run(suite)
    assert ran == {"test_fast"}
    assert "1 deselected" in output
    assert "fast tier: 1 slow tests not run; `python -m pytest -q -m slow` runs them" in output
    assert _run(suite, "tests")[0] == {"test_fast"}  # a folder named: still the fast tier


def test_the_slow_tier_everything_and_a_named_file(suite: Path) -> None:
    assert _run(suite, "-m", "slow")[0] == {"test_slow"}
    ran, output = _run(suite, "--all")
    assert ran == {"test_fast", "test_slow"} and "slow tests not run" not in output
    assert _run(suite, "-m", "slow or not slow")[0] == {"test_fast", "test_slow"}
    assert _run(suite, "tests/test_two.py")[0] == {"test_fast", "test_slow"}
    assert _run(suite, "tests/test_two.py::test_slow")[0] == {"test_slow"}
