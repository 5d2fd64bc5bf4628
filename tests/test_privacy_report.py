"""privacy.json: one schema (version 2) for every strategy, and the files written before it.

tests/privacy_v1/ holds the privacy.json each strategy wrote before issue 19 (version 1: no
version field, a strategy tag only for Fed-Avg GAN and the teachers), made by main at 896f7c1
with tests/test_privacy_json_stable.py's settings. Every reader goes through
``fedgs.privacy.report.read_privacy``; these tests feed it those files through each reader.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fedgs.algorithms import STRATEGIES, algorithm
from fedgs.debugging.report import privacy_digest
from fedgs.evaluation.privacy_figures import VOID, run_figures
from fedgs.evaluation.run_files import RunError, RunFiles
from fedgs.privacy.report import VERSION, block_key, headline, privacy_report, read_privacy
from fedgs.training.run_dir import RunDirectory, _privacy_lines

V1 = Path(__file__).parent / "privacy_v1"
# the strategies that wrote version-1 files (dp-merf came after version 2)
OLD_STRATEGIES = tuple(s for s in STRATEGIES if (V1 / f"{s}.json").exists())
sys.path.insert(0, str(Path(__file__).parent))
from test_privacy_json_stable import EXPECTED, _accounted_numbers  # noqa: E402


def _v1(strategy: str) -> dict:
    return json.loads((V1 / f"{strategy}.json").read_text())


def _old_run(root: Path, strategy: str) -> RunFiles:
    out = RunDirectory(root)
    out.write_json(out.config_json, {"strategy": strategy, "dataset": "embedded"})
    out.write_json(out.privacy_json, _v1(strategy))
    return RunFiles.open(root)


@pytest.mark.parametrize("strategy", OLD_STRATEGIES)
def test_version_1_files_read_as_version_2_with_the_same_numbers(strategy: str) -> None:
    old = _v1(strategy)
    assert "version" not in old  # what main wrote before the version field
    privacy = read_privacy(old)  # no config.json hint: the file alone says what it is
    assert privacy["version"] == VERSION and privacy["strategy"] == strategy
    assert privacy["neighbouring"] == algorithm(strategy).neighbouring
    assert _accounted_numbers(privacy) == pytest.approx(EXPECTED[strategy], rel=1e-12)
    block = headline(privacy)
    assert block["threat_model"] == algorithm(strategy).threat_model
    assert block["epsilon"] is not None


@pytest.mark.parametrize("strategy", OLD_STRATEGIES)
def test_fedgs_report_figures_of_an_old_run(strategy: str, tmp_path: Path) -> None:
    run = _old_run(tmp_path, strategy)
    figures = {f.threat_model: f for f in run_figures(run)}
    own = figures[algorithm(strategy).threat_model]
    assert own.epsilon == headline(_v1(strategy) | {"strategy": strategy})["epsilon"]
    assert own.neighbouring == algorithm(strategy).neighbouring and own.delta == 1e-5
    assert all(f.accountant for f in figures.values())
    if strategy in ("gswgan", "fedavg-gan"):  # the sampling seed voids the amplified figure
        amplified = "trusted-sampler" if strategy == "gswgan" else "trusted-server"
        assert figures[amplified].label == VOID


@pytest.mark.parametrize("strategy", OLD_STRATEGIES)
def test_summary_and_digest_of_an_old_file(strategy: str) -> None:
    privacy = read_privacy(_v1(strategy))
    lines = "\n".join(_privacy_lines(privacy))
    assert f"delta={privacy['delta']:g}" in lines and privacy["neighbouring"] in lines
    digest = privacy_digest(_v1(strategy))
    assert digest["steps"] == 2 and digest["delta"] == 1e-5
    own = digest["epsilons"][block_key(algorithm(strategy).threat_model)]
    assert own["neighbouring"] == algorithm(strategy).neighbouring


def test_an_untagged_file_takes_its_strategy_from_config_json(tmp_path: Path) -> None:
    untagged = {k: v for k, v in _v1("pate-gan").items() if k != "strategy"}
    out = RunDirectory(tmp_path)
    out.write_json(out.config_json, {"strategy": "pate-gan"})
    out.write_json(out.privacy_json, untagged)
    assert RunFiles.open(tmp_path).privacy["strategy"] == "pate-gan"


def test_a_newer_version_is_refused_with_the_versions_this_fedgs_reads(tmp_path: Path) -> None:
    out = RunDirectory(tmp_path)
    out.write_json(out.config_json, {"strategy": "gswgan"})
    out.write_json(out.privacy_json, {"version": VERSION + 1, "delta": 1e-5})
    with pytest.raises(RunError, match=f"version {VERSION + 1}.*reads versions 1 to {VERSION}"):
        _ = RunFiles.open(tmp_path).privacy


@pytest.mark.parametrize("strategy", OLD_STRATEGIES)
def test_the_writer_gives_version_2_with_the_old_blocks_unchanged(strategy: str) -> None:
    """Re-writing an old file's parts through the one writer changes only version and tag."""
    old = _v1(strategy)
    sampling = old.pop("sampling")
    summary = {k: v for k, v in old.items() if k not in ("strategy", "steps")}
    for block in summary.values():  # the writer adds the void marks itself
        if isinstance(block, dict) and block.get("holds") is False:
            del block["holds"], block["note"]
    report = privacy_report(strategy, summary, {"steps": old["steps"]}, sampling)
    assert report == _v1(strategy) | {"version": VERSION, "strategy": strategy}


def test_secret_sampling_keeps_the_amplified_figures() -> None:
    sampling = {"amplified_figures_hold": True, "randomness": "secret"}
    block = {"threat_model": "trusted-sampler", "epsilon": 3.0}
    report = privacy_report("gswgan", {"trusted_sampler": block, "delta": 1e-5}, {}, sampling)
    assert "holds" not in report["trusted_sampler"]


def test_a_secure_aggregation_run_headlines_its_secure_figure_not_the_local_one() -> None:
    """A secure run's report holds the local-noise-only block under the strategy's own threat
    model (untrusted server) and names secure-aggregation as its headline: readers quote that."""
    privacy = {
        "strategy": "gswgan",
        "headline": "secure-aggregation",
        "secure_aggregation": {"threat_model": "secure-aggregation", "epsilon": 4.0},
        "untrusted_server": {"threat_model": "untrusted-server", "epsilon": 90.0},
    }
    assert headline(privacy)["epsilon"] == 4.0
    assert headline(privacy | {"headline": None})["epsilon"] == 90.0
