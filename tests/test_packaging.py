"""One import namespace: the wheel holds fedgs.* only, never top-level server/client/data."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_one_namespace(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("fedgs-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.startswith("fedgs-")}
    assert top_level == {"fedgs"}
    for package in ("server", "client", "simulations", "data", "privacy", "models", "metrics"):
        assert f"fedgs/{package}/__init__.py" in names


def test_subpackages_import_from_the_fedgs_namespace() -> None:
    import fedgs.client
    import fedgs.server
    import fedgs.simulations

    assert Path(fedgs.server.__file__).parent.name == "server"
    assert (
        fedgs.client.__name__ == "fedgs.client"
        and fedgs.simulations.__name__ == "fedgs.simulations"
    )
