"""``python -m fedgs.deploy.superexec``: Flower's SuperExec, forking ClientApp processes warm.

Flower 1.41 runs every message a SuperNode receives in a fresh ``flwr-clientapp`` process (its
warm executor pools cover other task types, on Kubernetes only). A fresh interpreter imports
Flower, torch and the app again: seconds per message on a small CPU, which dominated a
deployment's step. This SuperExec is ``flower-superexec`` with the same flags and the same task
loop; only the way a task's process starts differs: the SuperExec imports the ``--preload``
modules once (e.g. ``fedgs.client.app``) and ``fork()``s each ClientApp process from itself, and
the child runs Flower's own ``run_clientapp``. Each message still gets a fresh process that
shares no memory with the next, so the ClientApp semantics (Context from the SuperNode, state on
disk) are Flower's.

Use it in place of ``flower-superexec`` for a SuperNode started with ``--isolation process``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from typing import Any

from flwr.supercore.cli.flower_superexec import flower_superexec
from flwr.supercore.constant import ExecutorType, TaskType
from flwr.supercore.superexec import run_superexec as superexec_loop
from flwr.supercore.superexec.executor import ExecutionSpec, LaunchResult
from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
from flwr.supercore.tls import validate_and_resolve_root_certificates
from flwr.supernode.runtime.run_clientapp import run_clientapp


class ForkingExecutor(SubprocessExecutor):
    """Starts ClientApp tasks by ``fork()`` (other task types as Flower does)."""

    def launch(self, spec: ExecutionSpec) -> LaunchResult:
        if spec.task_type != TaskType.CLIENT_APP:
            return super().launch(spec)
        pid = os.fork()
        if pid == 0:
            os._exit(_run_task(spec))  # never return into the SuperExec's loop
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        """Reap finished ClientApp processes (called by the loop before each poll)."""
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


_flower_executor = superexec_loop.get_executor


def _executor(executor_type: ExecutorType, *args: Any, **kwargs: Any) -> Any:
    """Flower's executor factory, with ForkingExecutor for local subprocesses."""
    if executor_type == ExecutorType.SUBPROCESS:
        return ForkingExecutor()
    return _flower_executor(executor_type, *args, **kwargs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--preload", action="append", default=[])
    ours, flower_args = parser.parse_known_args(argv)
    for module in ours.preload:
        importlib.import_module(module)  # paid once, inherited by every forked ClientApp
    superexec_loop.get_executor = _executor  # the one factory Flower offers no option for
    sys.argv = ["flower-superexec", *flower_args]
    flower_superexec()


if __name__ == "__main__":
    main()
