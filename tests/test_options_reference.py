"""The options reference (fedgs.options_reference): docs/options.md and pyproject.toml's
[tool.flwr.app.config] table are what the generator writes from the run config, every field has
a group, `--help` shows the groups, and the experimental group says why each member is there.

(That pyproject's keys and defaults equal RunConfig's, both ways, is
tests/test_run_config.py::test_pyproject_flower_config_mirrors_run_config_defaults.)"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from fedgs.cli import build_parser
from fedgs.options_reference import (
    COMMAND,
    PYPROJECT_HEADER,
    grouped,
    render_markdown,
    render_pyproject,
)
from fedgs.run_config import GROUPS, RunConfig, option

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTAL_PREFIX = "experimental: measured no help (results/log/"


def _pyproject_table(text: str) -> str:
    """The [tool.flwr.app.config] table of pyproject.toml's text, up to the next table."""
    start = text.index(PYPROJECT_HEADER + "\n")
    following = re.search(r"^\[", text[start + 1 :], re.M)
    return text[start : start + 1 + following.start()] if following else text[start:]


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    (commands,) = (a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands[name]


def test_docs_options_md_is_what_the_generator_writes() -> None:
    written = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert written == render_markdown(), f"docs/options.md is stale: run `{COMMAND}`"


def test_pyproject_table_is_what_the_generator_writes() -> None:
    table = _pyproject_table((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert table.rstrip("\n") == render_pyproject().rstrip("\n"), (
        "pyproject.toml's [tool.flwr.app.config] is stale: replace it with the output of "
        "`python -m fedgs.options_reference --pyproject`"
    )


def test_every_field_has_a_known_group_and_a_help() -> None:
    for f in fields(RunConfig):
        assert f.metadata.get("group") in GROUPS, f.name
        assert f.metadata.get("help"), f.name
    members = grouped()
    assert all(members.values()), [name for name, found in members.items() if not found]
    assert sum(len(found) for found in members.values()) == len(fields(RunConfig))


def test_every_group_is_a_table_and_every_key_a_row() -> None:
    text = render_markdown()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == [title for title, _ in GROUPS.values()]
    for f in fields(RunConfig):
        assert len(re.findall(rf"^\| `{f.name.replace('_', '-')}` \|", text, re.M)) == 1, f.name
    assert text.splitlines()[2].startswith("Generated from the run config") and COMMAND in text


def test_the_generated_files_follow_the_config() -> None:
    """Both checks above can fail: another help, default or group changes what is written, and
    a field without a group is refused."""

    @dataclass(frozen=True)
    class Other:
        steps: int = option(200, "training", "private generator steps (fedavg-gan: rounds)")
        run_dir: str = option("runs/simulate", "outputs", "output directory of the run")

    @dataclass(frozen=True)
    class Changed:
        steps: int = option(300, "training", "private generator steps (fedavg-gan: rounds)")
        run_dir: str = option("runs/simulate", "privacy", "output directory of the run")

    assert render_markdown(Other) != render_markdown(Changed)
    assert render_pyproject(Other) != render_pyproject(Changed)
    assert "| `steps` | int | `200` |" in render_markdown(Other)
    assert render_pyproject(Other).splitlines()[-1] == 'run-dir = "runs/simulate"'

    @dataclass(frozen=True)
    class Ungrouped:
        steps: int = 200

    with pytest.raises(ValueError, match="steps"):
        grouped(Ungrouped)
    with pytest.raises(ValueError, match="unknown run-config group"):
        option(1, "no-such-group", "help")


def test_help_text_is_escaped_in_the_tables() -> None:
    text = render_markdown()
    row = next(line for line in text.splitlines() if line.startswith("| `datalens-threshold`"))
    assert "\\|noisy vote sum\\|" in row and row.count(" | ") == 3
    assert "2\\*C\\*sigma" in text


def test_simulate_help_shows_every_option_in_its_group_in_order() -> None:
    parser = _subcommand("simulate")
    titles = [title for title, _ in GROUPS.values()]
    group_of = {
        action.dest: group.title
        for group in parser._action_groups
        for action in group._group_actions
    }
    for f in fields(RunConfig):
        assert group_of[f.name] == GROUPS[f.metadata["group"]][0], f.name
    text = parser.format_help()
    positions = [text.index(f"\n{title}:\n") for title in titles]
    assert positions == sorted(positions)
    assert text.index("\nexperimental:\n") > text.index("--max-unanswered-steps")


def test_debug_scenario_help_is_grouped_without_empty_groups() -> None:
    parser = _subcommand("debug-scenario")
    text = parser.format_help()
    for title in ("training", "privacy", "models", "engine and server", "experimental"):
        assert f"\n{title}:\n" in text, title
    # the scenario sets the data keys itself: its own data group is shown, the run config's not
    assert text.count("\ndata:\n") == 1
    engine = next(g for g in parser._action_groups if g.title == "engine and server")
    assert {"device", "ray_cpus"} <= {a.dest for a in engine._group_actions}


def test_experimental_options_name_their_measurements() -> None:
    experimental = {f.name for f in grouped()["experimental"]}
    assert {"label_mismatch_until", "diversity_weight", "client_code_dims"} <= experimental
    for f in fields(RunConfig):
        help_text = f.metadata["help"]
        if f.name not in experimental:
            assert not help_text.startswith("experimental"), f.name
            continue
        assert help_text.startswith(EXPERIMENTAL_PREFIX), f.name
        log = re.match(r"experimental: measured no help \((results/log/[\w.-]+\.md)", help_text)
        assert log and (ROOT / log.group(1)).is_file(), f.name
        assert f.default == 0, f"{f.name}: an experimental option is off by default"
    # linked from the reference, so tests/test_docs_links.py checks the link resolves
    assert "[results/log/synthetic-data.md](../results/log/synthetic-data.md)" in render_markdown()
