"""fedgs.deploy.supernode starts the SuperNode again while the SuperLink refuses its activation.

Flower prints "Exit Code: 305" and ends with status 1 (every Flower error does), so the wrapper
must read the code from the output: checking the exit status for 305 never matched, the
container exited and Compose 1.29 failed the second `up` after a `down` ("is unhealthy").
Driven here by a stand-in SuperNode that fails like Flower's a given number of times.

``--activated-file``: compose's health check of a SuperNode tests that file, so it must appear
only once Flower's SuperNode says the SuperLink activated it, and never survive a restart.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from fedgs.deploy import supernode

STAND_IN = """
import sys
from pathlib import Path
tries = Path(sys.argv[1])
count = int(tries.read_text() or 0) + 1 if tries.exists() else 1
tries.write_text(str(count))
if count <= int(sys.argv[2]):
    print(sys.argv[3]); print("Failed to activate SuperNode."); sys.exit(1)
print("node ran", flush=True)
sys.exit(int(sys.argv[4]))
"""


def _run(tries: Path, refusals: int, line: str, final: int) -> tuple[int, int]:
    code = supernode.main(
        [str(tries), str(refusals), line, str(final)],
        command=[sys.executable, "-c", STAND_IN],
    )
    return code, int(tries.read_text())


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supernode, "RETRY_SECONDS", 0.0)


REFUSED = "\x1b[91mERROR \x1b[0m:     Exit Code: 305"  # Flower's line, log level in colour


def test_refused_activation_is_tried_again_until_the_node_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, tries = _run(tmp_path / "tries", refusals=2, line=REFUSED, final=0)
    assert (code, tries) == (0, 3)
    out = capsys.readouterr().out
    assert out.count("Failed to activate SuperNode.") == 2  # Flower's output passes through
    assert out.count("still counts this node online") == 2 and "node ran" in out


def test_other_failures_pass_through_at_once(tmp_path: Path) -> None:
    assert _run(tmp_path / "tries", refusals=1, line="Exit Code: 304", final=0) == (1, 1)
    assert _run(tmp_path / "second", refusals=0, line="", final=3)[0] == 3


def test_patience_runs_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supernode, "PATIENCE_SECONDS", 0.0)
    assert _run(tmp_path / "tries", refusals=5, line=REFUSED, final=0) == (1, 1)


ACTIVATED = "\x1b[92mINFO \x1b[0m:      SuperNode ID: 8164305113447036040\n"  # Flower's line

# a SuperNode refused `refusals` times, then activated (saying `line`, unless `never`): each
# start records whether the marker file existed then, the activated one whether the wrapper wrote
# it while the node still ran
ACTIVATING = """
import sys, time
from pathlib import Path
tries, marker, refusals = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
assert not any(a.startswith("--activated-file") for a in sys.argv), sys.argv  # the wrapper's
count = int(tries.read_text() or 0) + 1 if tries.exists() else 1
tries.write_text(str(count))
def record(what):
    with open(str(tries) + ".log", "a") as log:
        log.write(f"{what}: marker {'present' if marker.exists() else 'absent'}\\n")
record(f"start {count}")
if count <= refusals:
    print("ERROR :     Exit Code: 305", flush=True); sys.exit(1)
if sys.argv[4] == "never":
    print("INFO :      Starting Flower SuperNode", flush=True); time.sleep(1); sys.exit(0)
print(sys.argv[5], end="", flush=True)
deadline = time.monotonic() + 30
while not marker.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
record("activated")
"""


def _activating(tmp_path: Path, refusals: int, mode: str) -> tuple[int, list[str], Path]:
    tries, marker = tmp_path / "tries", tmp_path / "tmp" / "activated"
    marker.parent.mkdir()
    marker.write_text("left by the container's previous start\n")
    code = supernode.main(
        ["--activated-file", str(marker), str(tries), str(marker), str(refusals), mode, ACTIVATED],
        command=[sys.executable, "-c", ACTIVATING],
    )
    return code, Path(f"{tries}.log").read_text().splitlines(), marker


def test_the_activated_file_appears_once_flower_says_the_node_is_activated(
    tmp_path: Path,
) -> None:
    code, log, marker = _activating(tmp_path, refusals=2, mode="activate")
    assert code == 0
    assert log == [
        "start 1: marker absent",  # a stale file from before goes before the first start
        "start 2: marker absent",
        "start 3: marker absent",
        "activated: marker present",  # written while the node runs, after Flower's line
    ]
    assert not marker.exists()  # the node stopped: no longer activated


def test_no_activated_file_while_the_node_never_activates(tmp_path: Path) -> None:
    code, log, marker = _activating(tmp_path, refusals=0, mode="never")
    assert (code, log) == (0, ["start 1: marker absent"])
    assert not marker.exists()


def test_pass_through_reports_activation_once_and_copies_every_line() -> None:
    calls: list[str] = []
    out = io.StringIO()
    lines = [
        "INFO :      Starting Flower SuperNode\n",
        "INFO :      SuperNode Fleet API address: superlink:9093\n",  # not the activation
        ACTIVATED,
        "INFO :      [RUN 1, ROUND ]\n",
        ACTIVATED,
    ]
    # called once, right after the activation line was copied (what was copied by then)
    assert not supernode.pass_through(lines, out, lambda: calls.append(out.getvalue()))
    assert calls == ["".join(lines[:3])] and out.getvalue() == "".join(lines)
    assert supernode.pass_through([REFUSED + "\n"], io.StringIO(), lambda: calls.append("x"))
    assert len(calls) == 1  # a refused node never counts as activated
