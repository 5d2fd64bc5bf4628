"""What a node owns: where it writes and what it computes on, never the server's to choose.

A node keeps its critic, privacy ledger and lock files in its ``state-dir`` and computes on its
``device``; both come from its node config (``flower-supernode --node-config 'partition-id=0
state-dir="/srv/fedgs/state" device="cuda"'``) or, in a simulation, from the runner's settings
(the runner speaks for every node owner). The server's run config names its own ``run-dir`` and
``device`` (its outputs, its compute): a client never reads them. A run config that names a
``state-dir`` other than the node's is refused: a server that could move a node's state would
hand it a fresh privacy ledger, and with it a fresh budget, at every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedgs.client.common import RequestRefused
from fedgs.run_config import RunConfig
from fedgs.run_data import state_dir_for

STATE_DIR = "state-dir"
# run-config keys a client takes from its node config (or a simulation runner) only
NODE_KEYS = ("device", STATE_DIR, "run-dir")


def client_config(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], overrides: Mapping[str, Any]
) -> RunConfig:
    """The settings a client serves a request under: the server's run config without the
    node's own keys, then the node config, then a simulation runner's ``overrides``. A deployed
    node (no overrides) must pin its state directory in its node config."""
    server = {key: value for key, value in run_config.items() if key not in NODE_KEYS}
    if not overrides:
        require_pinned_state_dir(node_config)
    config = RunConfig.from_user_config(server, node_config, overrides)
    refuse_moved_state(run_config, config)
    return config


def require_pinned_state_dir(node_config: Mapping[str, Any]) -> None:
    """Without its own state directory a node would keep its ledger wherever a run points."""
    if not str(node_config.get(STATE_DIR, "")).strip():
        raise RequestRefused(
            f"this node's config does not say where it keeps its critic and privacy ledger: set "
            f"the node-config key '{STATE_DIR}' (flower-supernode --node-config "
            f"'partition-id=0 {STATE_DIR}=\"/srv/fedgs/state\"'); a node never takes it from "
            "the server's run config"
        )


def refuse_moved_state(run_config: Mapping[str, Any], config: RunConfig) -> None:
    """A run config may repeat the node's state directory, never name another."""
    asked = str(run_config.get(STATE_DIR, "")).strip()
    if asked and Path(asked).resolve() != state_dir_for(config).resolve():
        raise RequestRefused(
            f"the run config sets '{STATE_DIR}', but this node keeps its state where its own "
            f"node config says ('{STATE_DIR}'): a server cannot move a node's state, nor reset "
            "its privacy ledger with it"
        )
