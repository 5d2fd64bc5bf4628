"""The Flower app directory that ``flwr run`` ships to the SuperLink as a FAB.

It holds only a ``pyproject.toml`` naming the components and the run-config defaults (from
RunConfig, so every key ``--run-config`` may set exists): the code itself is the installed fedgs
package, on every machine that runs a component. Shipping the repository instead would put its
``fedgs/`` folder in front of the installed package (Flower prepends the app directory to
``sys.path``), and the FAB would carry tests and benchmarks.
"""

from __future__ import annotations

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


# PROMPT: the ServerApp checks for replies every 50 ms instead of 3 s (fedgs.deploy.apps);
# PLAIN: the ServerApp exactly as `flwr run .` names it. The ClientApp is the same in both.
PROMPT = Components("fedgs.deploy.apps:server_app", "fedgs.client.app:app")
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
