"""`fedgs comm-cost` on bad input: a clear one-line error and exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedgs.cli import main


def test_a_data_directory_the_dataset_takes_not_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["comm-cost", "--steps", "1", "--data-dir", str(tmp_path), "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 2
    assert out.startswith("fedgs comm-cost: error:") and "takes no data directory" in out
