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

Allowlist: with ``--allowed-fabs FILE`` (one FAB sha256 per line, ``#`` comments; read at
every task, so edits apply without a restart) a ClientApp or ServerApp task whose app is not
listed is refused before any of its code is loaded. The SuperLink decides which app a run ships;
the node owner decides which apps may touch its data, and the operator which ServerApps run on
the operator's machine as the operator's user (``fedgs deploy app-hash`` prints fedgs' hash).
A refused ServerApp task ends its run ``finished:failed`` with the reason as its details.
A refused task still ends as Flower's SuperNode needs it to: the node waits for a reply to each
message before it takes the next, and a task its SuperExec only declines goes back to pending
and is declined again forever, so one foreign run would silence the node for every later run.
A refusal therefore takes the task (its message, no code), replies with error 4403 (the code of
``client.app``'s refusals) and marks the task failed.
``--spawn``: start task processes as Flower does (a fresh interpreter each), keeping the
allowlist. ``--doorbell NAME``: ask the SuperNode for a task as soon as it rings that bell,
its poll interval only the fallback (:mod:`fedgs.deploy.doorbell`). A runtime API address
``unix:PATH`` (a SuperLink's private Unix socket) is dialled through that socket, by this
process and by the task processes it starts (fedgs.deploy.unix_socket). ``--ready-file PATH``:
removed at start, written once the runtime API has answered a task poll (authenticated with the
SuperExec secret), what compose's health check of the container tests; a SuperExec that never
reached its SuperLink or SuperNode never writes it.

Use it in place of ``flower-superexec`` for a SuperNode started with ``--isolation process``.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import inspect
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.app import Error, Message
from flwr.common.constant import SubStatus
from flwr.common.logger import log
from flwr.proto.runtime_pb2 import PullTaskInputRequest, PushTaskOutputRequest
from flwr.supercore.cli.flower_superexec import flower_superexec
from flwr.supercore.constant import (
    TASK_TYPE_TO_APPIO_API_ADDRESS_ARG,
    TASK_TYPE_TO_COMMAND,
    ExecutorType,
    TaskType,
)
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supercore.superexec import run_superexec as superexec_loop
from flwr.supercore.superexec.executor import ExecutionSpec, LaunchResult
from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
from flwr.supercore.tls import validate_and_resolve_root_certificates
from flwr.supernode.runtime.run_clientapp import (
    pull_task_input,
    push_message,
    push_task_output,
    run_clientapp,
)

from fedgs.deploy.app_bundle import read_allowlist
from fedgs.deploy.doorbell import answer_rings
from fedgs.deploy.flower_waits import require, shorten_object_pulls
from fedgs.deploy.unix_socket import command, route_unix_addresses, socket_path

ERROR_REFUSED = 4403  # client.app's code for a request the node will not serve (not imported:
# that module loads the whole client)
REFUSABLE = (TaskType.CLIENT_APP, TaskType.SERVER_APP)  # the task types an allowlist covers


class ForkingExecutor(SubprocessExecutor):
    """Starts ClientApp tasks by ``fork()`` (other task types as Flower does), or all tasks as
    Flower does with ``fork=False``; with ``allowlist``, only ClientApp and ServerApp tasks of
    listed FABs."""

    def __init__(
        self,
        fork: bool = True,
        allowlist: Callable[[], frozenset[str]] | None = None,
        answered: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.fork = fork
        self.allowlist = allowlist
        self.children: set[int] = set()  # forked task processes not reaped yet
        self.answered = answered  # called once the runtime API answered the first task poll
        self.reconciles = 0

    def launch(self, spec: ExecutionSpec) -> LaunchResult:
        if self.allowlist is not None and spec.task_type in REFUSABLE:
            if (spec.fab_hash or "").lower() not in self.allowlist():
                return self._refuse(spec)
        if spec.task_type == TaskType.CLIENT_APP and self.fork:
            return self._start(spec, lambda: _run_task(spec))
        if socket_path(spec.runtime_api_address) is not None:
            return _spawn_routed(spec)
        return super().launch(spec)

    def _refuse(self, spec: ExecutionSpec) -> LaunchResult:
        """End a task of an app not on the allowlist without loading any of its code."""
        whose = "this node's" if spec.task_type == TaskType.CLIENT_APP else "the operator's"
        kind = "ClientApp" if spec.task_type == TaskType.CLIENT_APP else "ServerApp"
        log(
            logging.ERROR,
            "Refused %s task %d: its app (FAB %s) is not on %s allowlist; no code of it was loaded",
            kind,
            spec.task_id,
            spec.fab_hash,
            whose,
        )
        reason = f"refused: app (FAB {spec.fab_hash}) is not on {whose} allowlist"
        if spec.task_type == TaskType.CLIENT_APP:
            return self._start(spec, lambda: _refuse_task(spec, reason))
        return self._start(spec, lambda: _refuse_serverapp(spec, reason))

    def _start(self, spec: ExecutionSpec, body: Callable[[], int]) -> LaunchResult:
        """Run ``body`` in a child forked from this process (it never returns into the loop);
        a fork that fails leaves the task to Flower's expiry, which hands it out again."""
        try:
            pid = os.fork()
        except OSError as error:
            return LaunchResult.failed(f"could not fork task {spec.task_id}: {error}")
        if pid == 0:
            os._exit(_in_child(body))
        self.children.add(pid)
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        """Reap finished forked task processes (called by the loop before each poll: the second
        call follows the first poll's answer, and calls ``answered``)."""
        self.reconciles += 1
        if self.reconciles == 2 and self.answered is not None:
            self.answered()
        if not self.fork:
            super().reconcile()
        for pid in list(self.children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done == pid:
                self.children.discard(pid)


def _in_child(body: Callable[[], int]) -> int:
    """A forked task process: Flower's signal defaults, then ``body``'s exit code."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    try:
        return body()
    except BaseException:  # noqa: BLE001 - the child must not unwind into the parent's code
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _spawn_routed(spec: ExecutionSpec) -> LaunchResult:
    """Flower's task process (SubprocessExecutor.launch's command line), started through
    fedgs.deploy.unix_socket: Flower's own would dial ``unix:PATH`` as a TCP host."""
    args = command(TASK_TYPE_TO_COMMAND[spec.task_type])
    args += [TASK_TYPE_TO_APPIO_API_ADDRESS_ARG[spec.task_type], spec.runtime_api_address]
    args += ["--token", spec.token]
    if spec.insecure:
        args.append("--insecure")
    elif spec.root_certificates_path is not None:
        args += ["--root-certificates", spec.root_certificates_path]
    if spec.parent_pid is not None:
        args += ["--parent-pid", str(spec.parent_pid)]
    if spec.runtime_dependency_install:
        args.append("--allow-runtime-dependency-installation")
    quiet = subprocess.DEVNULL if spec.suppress_output else None
    subprocess.Popen(args, stdout=quiet, stderr=quiet)  # noqa: S603 - reaped as Flower's are
    return LaunchResult.accepted()


def _runtime_client(spec: ExecutionSpec, component: str, retries: Any) -> RuntimeHttpClient:
    """A client of the runtime API the task's process would dial, as ``component``."""
    return RuntimeHttpClient.from_server_address(
        server_address=spec.runtime_api_address,
        insecure=spec.insecure,
        root_certificates=validate_and_resolve_root_certificates(
            spec.root_certificates_path, spec.insecure
        ),
        interceptors=[
            RuntimeVersionHttpInterceptor(component_name=component),
            RuntimeTokenHttpInterceptor(spec.token),
        ],
        retry_invoker=retries,
    )


def _refuse_serverapp(spec: ExecutionSpec, reason: str) -> int:
    """Take the task as a ServerApp process would (its run and FAB, never installed) and end it
    failed with ``reason``: the run ends ``finished:failed`` and says why."""
    retries = make_simple_http_retry_invoker()
    client = _runtime_client(spec, "flwr-serverapp", retries)
    try:
        task = client.PullTaskInput(PullTaskInputRequest())
        retries.max_tries = 1
        output = PushTaskOutputRequest(
            context=task.context, sub_status=SubStatus.FAILED, details=reason
        )
        client.PushTaskOutput(output)
    finally:
        client.close()
    return 0


def _refuse_task(spec: ExecutionSpec, reason: str) -> int:
    """Take the task as a ClientApp process would (its message, not its app), reply with error
    ERROR_REFUSED and mark the task failed, so the SuperNode sends the reply and goes on. Only
    after the reply: Flower's node stores no reply for a ClientApp task that ends failed."""
    retries = make_simple_http_retry_invoker()
    client = _runtime_client(spec, "flwr-clientapp", retries)
    # on an error the task's claim expires: Flower hands out a task not taken yet again, and
    # replies "ClientApp stopped responding" for one taken
    try:
        message, context, _, _ = pull_task_input(client)  # the FAB's bytes, never installed
        push_message(client, Message(Error(ERROR_REFUSED, reason), reply_to=message), context)
        retries.max_tries = 1  # as Flower's ClientApp ends: the task's end, not a long retry
        push_task_output(client, None, SubStatus.FAILED, reason)
    finally:
        client.close()
    return 0


def _run_task(spec: ExecutionSpec) -> int:
    """The forked child: Flower's ClientApp process body; returns its exit code."""
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
    return 0


def _executor_factory(executor: ForkingExecutor) -> Callable[..., Any]:
    """Flower's executor factory, with ``executor`` for local subprocesses."""
    flower_factory = superexec_loop.get_executor

    def factory(executor_type: ExecutorType, *args: Any, **kwargs: Any) -> Any:
        if executor_type == ExecutorType.SUBPROCESS:
            return executor
        return flower_factory(executor_type, *args, **kwargs)

    return factory


def ready_file(path: Path, loop: Any = superexec_loop) -> Callable[[], None]:
    """Remove ``path`` now (and at exit); return what writes it. Flower's task ``loop`` calls
    the executor's ``reconcile()`` before each ``AcquireTask`` poll, and the poll retries until
    the runtime API answers (or gives up and ends the process), so ``reconcile``'s second call
    follows an answered poll."""
    source = inspect.getsource(loop.run_superexec)
    reconcile, poll = "executor.reconcile()", "client.AcquireTask("
    require(
        reconcile in source and poll in source and source.index(reconcile) < source.index(poll),
        f"{loop.__name__}.run_superexec calls executor.reconcile() before each AcquireTask",
    )
    path.unlink(missing_ok=True)  # a file from a previous start says nothing about this one
    atexit.register(path.unlink, missing_ok=True)  # the loop's end; forked tasks skip atexit
    return lambda: path.write_text("ready\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--preload", action="append", default=[])
    parser.add_argument("--spawn", action="store_true")
    parser.add_argument("--allowed-fabs", type=Path)
    parser.add_argument("--doorbell")
    parser.add_argument("--ready-file", type=Path)
    ours, flower_args = parser.parse_known_args(argv)
    answered = ready_file(ours.ready_file) if ours.ready_file is not None else None
    route_unix_addresses()  # a runtime API at unix:PATH, this process's and its tasks'
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
    executor = ForkingExecutor(fork=not ours.spawn, allowlist=allowlist, answered=answered)
    # the one factory Flower offers no option for
    superexec_loop.get_executor = _executor_factory(executor)
    sys.argv = ["flower-superexec", *flower_args]
    flower_superexec()


if __name__ == "__main__":
    main()
