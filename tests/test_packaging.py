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


def test_checkout_first_on_sys_path_imports_the_mapped_subpackages() -> None:
    """Ray puts the driver's working directory first on every worker's sys.path, and `flwr run .`
    the app directory: from a checkout's root the source fedgs/ shadows the installed package, and
    must still import fedgs.server, fedgs.client and fedgs.simulations (issue 18). ``-S`` keeps
    the editable install's import hook out, as in a regular install."""
    site_packages = [p for p in sys.path if p.endswith("site-packages")]
    code = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}]; sys.path += {site_packages!r}; "
        "import fedgs.client.app, fedgs.server.app, fedgs.simulations.simulate, fedgs; "
        "print(fedgs.client.__file__, fedgs.server.__file__, fedgs.simulations.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    client, server, simulations = result.stdout.split()
    assert Path(client) == ROOT / "client" / "__init__.py"
    assert Path(server) == ROOT / "server" / "__init__.py"
    assert Path(simulations) == ROOT / "simulations" / "__init__.py"


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    """pyproject.toml lists packages explicitly: a new folder missing there imports from a
    checkout or an editable install but is absent from a regular `pip install .`."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"fedgs": ROOT / "fedgs"} | {
        name: ROOT / path for name, path in setuptools["package-dir"].items()
    }
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            found.add(".".join((name, *parts)))
    assert found <= set(setuptools["packages"]), sorted(found - set(setuptools["packages"]))
