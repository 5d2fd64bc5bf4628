"""``python -m fedgs.deploy.superexec``: Flower's SuperExec, forking ClientApp processes warm.

Flower 1.41 runs every message a SuperNode receives in a fresh ``flwr-clientapp`` process (its
warm executor pools cover other task types, on Kubernetes only). A fresh interpreter imports
Flower, torch and the app again: seconds per message on a small CPU, which dominated a
deployment's step. This SuperExec is ``flower-superexec`` with the same flags and the same task
loop; only the way a task's process starts differs: the SuperExec imports the ``--preload``
modules once (e.g. ``fedgs.client.app``) and ``fork()``s each ClientApp process from itself, and
the child runs Flower's own ``run_clientapp`` (with the 1 s first backoff of its message pull
shortened, ``fedgs.deploy.flower_waits``). Each message still gets a fresh process that
shares no memory with the next, so the ClientApp semantics (Context from the SuperNode, state on
disk) are Flower's.

Data holder's allowlist: with ``--allowed-fabs FILE`` (one FAB sha256 per line, ``#`` comments;
read at every task, so edits apply without a restart) a ClientApp task whose app is not listed is
refused before any of its code is loaded. The SuperLink decides which app a run ships; the node
owner decides which apps may touch its data (``fedgs deploy app-hash`` prints fedgs' hash).
``--spawn``: start task processes as Flower does (a fresh interpreter each), keeping the
allowlist. ``--doorbell NAME``: ask the SuperNode for a task as soon as it rings that bell, its
poll interval only the fallback (:mod:`fedgs.deploy.doorbell`).

Use it in place of ``flower-superexec`` for a SuperNode started with ``--isolation process``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.common.logger import log
from flwr.supercore.cli.flower_superexec import flower_superexec
from flwr.supercore.constant import ExecutorType, TaskType
from flwr.supercore.superexec import run_superexec as superexec_loop
from flwr.supercore.superexec.executor import ExecutionSpec, LaunchResult
from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
from flwr.supercore.tls import validate_and_resolve_root_certificates
from flwr.supernode.runtime.run_clientapp import run_clientapp

from fedgs.deploy.app_bundle import read_allowlist
from fedgs.deploy.doorbell import answer_rings
from fedgs.deploy.flower_waits import shorten_object_pulls


class ForkingExecutor(SubprocessExecutor):
    """Starts ClientApp tasks by ``fork()`` (other task types as Flower does), or all tasks as
    Flower does with ``fork=False``; with ``allowlist``, only ClientApp tasks of listed FABs."""

    def __init__(
        self, fork: bool = True, allowlist: Callable[[], frozenset[str]] | None = None
    ) -> None:
        super().__init__()
        self.fork = fork
        self.allowlist = allowlist

    def launch(self, spec: ExecutionSpec) -> LaunchResult:
        if spec.task_type == TaskType.CLIENT_APP and self.allowlist is not None:
            if (spec.fab_hash or "").lower() not in self.allowlist():
                log(
                    logging.ERROR,
                    "Refused ClientApp task %d: its app (FAB %s) is not on this node's "
                    "allowlist; no code of it was loaded",
                    spec.task_id,
                    spec.fab_hash,
                )
                return LaunchResult.failed(f"FAB {spec.fab_hash} is not on this node's allowlist")
        if spec.task_type != TaskType.CLIENT_APP or not self.fork:
            return super().launch(spec)
        pid = os.fork()
        if pid == 0:
            os._exit(_run_task(spec))  # never return into the SuperExec's loop
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        """Reap finished ClientApp processes (called by the loop before each poll)."""
        if not self.fork:
            return super().reconcile()
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return


def _run_task(spec: ExecutionSpec) -> int:
    """The forked child: Flower's ClientApp process body; returns its exit code."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    if spec.suppress_output:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    try:
        run_clientapp(
            runtime_api_address=spec.runtime_api_address,
            token=spec.token,
            insecure=spec.insecure,
            certificates=validate_and_resolve_root_certificates(
                spec.root_certificates_path, spec.insecure
            ),
            parent_pid=spec.parent_pid,
            runtime_dependency_install=spec.runtime_dependency_install,
        )
    except SystemExit as done:  # run_clientapp ends with flwr_exit
        return done.code if isinstance(done.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child must not unwind into the parent's code
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


def _executor_factory(executor: ForkingExecutor) -> Callable[..., Any]:
    """Flower's executor factory, with ``executor`` for local subprocesses."""
    flower_factory = superexec_loop.get_executor

    def factory(executor_type: ExecutorType, *args: Any, **kwargs: Any) -> Any:
        if executor_type == ExecutorType.SUBPROCESS:
            return executor
        return flower_factory(executor_type, *args, **kwargs)

    return factory


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--preload", action="append", default=[])
    parser.add_argument("--spawn", action="store_true")
    parser.add_argument("--allowed-fabs", type=Path)
    parser.add_argument("--doorbell")
    ours, flower_args = parser.parse_known_args(argv)
    allowlist = None
    if ours.allowed_fabs is not None:
        path = ours.allowed_fabs
        read_allowlist(path)  # a missing or unreadable file fails now, not at the first task
        allowlist = lambda: read_allowlist(path)  # noqa: E731 - re-read at every task
    for module in ours.preload:
        importlib.import_module(module)  # paid once, inherited by every forked ClientApp
    if not ours.spawn:
        shorten_object_pulls()  # a forked ClientApp retries its message's content after 20 ms
    if ours.doorbell:
        answer_rings(ours.doorbell)  # ask for a task as soon as the SuperNode rings
    executor = ForkingExecutor(fork=not ours.spawn, allowlist=allowlist)
    # the one factory Flower offers no option for
    superexec_loop.get_executor = _executor_factory(executor)
    sys.argv = ["flower-superexec", *flower_args]
    flower_superexec()


if __name__ == "__main__":
    main()
