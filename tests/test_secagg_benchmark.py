"""benchmarks/secagg_step_time.py's in-process part at a tiny size: it runs a whole secure step
and the plain sanitizer and prints a table with both paths. A test of the script, never of a
time: timings on shared or CI machines mean nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "secagg_step_time.py"
# what the script runs, named so that tests/INDEX.md lists this file under each
RUNS = (
    "fedgs.secagg.client",
    "fedgs.secagg.server",
    "fedgs.privacy.distributed_noise",
    "fedgs.privacy.sanitizer",
)


def test_the_protocol_part_prints_both_paths(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--parts", "protocol", "--m", "3", "4", "--repeats", "1",
         "--batch-size", "2", "--row-length", "16", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert out.startswith("$ ") and "secagg_step_time.py --parts protocol" in out
    assert "plain: sanitize ms/client" in out and "secure: encode ms/client" in out
    assert "| share keys | masked input | unmask (ms/client) |" in out
    assert "load average before" in out
    rows = [line for line in out.splitlines() if line.startswith(("| 3 |", "| 4 |"))]
    assert len(rows) == 2
    # m, t, m_min by RunConfig's rules: t = (m - 1) // 2 + 1, m_min = max(3, m - m // 10)
    assert rows[0].startswith("| 3 | 2 | 3 |") and rows[1].startswith("| 4 | 2 | 4 |")
    result = json.loads((tmp_path / "secagg_step_time.json").read_text())
    assert "simulation" not in result
    for row in result["protocol"]:
        assert row["length"] == 32  # 2 x 16 values, a power of two already
        assert row["plain_cohort_s"] > 0 and row["secure_cohort_s"] > 0
        assert all(row[f"{stage}_ms_per_client"] > 0 for stage in ("setup", "share_keys"))
