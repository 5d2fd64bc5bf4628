"""``fedgs --help`` stays fast: building the parser imports none of the heavy libraries.

Each of them takes seconds to import, so a register() that pulls one in (directly, or through a
package ``__init__`` or a ``choices=`` constant) makes every ``--help`` slow. A fresh interpreter
is needed because the test process itself has most of them loaded already.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("autodp", "datasets", "dp_accounting", "flwr", "pyarrow", "ray", "torch", "torchvision")

# prints every command's help to nowhere, then the heavy modules that got imported
_CHILD = f"""
import argparse, contextlib, io, json, sys
from fedgs.cli import build_parser
parser = build_parser()
(commands,) = (a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
for argv in ([], *([name] for name in commands)):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        build_parser().parse_args([*argv, "--help"])
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""


def test_help_of_every_command_imports_no_heavy_library() -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(child.stdout) == []
