"""The ``fedgs`` command line: one entry point, one subcommand per user task.

Each subsystem owns its subcommand in a ``register(subparsers)`` function so this module stays a
thin table of contents; a subcommand's handler returns the process exit code. ``register``
only defines arguments, from constants in light modules; handlers import torch, Flower and the
accountants themselves, so ``fedgs --help`` answers at once (tests/test_cli_startup.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# module path -> the function there that adds its subcommand(s)
_SUBCOMMAND_MODULES: tuple[str, ...] = (
    "fedgs.data.cli",
    "fedgs.privacy.cli",
    "fedgs.training.cli",
    "fedgs.simulations.cli",
    "fedgs.deploy.cli",
    "fedgs.simulations.debug_cli",
    "fedgs.evaluation.cli",
    "fedgs.audit.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedgs",
        description=(
            "Federated, differentially private GANs with user-level privacy accounting. "
            "Run `fedgs COMMAND --help` for the options of each command."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in _SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line's options; a recipe (``--config FILE``) gives defaults that the
    options on the command line override."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "config", None):
        from fedgs import recipes

        recipes.apply(_subcommand(parser, args.command), args.config)
        args = parser.parse_args(argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    return int(args.handler(args) or 0)


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``name`` (argparse offers no public way to it)."""
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    raise KeyError(name)


if __name__ == "__main__":
    sys.exit(main())
