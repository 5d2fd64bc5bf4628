"""Recipes: good settings kept in TOML files instead of long command lines.

A recipe is a flat TOML table whose keys are a command's long options without the dashes
(``noise-multiplier = 0.772``): for ``fedgs simulate`` those are the keys of Flower's run config,
so the same file also works as ``flwr run . --run-config FILE``. ``fedgs COMMAND --config FILE``
takes the file's values as the command's defaults, so an option given on the command line still
wins. The recipes fedgs ships are in the repository's ``recipes/`` folder.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

OPTION = "--config"


class RecipeError(ValueError):
    """A recipe that cannot be read or names something the command does not take."""


def read(path: Path | str) -> dict[str, Any]:
    """The recipe's key-value pairs; every value a TOML scalar."""
    path = Path(path)
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecipeError(f"no recipe at {path}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise RecipeError(f"cannot read recipe {path}: {error}") from None
    nested = [key for key, value in table.items() if isinstance(value, dict | list)]
    if nested:
        raise RecipeError(
            f"recipe {path}: {', '.join(nested)} must be plain values (a recipe is one flat "
            "table of option = value)"
        )
    return table


def defaults(parser: argparse.ArgumentParser, recipe: dict[str, Any], path: str) -> dict[str, Any]:
    """The recipe as ``parser.set_defaults`` arguments: each key checked against the command's
    long options and converted by the option's own type."""
    options = {
        option[2:]: action
        for action in parser._actions  # argparse keeps no public list of a parser's options
        for option in action.option_strings
        if option.startswith("--") and option not in ("--help", OPTION)
    }
    values: dict[str, Any] = {}
    for key, value in recipe.items():
        action = options.get(key)
        if action is None:
            raise RecipeError(
                f"recipe {path}: '{key}' is not an option of `{parser.prog}` "
                f"(known: {', '.join(sorted(options))})"
            )
        values[action.dest] = _converted(action, key, value, path)
    return values


def _converted(action: argparse.Action, key: str, value: Any, path: str) -> Any:
    """``value`` as the command line would have given it to ``action``."""
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise RecipeError(f"recipe {path}: '{key}' must be true or false, got {value!r}")
        return value
    if isinstance(value, bool):
        raise RecipeError(f"recipe {path}: '{key}' takes a value, not {value!r}")
    try:
        converted = action.type(value) if callable(action.type) else value
    except (TypeError, ValueError) as error:
        raise RecipeError(f"recipe {path}: '{key}' = {value!r}: {error}") from None
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise RecipeError(f"recipe {path}: '{key}' must be one of {choices}, got {value!r}")
    return converted


def add_option(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` on a command that takes recipes."""
    parser.add_argument(
        OPTION,
        metavar="FILE",
        help="a recipe: a TOML file of this command's options (e.g. recipes/*.toml); options "
        "given on the command line win over it",
    )


def apply(parser: argparse.ArgumentParser, path: str) -> None:
    """Make the recipe at ``path`` the defaults of ``parser`` (errors end the command)."""
    try:
        parser.set_defaults(**defaults(parser, read(path), path))
    except RecipeError as error:
        parser.error(str(error))
