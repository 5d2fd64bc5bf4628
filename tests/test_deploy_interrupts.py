"""An interrupt of `fedgs deploy local` is exit 130 in every phase, whoever started it.

A CI run once saw the launcher exit 0 after the Ctrl-C of tests/test_deploy_local.py: started as
a non-interactive shell's background job it inherited SIGINT ignored (Python keeps that), so the
interrupt was lost and the run went on to its end. The clean-up also ignored SIGINT, so a Ctrl-C
as a finished run's deployment stopped was lost too. No deployment is started here.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedgs.deploy import launcher, ports
from fedgs.deploy.launcher import LocalDeployment, LocalOptions

# `fedgs deploy local` whose run is a wait that ends "completed" (what a real run would report)
FAKE_RUN = """
import sys, time
from fedgs.cli import main
from fedgs.deploy import launcher
from fedgs.training import run_dir

def run_local(out, options, run_config, stream=sys.stdout):
    print("running", flush=True)
    time.sleep(20)
    return launcher.RunResult(1, "finished:completed", "")

launcher.run_local = run_local
run_dir.summarize = lambda folder: "summary"
sys.exit(main(["deploy", "local", "--nodes", "1", "--out", sys.argv[1]]))
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `cmd &` in a script does to cmd


def test_ctrl_c_stops_a_launcher_started_with_sigint_ignored(tmp_path: Path) -> None:
    launched = subprocess.Popen(
        [sys.executable, "-c", FAKE_RUN, str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint,
        start_new_session=True,
    )
    try:
        assert launched.stdout is not None
        assert launched.stdout.readline() == "running\n"
        launched.send_signal(signal.SIGINT)
        assert launched.wait(timeout=15) == 130, launched.stderr.read() if launched.stderr else ""
    finally:
        if launched.poll() is None:
            launched.kill()
            launched.wait()


def test_ctrl_c_during_the_clean_up_is_an_interrupt_once_it_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ports.LOCK_DIR_ENV, str(tmp_path / "locks"))
    deployment = LocalDeployment(tmp_path / "out", LocalOptions(nodes=1))
    stopped = []

    def stop_interrupted(components: list, marker: str) -> list[int]:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C while the processes stop
        stopped.append(marker)
        return []

    monkeypatch.setattr(launcher.processes, "stop", stop_interrupted)
    # Python's own Ctrl-C handler, whatever the test run inherited (a job started in the
    # background by a non-interactive shell starts with SIGINT ignored)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            deployment.stop()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert stopped == [deployment.marker]  # the clean-up ran to its end first
    assert list((tmp_path / "locks").glob("*.lock")) == []  # and released the ports
