"""fedgs.deploy.supernode starts the SuperNode again while the SuperLink refuses its activation.

Flower prints "Exit Code: 305" and ends with status 1 (every Flower error does), so the wrapper
must read the code from the output: checking the exit status for 305 never matched, the
container exited and Compose 1.29 failed the second `up` after a `down` ("is unhealthy").
Driven here by a stand-in SuperNode that fails like Flower's a given number of times.
"""

from __future__ import annotations

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
