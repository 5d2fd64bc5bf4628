"""What a node owns: where it reads and writes and what it computes on, never the server's to
choose.

A node reads its data from its ``data-dir``, keeps its critic, privacy ledger and lock files in
its ``state-dir`` and computes on its ``device``; all three come from its node config
(``flower-supernode --node-config 'partition-id=0 state-dir="/srv/fedgs/state"
data-dir="/srv/fedgs/data" device="cuda"'``) or, in a simulation, from the runner's settings
(the runner speaks for every node owner). The server's run config names its own ``run-dir``,
``device`` and ``data-dir`` (its outputs, its compute, its copy of the data for scoring): a
client never reads them. A server that chose a node's data folder could make it answer from any
dataset on the node's host its owner never offered, each writer with a fresh ledger. A run
config that names a ``state-dir`` other than the node's is refused: a server that could move a
node's state would hand it a fresh privacy ledger, and with it a fresh budget, at every run.

Whose fault a bad setting is decides the reply (``fedgs.client.app``): a run-config value the
node cannot take is the server's (``ProtocolError``, a bad request); a node config the node
cannot run with is its operator's (``NodeConfigError``, a refusal the node also logs), since no
request could fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedgs.client.common import NodeConfigError, RequestRefused
from fedgs.privacy.policy import NodePolicy
from fedgs.protocols.common import ProtocolError
from fedgs.run_config import RunConfig
from fedgs.run_data import state_dir_for

STATE_DIR = "state-dir"
PARTITION_ID = "partition-id"
# run-config keys a client takes from its node config (or a simulation runner) only
NODE_KEYS = ("device", STATE_DIR, "run-dir", "data-dir")
# what parsing a config can raise on a bad value (ArithmeticError: int(inf), 2.0 ** huge)
BAD_VALUE = (KeyError, TypeError, ValueError, ArithmeticError)


def node_settings(
    node_config: Mapping[str, Any], base: NodePolicy | None
) -> tuple[NodePolicy, int]:
    """The node's privacy policy and the partition it holds, from its node config alone;
    NodeConfigError (its operator's to fix) if either is missing or malformed."""
    if PARTITION_ID not in node_config:
        raise NodeConfigError(f"node config has no '{PARTITION_ID}': which client is this node?")
    partition = node_config[PARTITION_ID]
    try:
        partition_id = int(partition)
    except BAD_VALUE:
        raise NodeConfigError(
            f"node config '{PARTITION_ID}' must be an integer, got {partition!r}"
        ) from None
    try:
        return NodePolicy.from_node_config(node_config, base), partition_id
    except BAD_VALUE as error:  # PolicyViolation: a policy-* key, unknown or out of range
        raise NodeConfigError(str(error)) from error


def client_config(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], overrides: Mapping[str, Any]
) -> RunConfig:
    """The settings a client serves a request under: the server's run config without the
    node's own keys, then the node config, then a simulation runner's ``overrides``. A deployed
    node (no overrides) must pin its state directory in its node config."""
    server = {key: value for key, value in run_config.items() if key not in NODE_KEYS}
    if not overrides:
        require_pinned_state_dir(node_config)
    try:
        config = RunConfig.from_user_config(server, node_config, overrides)
    except BAD_VALUE as error:
        # the node's own layers alone decide whose value it is: if they fail without the
        # server's, no run config could fix them; if not, the server's values broke them
        try:
            RunConfig.from_user_config(node_config, overrides)
        except BAD_VALUE as own:
            raise NodeConfigError(f"this node's config: {own}") from own
        raise ProtocolError(f"run config: {error}") from error
    refuse_moved_state(run_config, config)
    return config


def require_pinned_state_dir(node_config: Mapping[str, Any]) -> None:
    """Without its own state directory a node would keep its ledger wherever a run points."""
    if not str(node_config.get(STATE_DIR, "")).strip():
        raise NodeConfigError(
            f"this node's config does not say where it keeps its critic and privacy ledger: set "
            f"the node-config key '{STATE_DIR}' (flower-supernode --node-config "
            f"'partition-id=0 {STATE_DIR}=\"/srv/fedgs/state\"'); a node never takes it from "
            "the server's run config"
        )


def refuse_moved_state(run_config: Mapping[str, Any], config: RunConfig) -> None:
    """A run config may repeat the node's state directory, never name another."""
    asked = str(run_config.get(STATE_DIR, "")).strip()
    try:
        asked_path = Path(asked).resolve() if asked else None
    except (OSError, RuntimeError, ValueError) as error:  # a NUL byte, a symlink loop
        raise ProtocolError(f"run config '{STATE_DIR}' is not a usable path: {error}") from error
    if asked_path is not None and asked_path != state_dir_for(config).resolve():
        raise RequestRefused(
            f"the run config sets '{STATE_DIR}', but this node keeps its state where its own "
            f"node config says ('{STATE_DIR}'): a server cannot move a node's state, nor reset "
            "its privacy ledger with it"
        )
