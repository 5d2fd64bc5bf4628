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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
