"""`fedgs simulate` as a user runs it: a real process and Flower simulation, then kill + resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedgs.privacy import PrivacyLedger

pytestmark = pytest.mark.slow

SMALL = [
    "--num-clients",
    "6",
    "--batch-size",
    "8",
    "--critic-steps",
    "2",
    "--generator-width",
    "4",
    "--critic-width",
    "4",
    "--warm-start-steps",
    "1",
    "--ray-cpus",
    "2",
    "--object-store-mb",
    "256",
]


def _command(run_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "fedgs.cli", "simulate", *SMALL, "--out", str(run_dir), *args]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def _ledger_total(path: Path) -> int:
    return sum(PrivacyLedger.from_json(path.read_text()).query_counts().values())


def _client_actor_niceness(group: int) -> list[int]:
    """Niceness of the Ray actors (they run the ClientApps) in a process group."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().rsplit(")", 1)
            fields = rest.split()
            if (
                int(fields[2]) == group
                and "ClientAppActor" in name + (stat.parent / "cmdline").read_text()
            ):
                found.append(int(fields[16]))  # field 19 of /proc/PID/stat: nice
        except (OSError, ValueError, IndexError):
            continue
    return found


def _client_ledgers_total(state_dir: Path) -> int:
    total = 0
    for path in state_dir.glob("*.pt"):
        state = torch.load(path, weights_only=True)
        total += sum(PrivacyLedger.from_json(state["ledger"]).query_counts().values())
    return total


def test_simulate_writes_every_output(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        _command(run_dir, "--steps", "6", "--eval-every", "3", "--eval-samples", "200"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert str(run_dir / "privacy.json") in done.stdout and "untrusted server" in done.stdout
    assert "client replies: 6 answered, 0 dropped of 6 asked" in done.stdout
    terminal = done.stdout + done.stderr  # Flower's and Ray's own output went to flower.log
    assert "FutureWarning" not in terminal and "DEPRECATED" not in terminal
    assert "DEPRECATED" in (run_dir / "flower.log").read_text()

    rows = _rows(run_dir)
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    epsilons = [float(r["epsilon_untrusted"]) for r in rows]
    assert epsilons == sorted(epsilons) and epsilons[0] > 0
    scored = [r for r in rows if r["fid_domain"]]
    assert [int(r["step"]) for r in scored] == [3, 6]
    assert all(0 <= float(r["label_agreement"]) <= 1 for r in scored)
    untrained = json.loads((run_dir / "initial_scores.json").read_text())
    assert 0 < untrained["classifier_test_accuracy"] <= 1 and untrained["fid_domain"] > 0
    assert "domain classifier (FID, IS, label agreement): accuracy" in done.stdout

    privacy = json.loads((run_dir / "privacy.json").read_text())
    assert privacy["untrusted_server"]["threat_model"] and privacy["accountant"] == "autodp-rdp"
    assert privacy["queries"]["total"] == 6 and privacy["steps"] == 6
    assert privacy["untrusted_server"]["epsilon"] == pytest.approx(epsilons[-1])
    assert privacy["trusted_sampler"]["epsilon"] > 0

    assert (run_dir / "samples" / "step_000006.png").stat().st_size > 0
    model = torch.load(run_dir / "generator.pt", weights_only=True)
    assert {"generator", "ema", "num_classes"} <= set(model)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["steps"] == 6 and config["num-clients"] == 6
    assert len(list((run_dir / "client-state").glob("*.pt"))) == 6  # every client warm-started


def test_spent_time_budget_ends_the_run_with_every_output(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(  # 0.6 ms: spent before the first step, which is then the last
        _command(run_dir, "--steps", "500", "--max-minutes", "0.00001", "--eval-samples", "200"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "budget spent" in done.stdout + done.stderr
    rows = _rows(run_dir)
    assert [int(r["step"]) for r in rows] == [1]
    assert rows[0]["fid_domain"]  # the last step is scored even off the eval schedule
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["step"] == 1
    assert json.loads((run_dir / "privacy.json").read_text())["steps"] == 1
    assert (run_dir / "generator.pt").stat().st_size > 0


def _processes_in_group(group: int) -> list[str]:
    """The live processes of a process group (the driver and the Ray processes it started)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().rsplit(")", 1)
            fields = rest.split()
            if int(fields[2]) == group and fields[0] != "Z":
                found.append(name.split("(", 1)[1])
        except (OSError, ValueError, IndexError):
            continue
    return found


def _assert_stopped_cleanly(process: subprocess.Popen, err: Path, asked: float, what: str) -> str:
    """A stopped run: exit 130 within 30 s of the signal, no Ray process left, one line saying
    where the run is and how to go on, and no traceback or crash dump anywhere."""
    process.wait(timeout=60)
    assert time.monotonic() - asked < 30, "the run took too long to stop"
    terminal = err.read_text()
    assert process.returncode == 130, terminal[-3000:]
    lines = [line for line in terminal.splitlines() if "fedgs simulate: stopped" in line]
    assert len(lines) == 1 and what in lines[0] and "fedgs simulate --resume --out" in lines[0]
    for dump in ("Traceback", "Fatal Python error", "most recent call first", "received at"):
        assert dump not in terminal, terminal[-3000:]
    deadline = time.monotonic() + 15
    while left := _processes_in_group(process.pid):
        assert time.monotonic() < deadline, f"left running: {left}"
        time.sleep(0.5)
    return lines[0]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_killed_or_interrupted_run_resumes_with_its_ledger_intact(
    tmp_path: Path, how: signal.Signals
) -> None:
    """SIGKILL: the steps after the checkpoint are run again, and what they paid stays paid.
    SIGINT (Ctrl-C to the terminal's process group): the run stops after the step in flight with
    every step done checkpointed, so the resumed run repeats none and pays nothing twice."""
    run_dir = tmp_path / "run"
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        process = subprocess.Popen(
            _command(run_dir, "--steps", "40", "--checkpoint-every", "3", "--eval-every", "0"),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    ledger_file = run_dir / "ledger.json"
    try:
        deadline = time.monotonic() + 600
        while not (ledger_file.exists() and _ledger_total(ledger_file) >= 5):
            assert process.poll() is None, "the run ended before it could be stopped"
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.2)
        # the actors do the clients' work: not niced below the driver (Ray's default is 15)
        niceness = _client_actor_niceness(process.pid)
        assert niceness and set(niceness) == {os.nice(0)}, niceness
        os.killpg(process.pid, how)  # the driver and every Ray process it started
        asked = time.monotonic()
        if how == signal.SIGINT:
            _assert_stopped_cleanly(process, err, asked, "stopped after step")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    checkpoint_step = torch.load(run_dir / "checkpoint.pt", weights_only=True)["step"]
    paid_at_stop = _ledger_total(ledger_file)
    if how == signal.SIGKILL:
        assert checkpoint_step % 3 == 0 and checkpoint_step < 12
        assert paid_at_stop >= checkpoint_step
    else:  # every step done is in the checkpoint, and its row in metrics.csv
        assert 5 <= checkpoint_step < 12 and paid_at_stop == checkpoint_step
        assert [int(r["step"]) for r in _rows(run_dir)] == list(range(1, checkpoint_step + 1))
        assert "step_in_flight" not in json.loads((run_dir / "privacy.json").read_text())

    done = subprocess.run(
        _command(
            run_dir, "--steps", "12", "--checkpoint-every", "3", "--eval-every", "0", "--resume"
        ),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the steps after the checkpoint are run again, but what was paid stays paid
    server_total = _ledger_total(ledger_file)
    assert server_total == paid_at_stop + (12 - checkpoint_step)
    privacy = json.loads((run_dir / "privacy.json").read_text())
    assert privacy["steps"] == 12 and privacy["queries"]["total"] == server_total
    # each client's own ledger agrees, up to the one query in flight when the run was killed:
    # the server paid for it when it sent it, the client may not have answered
    assert server_total - _client_ledgers_total(run_dir / "client-state") in (0, 1)
    steps = [int(r["step"]) for r in _rows(run_dir)]
    assert steps[-1] == 12
    if how == signal.SIGINT:  # nothing repeated: twelve steps, twelve queries, one row each
        assert steps == list(range(1, 13)) and server_total == 12
        assert _client_ledgers_total(run_dir / "client-state") == 12


def _unwritable_state_dir(tmp_path: Path) -> Path:
    """A client-state folder no client can create (a file is in its way): every client fails
    on its first request, through the real ClientApp on Ray."""
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way\n")
    return blocker / "client-state"


def test_run_whose_clients_all_fail_stops_with_the_client_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        _command(run_dir, "--steps", "40", "--warm-start-steps", "0", "--eval-every", "0")
        + ["--max-unanswered-steps", "3", "--state-dir", str(_unwritable_state_dir(tmp_path))],
        capture_output=True,
        text=True,
        timeout=900,
    )
    terminal = done.stdout + done.stderr
    assert done.returncode == 1, terminal[-3000:]
    assert "no client answered in 3 consecutive steps" in done.stdout
    assert "NotADirectoryError" in done.stdout or "a-file" in done.stdout  # the client's own error
    assert "Traceback" not in terminal  # each failure in full is in flower.log, not here
    assert "Traceback" in (run_dir / "flower.log").read_text()
    assert [int(r["answered"]) for r in _rows(run_dir)] == [0, 0, 0]  # stopped after 3 steps


def test_warm_start_that_leaves_no_client_warm_stops_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        _command(run_dir, "--steps", "40", "--eval-every", "0")
        + ["--state-dir", str(_unwritable_state_dir(tmp_path))],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "warm start: none of 6 clients answered; first client error: node" in done.stdout
    assert done.stdout.count("first client error") == 1
    assert not (run_dir / "metrics.csv").exists()  # no step ran on nobody's answers


def _with_public_digits(cache: Path, count: int) -> dict[str, str]:
    """The environment of a run whose public digits are ``count`` pre-rendered ones in
    ``cache`` (its own FEDGS_CACHE), so the run skips the rendering."""
    from fedgs.data.public_digits import RENDER_VERSION, render_digits
    from fedgs.training.public_pretraining import PUBLIC_IMAGES

    cache.mkdir()
    name = f"public_digits-v{RENDER_VERSION}-{PUBLIC_IMAGES}-0.pt"
    torch.save(render_digits(count), cache / name)
    return os.environ | {"FEDGS_CACHE": str(cache)}


def test_public_pretraining_is_recorded_with_the_run(tmp_path: Path) -> None:
    """--public-pretrain-steps: the server pre-trains G before any query, and privacy.json, the
    summary and public_pretraining.json say so (a pre-filled cache skips the rendering)."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        _command(run_dir, "--steps", "2", "--eval-every", "0", "--public-pretrain-steps", "3"),
        capture_output=True,
        text=True,
        timeout=900,
        env=_with_public_digits(tmp_path / "cache", 40),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "public data: G pre-trained for 3 steps" in done.stdout
    privacy = json.loads((run_dir / "privacy.json").read_text())
    assert privacy["public_data"]["pretrain_steps"] == 3 and privacy["queries"]["total"] == 2
    phase = json.loads((run_dir / "public_pretraining.json").read_text())
    assert phase["steps"] == 3 and phase["images"] == 40


def test_fewer_fake_batches_than_critic_steps_through_flower(tmp_path: Path) -> None:
    """--fake-batches 1 under --critic-steps 3 (and the server on 2 threads): one batch goes
    down per query, and every client's critic still takes 3 steps per query."""
    from fedgs.comm import gswgan_protocol_bytes

    run_dir = tmp_path / "run"
    args = ["--steps", "3", "--eval-every", "0", "--critic-steps", "3", "--fake-batches", "1"]
    done = subprocess.run(
        _command(run_dir, *args, "--server-threads", "2"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    one_batch = gswgan_protocol_bytes(8, 1)["down"]
    assert all(one_batch <= int(r["bytes_down"]) < 2 * one_batch for r in _rows(run_dir))
    for path in (run_dir / "client-state").glob("*.pt"):
        state = torch.load(path, weights_only=True)
        queries = sum(PrivacyLedger.from_json(state["ledger"]).query_counts().values())
        adam = state["critic_state"]["optimizer"]["state"][0]["step"]
        assert int(adam) == 1 + 3 * queries  # one warm-start step, then 3 per query


def test_ctrl_c_in_public_pretraining_stops_the_run_and_resume_runs_it_again(
    tmp_path: Path,
) -> None:
    """Ctrl-C while the server pre-trains G (a long computation in Flower's ServerApp thread,
    which never looked at Flower's own stop event) stops the run within seconds, and a second
    Ctrl-C is harmless. Nothing of the half-done pretraining is kept: a resumed run does it again
    (shorter here) and runs to the end."""
    run_dir = tmp_path / "run"
    env = _with_public_digits(tmp_path / "cache", 40)
    err = tmp_path / "stderr.txt"
    args = ["--steps", "2", "--eval-every", "0", "--public-pretrain-steps", "1000000"]
    with err.open("w") as stderr:
        process = subprocess.Popen(
            _command(run_dir, *args),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
            env=env,
        )
    try:
        deadline = time.monotonic() + 600
        while "public pretraining:" not in err.read_text():  # its progress bar is drawn
            assert process.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "pretraining never started"
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        asked = time.monotonic()
        time.sleep(1)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # the impatient user's second Ctrl-C
        line = _assert_stopped_cleanly(process, err, asked, "stopped in public pretraining")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    assert "pretraining starts again on resume" in line and str(run_dir) in line
    assert not (run_dir / "checkpoint.pt").exists() and not (run_dir / "metrics.csv").exists()

    resumed = args[:-1] + ["3", "--resume"]
    done = subprocess.run(
        _command(run_dir, *resumed), capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((run_dir / "public_pretraining.json").read_text())["steps"] == 3
    assert json.loads((run_dir / "privacy.json").read_text())["steps"] == 2
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["step"] == 2


def test_sigterm_in_the_warm_start_stops_the_run_with_its_progress_saved(tmp_path: Path) -> None:
    """SIGTERM to the driver alone (`kill PID`, a scheduler's stop) stops the run as Ctrl-C does,
    though ray.init takes SIGTERM for itself (an exit of Flower's main thread, which left the
    ServerApp running on, and a stack dump from Ray's core) where fedgs does not keep it."""
    run_dir = tmp_path / "run"
    err = tmp_path / "stderr.txt"
    args = ["--steps", "2", "--eval-every", "0", "--warm-start-steps", "150"]
    with err.open("w") as stderr:
        process = subprocess.Popen(
            _command(run_dir, *args),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 600
        while "warm start:" not in err.read_text():
            assert process.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "the warm start never began"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        _assert_stopped_cleanly(process, err, asked, "stopped in the warm start")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    progress = json.loads((run_dir / "warm_start.json").read_text())
    assert progress["steps"] == 150 and not progress["complete"]
    assert not (run_dir / "metrics.csv").exists()
