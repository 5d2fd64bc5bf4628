"""Writes tests/INDEX.md: for each module of the package, the test files that use it.

Test files are named after behaviours, not modules (tests/test_deploy_faults.py tests the
launcher, the SuperNode wrapper and the health checks together), so a module's tests are found
by its name here. A test file uses a module when it, or a helper module of tests/ it imports
(flower_apps.py, deploy_support.py, ...), imports the module, imports a name the module's package
re-exports from it, or names it in a string (``[sys.executable, "-m", "fedgs.cli", ...]``).
Read statically (ast): nothing is imported, so tests/test_index.py checks the file is current in
well under a second.

    python tests/make_index.py          # rewrite tests/INDEX.md
    python tests/make_index.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import ast
import sys
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
INDEX = TESTS / "INDEX.md"


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """The import namespace's top folders: pyproject.toml's [tool.setuptools] package-dir
    (fedgs.server lives in server/), or the package's own folder where there is none."""
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        setuptools = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]
        return dict(setuptools["package-dir"])
    return {"fedgs": "fedgs"}


def module_paths(root: Path = ROOT) -> dict[str, str]:
    """Every module of the package: dotted name -> path relative to the repository's root."""
    found: dict[str, str] = {}
    for package, folder in package_dirs(root).items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if any(part.startswith(".") or part == "__pycache__" for part in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            found[name] = path.relative_to(root).as_posix()
    return found


def _reexports(init: Path, package: str) -> dict[str, str]:
    """Names a package's __init__.py takes from its submodules: name -> submodule's full name,
    from ``from .mod import name`` / ``from pkg.mod import name`` and ``lazy_exports(...)``."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            source = f"{package}.{node.module}" if node.level == 1 else node.module
            if source.startswith(package + "."):
                for alias in node.names:
                    names[alias.asname or alias.name] = source
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "lazy_exports"
            and len(node.args) == 2
            and isinstance(node.args[1], ast.Dict)
        ):
            for key, value in zip(node.args[1].keys, node.args[1].values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                    for name in str(value.value).split():
                        names[name] = f"{package}.{key.value}"
    return names


def _used_by(path: Path, modules: dict[str, str], root: Path) -> tuple[set[str], set[str]]:
    """(modules of the package, helper modules of tests/) one file imports or names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used: set[str] = set()
    helpers: set[str] = set()

    def add(name: str) -> None:
        while name and name not in modules:  # fedgs.x.y.Name -> fedgs.x.y
            name = name.rpartition(".")[0]
        if name:
            used.add(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
                if (path.parent / f"{alias.name}.py").is_file():
                    helpers.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if (path.parent / f"{node.module}.py").is_file():
                helpers.add(node.module)
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in modules:
                    used.add(full)
                elif node.module in modules and modules[node.module].endswith("__init__.py"):
                    used.add(node.module)  # the package, and the submodule the name is from
                    source = _reexports(root / modules[node.module], node.module).get(alias.name)
                    add(source or node.module)
                else:
                    add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in modules and node.value != "fedgs":
                used.add(node.value)
    return used, helpers


def index(root: Path = ROOT) -> dict[str, list[str]]:
    """Module -> the test files (names in tests/) that use it; modules none uses map to []."""
    modules = module_paths(root)
    tests = root / "tests"

    @cache
    def closure(path: Path) -> frozenset[str]:
        used, helpers = _used_by(path, modules, root)
        for helper in helpers:
            used |= closure(tests / f"{helper}.py")
        return frozenset(used)

    found: dict[str, list[str]] = {name: [] for name in modules}
    for test in sorted(tests.glob("test_*.py")):
        for name in closure(test):
            found[name].append(test.name)
    return found


def render(root: Path = ROOT) -> str:
    modules = module_paths(root)
    found = index(root)
    lines = [
        "# Tests by module",
        "",
        "Generated by `python tests/make_index.py`; do not edit (`tests/test_index.py` fails",
        "when it is out of date). For each module of the package, the test files that import it,",
        "directly or through a helper module of `tests/`, or name it in a string",
        "(`python -m fedgs.cli`). *(none)*: no test file imports or names it; it may still run",
        "inside other modules' tests. Run a module's tests with",
        "`python -m pytest -q tests/FILE.py ...`: a test file named on the command line runs",
        "whole, its `slow` tests included.",
        "",
        "| module | file | test files |",
        "|---|---|---|",
    ]
    for name in sorted(modules):
        tests = ", ".join(found[name]) if found[name] else "*(none)*"
        lines.append(f"| `{name}` | `{modules[name]}` | {tests} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        current = INDEX.read_text(encoding="utf-8") if INDEX.exists() else ""
        if current != text:
            print("tests/INDEX.md is out of date: run python tests/make_index.py", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(text, encoding="utf-8")
    print(f"wrote {INDEX.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
