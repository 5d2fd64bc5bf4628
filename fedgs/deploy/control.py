"""Talking to a SuperLink through the ``flwr`` CLI, with a Flower config of the deployment's own.

``flwr`` reads its SuperLink connections from ``$FLWR_HOME/config.toml``; the deployment writes
one in its run directory so nothing touches the user's ``~/.flwr``. ``flwr`` runs through
fedgs.deploy.unix_socket, so a connection's address may be a SuperLink's private Unix socket
(``unix:PATH``), which Flower's own CLI cannot dial. SuperNode keys are registered
the Flower 1.41 way: ``flwr supernode register PUBLIC_KEY CONNECTION`` against a SuperLink started
with ``--enable-supernode-auth`` (the older CSV of keys, ``--auth-list-public-keys``, is refused
by 1.41).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import tomli_w

from fedgs.deploy.unix_socket import command

CONNECTION = "fedgs"


def write_flwr_home(folder: Path, address: str, ca_cert: Path | None) -> Path:
    """A ``config.toml`` whose default connection is the deployment's SuperLink."""
    connection: dict[str, object] = {"address": address}
    if ca_cert is None:
        connection["insecure"] = True
    else:
        connection["root-certificates"] = str(ca_cert)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        tomli_w.dumps({"superlink": {"default": CONNECTION, CONNECTION: connection}})
    )
    return folder


class ControlError(RuntimeError):
    """A ``flwr`` command failed; the message carries its output."""


def flwr(
    args: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 120,
    flwr_command: Sequence[str] | None = None,
) -> str:
    """Run ``flwr ARGS`` and return its stdout; raise ControlError with its output on failure.
    ``flwr_command``: what runs ``flwr`` (default: fedgs' routed one here; e.g. compose's
    ``docker compose run --rm -T flwr``, where the Control socket is)."""
    done = subprocess.run(
        [*(command("flwr") if flwr_command is None else flwr_command), *args],
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise ControlError(
            f"`flwr {' '.join(args)}` failed (exit {done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return done.stdout


def _answer(args: Sequence[str], out: str) -> dict:
    """The JSON object a ``flwr ... --format json`` printed. In JSON mode flwr reports a
    failure as ``{"success": false, "error-message": ...}`` with exit status 0."""
    try:
        answer = json.loads(out[out.index("{") :])
    except ValueError as error:
        raise ControlError(f"`flwr {' '.join(args)}` printed no JSON answer: {out}") from error
    if answer.get("success") is False:
        raise ControlError(f"`flwr {' '.join(args)}` failed: {answer.get('error-message', out)}")
    return answer


def register_node(
    public_key: Path, env: Mapping[str, str], name: str | None = None, exist_ok: bool = False
) -> int | None:
    """Register one SuperNode public key; returns the node id the SuperLink gave it (None:
    ``exist_ok`` and the key was registered before, e.g. a SuperLink restarted on its database)."""
    args = ["supernode", "register", str(public_key), CONNECTION, "--format", "json"]
    if name:
        args += ["--name", name]
    try:
        answer = _answer(args, flwr(args, env))
    except ControlError as error:
        if exist_ok and "already in use" in str(error):
            return None
        raise
    try:
        return int(answer["node-id"])
    except (ValueError, KeyError) as error:
        raise ControlError(f"unexpected answer from `flwr supernode register`: {answer}") from error


def online_nodes(env: Mapping[str, str], flwr_command: Sequence[str] | None = None) -> list[int]:
    """Ids of the SuperNodes the SuperLink currently sees online."""
    args = ["supernode", "list", CONNECTION, "--format", "json"]
    nodes = _answer(args, flwr(args, env, flwr_command=flwr_command)).get("nodes", [])
    return [int(n["node-id"]) for n in nodes if n.get("status") == "online"]


def run_status(
    run_id: int, env: Mapping[str, str], flwr_command: Sequence[str] | None = None
) -> tuple[str, str]:
    """A run's status (e.g. ``finished:completed``, ``finished:failed``) and its details."""
    args = ["list", CONNECTION, "--run-id", str(run_id), "--format", "json"]
    (run,) = _answer(args, flwr(args, env, flwr_command=flwr_command))["runs"]
    return str(run["status"]), str(run.get("status-details", ""))


def register_keys(superlink: str, ca_cert: Path | None, public_keys: Sequence[Path]) -> None:
    """Register ``public_keys`` with the SuperLink at ``superlink`` (``unix:PATH``: its Control
    socket), skipping keys registered before (what compose's one-shot ``register`` service runs
    on every ``up``). Each key is printed with its fingerprint, which the operator compares with
    the one its data holder gave over another channel."""
    from fedgs.deploy.certs import fingerprint

    ca_cert = ca_cert.resolve() if ca_cert is not None else None  # flwr reads it from elsewhere
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "FLWR_HOME": str(write_flwr_home(Path(home), superlink, ca_cert))}
        for key in public_keys:
            node_id = register_node(key, env, name=key.stem, exist_ok=True)
            said = "registered before" if node_id is None else f"node {node_id}"
            print(f"{key} ({fingerprint(key)}): {said}")
