"""The options reference, generated from the run config: docs/options.md and pyproject.toml's
``[tool.flwr.app.config]`` table, each grouped by concern as RunConfig's fields are (GROUPS).

    python -m fedgs.options_reference > docs/options.md
    python -m fedgs.options_reference --pyproject   # the [tool.flwr.app.config] table

tests/test_options_reference.py fails when either file differs from what this writes. Not
imported by ``fedgs --help``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import Field, fields
from typing import Any

from fedgs.run_config import GROUPS, RunConfig

COMMAND = "python -m fedgs.options_reference > docs/options.md"
PYPROJECT_HEADER = "[tool.flwr.app.config]"
_LOG_PATH = re.compile(r"results/log/[\w.-]+\.md")


def grouped(config: type = RunConfig) -> dict[str, list[Field]]:
    """The fields of ``config`` by group key, groups in GROUPS' order, fields in class order;
    a field without a known group is an error."""
    by_group: dict[str, list[Field]] = {key: [] for key in GROUPS}
    for f in fields(config):
        group = f.metadata.get("group")
        if group not in by_group:
            raise ValueError(f"run-config field {f.name!r} has no known group ({group!r})")
        by_group[group].append(f)
    return by_group


def key(f: Field) -> str:
    return f.name.replace("_", "-")


def toml_value(value: Any) -> str:
    """``value`` as a TOML literal (the run config holds strings, booleans, ints and floats)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    raise TypeError(f"no TOML literal for {value!r}")


def _cell(text: str) -> str:
    """Help text as a markdown table cell: pipes, asterisks and '<' escaped, results log files
    as links (relative to docs/)."""
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;")
    return _LOG_PATH.sub(lambda m: f"[{m.group(0)}](../{m.group(0)})", text)


def render_markdown(config: type = RunConfig) -> str:
    """docs/options.md: one table per group (key, type, default, help)."""
    by_group = {name: members for name, members in grouped(config).items() if members}
    lines = [
        "# Options reference",
        "",
        f"Generated from the run config (`fedgs/run_config.py`) by `{COMMAND}`: do not edit by "
        "hand; regenerate with that command (tests/test_options_reference.py fails when this "
        "file and the generator differ).",
        "",
        "Every key below is one Flower run-config key, with the same meaning wherever it is "
        "given: as an option of `fedgs simulate` (`--noise-multiplier 1.5`; `fedgs "
        "debug-scenario`, `fedgs centralized` and `fedgs comm-cost` take the keys that apply to "
        "them, see each command's `--help`), in a recipe (`recipes/*.toml`, `fedgs simulate "
        '--config FILE`), or with `flwr run . --run-config "key=value ..."` (whose defaults '
        "are pyproject.toml's `[tool.flwr.app.config]`, grouped the same way). A key that "
        "another strategy owns, set away from its default, is refused. The simulation engine's "
        "own options of `fedgs simulate` (`--ray-cpus`, `--cpus-per-client`, "
        "`--object-store-mb`, `--poll-seconds`, `--server-threads`) are not run-config keys: "
        "`fedgs simulate --help` lists them with the engine group.",
        "",
        "Groups: "
        + ", ".join(f"[{GROUPS[name][0]}](#{_slug(GROUPS[name][0])})" for name in by_group)
        + ".",
    ]
    for name, members in by_group.items():
        title, description = GROUPS[name]
        lines += ["", f"## {title}", "", _cell(description), ""]
        lines += ["| key | type | default | help |", "| --- | --- | --- | --- |"]
        for f in members:
            lines.append(
                f"| `{key(f)}` | {type(f.default).__name__} | `{toml_value(f.default)}` | "
                f"{_cell(f.metadata.get('help', ''))} |"
            )
    return "\n".join(lines) + "\n"


def render_pyproject(config: type = RunConfig) -> str:
    """pyproject.toml's ``[tool.flwr.app.config]`` table: every key at its default, a comment
    line per group."""
    lines = [
        PYPROJECT_HEADER,
        "# Generated from fedgs/run_config.py by `python -m fedgs.options_reference --pyproject`",
        "# (keys, defaults and groups; every key explained in docs/options.md).",
    ]
    for name, members in grouped(config).items():
        if not members:
            continue
        lines.append("")
        lines.append(f"# {GROUPS[name][0]}")
        lines += [f"{key(f)} = {toml_value(f.default)}" for f in members]
    return "\n".join(lines) + "\n"


def _slug(heading: str) -> str:
    """GitHub's anchor of a plain heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedgs.options_reference",
        description="Print docs/options.md (default) or pyproject.toml's [tool.flwr.app.config] "
        "table, generated from the run config.",
    )
    parser.add_argument(
        "--pyproject", action="store_true", help="print the [tool.flwr.app.config] table"
    )
    args = parser.parse_args(argv)
    sys.stdout.write(render_pyproject() if args.pyproject else render_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
