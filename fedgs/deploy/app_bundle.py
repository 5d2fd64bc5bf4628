"""The Flower app directory that ``flwr run`` ships to the SuperLink as a FAB.

It holds only a ``pyproject.toml`` naming the components and the run-config defaults (from
RunConfig, so every key ``--run-config`` may set exists): the code itself is the installed fedgs
package, on every machine that runs a component. Shipping the repository instead would put its
``fedgs/`` folder in front of the installed package (Flower prepends the app directory to
``sys.path``), and the FAB would carry tests and benchmarks.

A FAB is a zip with fixed timestamps, so the same app directory always hashes the same:
:func:`fab_hash` is what a data holder's SuperNode allowlists (fedgs.deploy.superexec).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from fedgs.run_config import RunConfig

APP_NAME = "fedgs-deploy"


@dataclass(frozen=True)
class Components:
    """Import references of the ServerApp and ClientApp the FAB names."""

    serverapp: str
    clientapp: str


# PROMPT: the ServerApp checks for replies every 50 ms instead of 3 s (fedgs.server.deploy_app);
# PLAIN: the ServerApp exactly as `flwr run .` names it. The ClientApp is the same in both.
PROMPT = Components("fedgs.server.deploy_app:server_app", "fedgs.client.app:app")
PLAIN = Components("fedgs.server.app:app", "fedgs.client.app:app")


def write_app(
    folder: Path,
    components: Components = PROMPT,
    modules: Iterable[Path] = (),
    config: Mapping[str, object] | None = None,
) -> Path:
    """Write the app directory; ``modules`` are extra Python files shipped with it (test apps),
    ``config`` overrides run-config defaults. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for module in modules:
        shutil.copyfile(module, folder / module.name)
    defaults = RunConfig().to_user_config() | dict(config or {})
    document = {
        "project": {
            "name": APP_NAME,
            "version": "0.1.0",
            "description": "fedgs federated GS-WGAN (components from the installed package)",
            "license": "Apache-2.0",
            "dependencies": [],
        },
        "tool": {
            "flwr": {
                "app": {
                    "publisher": "fedgs",
                    "components": {
                        "serverapp": components.serverapp,
                        "clientapp": components.clientapp,
                    },
                    "config": defaults,
                }
            }
        },
    }
    (folder / "pyproject.toml").write_text(tomli_w.dumps(document))
    return folder


def fab_hash(folder: Path) -> str:
    """The sha256 of the FAB ``flwr run`` builds from ``folder``: the run's ``fab_hash``."""
    from flwr.cli.build import build_fab_from_disk

    return hashlib.sha256(build_fab_from_disk(folder)).hexdigest()


def read_allowlist(path: Path) -> frozenset[str]:
    """FAB hashes listed in ``path``: one per line, ``#`` starts a comment."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return frozenset(line.lower() for line in lines if line)


def write_allowlist(path: Path, hashes: Mapping[str, str]) -> Path:
    """A node's allowlist: ``hashes`` maps FAB sha256 to a note saying what app it is. Hashes
    already listed are kept (a data holder's own additions survive a re-run of init)."""
    listed = read_allowlist(path) if path.exists() else frozenset()
    lines = [] if path.exists() else ["# FABs (sha256) whose ClientApps this node runs; one a line"]
    lines += [f"{digest}  # {note}" for digest, note in hashes.items() if digest not in listed]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.writelines(line + "\n" for line in lines)
    return path
