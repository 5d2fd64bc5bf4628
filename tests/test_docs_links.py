"""The documentation holds together: every relative link in README.md, CHANGELOG.md, docs/ and
results/ points at a file of this repository (and, into a markdown file, at one of its
headings), no file cites a document outside the repository, and the README stays short.

The checks are plain functions so the tests below can show that each one fails on a broken
link, a missing heading and an outside document, not only that today's files pass."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 320
# Names of design documents that live outside this repository; assembled so that this file does
# not match itself.
OUTSIDE = re.compile(
    "|".join(["ALGORITHMS" + r"\.md", "PLATFORM" + "_NOTES", "shared/" + "design"])
)
SCANNED_SUFFIXES = {".md", ".py", ".sh", ".toml", ".yml", ".yaml", ".cfg", ".txt"}

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def documentation() -> list[Path]:
    """The user-facing markdown files whose links must resolve."""
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for folder in ("docs", "results"):
        files += sorted((ROOT / folder).rglob("*.md"))
    return [path for path in files if path.is_file()]


def _prose_lines(text: str, spans: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked unless
    ``spans``."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line if spans else CODE_SPAN.sub("", line)))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces
    as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8"), spans=True):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Every relative link of ``path`` that does not resolve, as 'file:line: target (why)'."""
    problems = []
    text = path.read_text(encoding="utf-8")
    for number, line in _prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            where = f"{path.relative_to(root)}:{number}: {target}"
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
            try:
                resolved.relative_to(root.resolve())
            except ValueError:
                problems.append(f"{where} (outside the repository)")
                continue
            if not resolved.exists():
                problems.append(f"{where} (no such file)")
                continue
            if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{where} (no heading with this anchor)")
    return problems


def _repository_files() -> list[Path]:
    """The repository's text files: tracked and untracked-but-not-ignored when git can say,
    else a walk that skips hidden folders, virtual environments and build outputs."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard"],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
        ).stdout.splitlines()  # fmt: skip
        paths = [ROOT / name for name in listed]
    except (OSError, subprocess.SubprocessError):
        paths = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in {"build", "runs"}
                       and not d.endswith(".egg-info")]  # fmt: skip
            paths += [Path(folder) / name for name in files]
    return [
        path
        for path in paths
        if path.is_file() and (path.suffix in SCANNED_SUFFIXES or path.name == "Dockerfile")
    ]


def outside_mentions(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Lines that cite a design document outside the repository."""
    found = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:120]}")
    return found


def test_every_relative_link_resolves() -> None:
    problems = [problem for path in documentation() for problem in broken_links(path)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_documentation_is_there() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in documentation()}
    for name in ("README.md", "CHANGELOG.md", "results/SUMMARY.md", "docs/privacy.md",
                 "docs/deployment.md", "docs/evaluation.md", "docs/algorithms.md"):  # fmt: skip
        assert name in names, name


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = outside_mentions(_repository_files())
    assert not found, "documents outside the repository cited:\n" + "\n".join(found)


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}"


def test_the_readme_keeps_ci_s_commands() -> None:
    """.ci/run runs the README's first command, its test command (the fast tier) and then the
    slow tier, each as the README gives it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install . && fedgs simulate --out runs/first" in readme
    assert "\n```bash\npython -m pytest -q\n```\n" in readme
    assert "`python -m pytest -q -m slow`" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "fedgs simulate --steps 3 --out .ci-first-run" in "\n".join(ci)
    fast, slow = ci.index("python -m pytest -q"), ci.index("python -m pytest -q -m slow")
    assert fast < slow


def test_the_checks_fail_on_what_they_guard_against(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#a-section) [self](#page) [web](https://example.org/x.md)\n"
        "[missing file](gone.md) [missing anchor](other.md#no-such-section)\n"
        "[escapes](../../elsewhere/notes.md)\n"
        "```bash\n[in a code block](not-checked.md)\n```\n"
        "`[in a code span](not-checked.md)`\n",
        encoding="utf-8",
    )
    problems = broken_links(page, tmp_path)
    assert len(problems) == 3, problems
    assert any("gone.md (no such file)" in p for p in problems)
    assert any("no-such-section (no heading with this anchor)" in p for p in problems)
    assert any("notes.md (outside the repository)" in p for p in problems)

    cites = tmp_path / "module.py"
    cites.write_text('"""See ../shared/' + "design/" + "ALGORITHMS" + '.md."""\n', encoding="utf-8")
    clean = tmp_path / "clean.md"
    clean.write_text("See [algorithms](docs/algorithms.md).\n", encoding="utf-8")
    assert len(outside_mentions([cites, clean], tmp_path)) == 1


def test_slugs_follow_github() -> None:
    assert slug("Without Docker: `fedgs deploy local`") == "without-docker-fedgs-deploy-local"
    assert slug("Debugging scenario at epsilon <= 10 (issue 21, goal 1)") == (
        "debugging-scenario-at-epsilon--10-issue-21-goal-1"
    )
    assert slug("The README's first command") == "the-readmes-first-command"
