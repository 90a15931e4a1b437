"""The README and docs/ stand on their own: every link and every repository path they name exists.

Checked in README.md and docs/*.md:

* every relative Markdown link resolves to a file of the repository, and its `#anchor`, if any, to a
  heading of the target (GitHub's heading ids);
* every backticked path that starts at the repository's root (`ragspine_pipeline/…`, `docs/…`,
  `bench/…`, `deploy/…`, `examples/…`, `tests/…`) exists, and every backticked or fenced `name.py`
  exists somewhere in the repository (the README's layout block lists modules relative to their folder);
* paths that only exist at run time are not repository paths: they start with one of
  :data:`RUNTIME_PREFIXES`, hold a placeholder (`<run id>`, `*.jsonl`, `{md,html}`) or are relative to a
  configured folder (`latest/`, `production/<day>.json`), and are not checked;
* nothing cites the team's internal specification ("SPEC §…") or points outside the repository
  (`../shared`).
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Top-level entries of the repository that a backticked path may start at.
REPO_DIRS = ("ragspine_pipeline", "docs", "bench", "deploy", "examples", "tests", ".ci")
# Where generated files live, or locations that are not files of the repository at all.
RUNTIME_PREFIXES = ("var/", "$RAGSPINE_", "$", "s3://", "postgresql://", "postgres://", "http://", "https://",
                    "file://", "~/", "/")  # fmt: skip
PLACEHOLDER = re.compile(r"[<>*{}\[\]$ ]|YYYY")
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
MODULE_FILE = re.compile(r"(?<![\w/.])([A-Za-z_][\w]*\.py)\b")
INTERNAL = re.compile(r"\bSPEC\b|\.\./shared|shared/examples")


def split_fenced(text: str) -> tuple[str, str]:
    """``(prose, fenced)``: the text outside fenced code blocks and the text inside them (line counts
    kept: the other part's lines are blank)."""
    prose, fenced, inside = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            inside = not inside
            prose.append("")
            fenced.append("")
            continue
        (fenced if inside else prose).append(line)
        (prose if inside else fenced).append("")
    return "\n".join(prose), "\n".join(fenced)


def heading_ids(text: str) -> set[str]:
    """The ids GitHub gives the headings of a Markdown text (duplicates numbered ``-1``, ``-2``, …)."""
    ids: set[str] = set()
    prose, _ = split_fenced(text)
    for line in prose.splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # a link's text
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in ids:
            n += 1
            unique = f"{slug}-{n}"
        ids.add(unique)
    return ids


def exists_somewhere(relative: str, root: Path) -> bool:
    """Whether some file of the repository is ``relative`` or ends with ``/relative``."""
    return any(path == relative or path.endswith("/" + relative) for path in repo_files(root))


@functools.cache
def repo_files(root: Path) -> tuple[str, ...]:
    """Every file of the repository (tracked, or new and not ignored), relative to ``root``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return tuple(line for line in listed if (root / line).exists())


def repo_path_problem(span: str, root: Path) -> str | None:
    """Why a backticked ``span`` names a repository path that does not exist (None: fine, or not a
    repository path)."""
    span = span.strip()
    if span.startswith(RUNTIME_PREFIXES) or PLACEHOLDER.search(span):
        return None
    first = span.split("/", 1)[0]
    if "/" in span and first in REPO_DIRS:
        path = root / span.split("#", 1)[0].split("::", 1)[0]
        return None if path.exists() else f"`{span}` does not exist"
    if span.endswith(".py") and re.fullmatch(r"[\w/.]+", span) and not exists_somewhere(span, root):
        return f"`{span}`: no such file in the repository"
    return None  # a runtime path relative to a configured folder, a module, a command, …


def link_problem(target: str, source: Path, text: str, root: Path) -> str | None:
    """Why a Markdown link ``target`` in ``source`` (whose content is ``text``) is broken (None: fine,
    or not a local link)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, …
        return None
    path_part, _, anchor = target.partition("#")
    if not path_part:  # an anchor of the same page
        return None if anchor in heading_ids(text) else f"link to {target}: no such heading here"
    path = (source.parent / path_part).resolve()
    if not path.exists():
        return f"link to {target}: no such file"
    if root.resolve() not in path.parents:
        return f"link to {target}: outside the repository"
    if anchor and path.suffix == ".md" and anchor not in heading_ids(path.read_text(encoding="utf-8")):
        return f"link to {target}: no heading #{anchor} in {path.name}"
    return None


def problems(text: str, source: Path, root: Path = ROOT) -> list[str]:
    """Every broken link, missing repository path and internal reference of one Markdown text."""
    found: list[str] = []
    prose, fenced = split_fenced(text)
    for number, line in enumerate(prose.splitlines(), 1):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if problem := link_problem(target, source, text, root):
                found.append(f"{source.name}:{number}: {problem}")
        for _, span in CODE_SPAN.findall(line):
            if problem := repo_path_problem(span, root):
                found.append(f"{source.name}:{number}: {problem}")
    for number, line in enumerate(fenced.splitlines(), 1):
        for name in MODULE_FILE.findall(line):
            if not exists_somewhere(name, root):
                found.append(f"{source.name}:{number}: {name} (in a code block): no such file")
    for number, line in enumerate(text.splitlines(), 1):
        if INTERNAL.search(line):
            found.append(f"{source.name}:{number}: cites the internal specification or a path outside")
    return found


def test_there_are_docs_to_check():
    names = {path.name for path in DOCS}
    assert {"README.md", "metrics.md", "decisions.md", "nightly.md", "alerts.md", "operations.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_links_and_paths_exist(doc):
    assert problems(doc.read_text(encoding="utf-8"), doc) == []


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)(?:#[\w-]+)?\)", readme))
    assert {f"docs/{path.name}" for path in DOCS if path.parent.name == "docs"} <= linked


# -- the checker itself ----------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path):
    """A tiny repository: a package module and a docs page with two headings."""
    (tmp_path / "ragspine_pipeline" / "scoring").mkdir(parents=True)
    (tmp_path / "ragspine_pipeline" / "scoring" / "grounded.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "metrics.md").write_text(
        "# Metrics\n\n## Grounded QA\n\n## Production metrics (reference-free)\n"
    )
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def check(text: str, repo: Path) -> list[str]:
    return problems(text, repo / "README.md", repo)


def test_checker_accepts_paths_that_exist(repo):
    text = (
        "See `ragspine_pipeline/scoring/grounded.py`, `grounded.py`, `scoring/grounded.py`, "
        "[metrics](docs/metrics.md), [the QA](docs/metrics.md#grounded-qa) and "
        "[production](docs/metrics.md#production-metrics-reference-free)."
    )
    assert check(text, repo) == []


@pytest.mark.parametrize(
    "text",
    [
        "Defined in `ragspine_pipeline/scoring/made_up.py`.",
        "See `docs/nowhere.md`.",
        "Run `bench/bench_nothing.py`.",
        "Folded in `sources/made_up.py`.",
        "The module `made_up_module.py` does it.",
        "Read [the guide](docs/guide.md).",
        "Read [a section](docs/metrics.md#no-such-heading).",
        "```\n  scoring/   grounded.py, made_up.py\n```",
        "As SPEC §3.1 says.",
        "See ../shared/examples for the format.",
    ],
)
def test_checker_catches_made_up_paths_links_and_internal_references(repo, text):
    assert check(text, repo)


@pytest.mark.parametrize(
    "text",
    [
        "Reports go to `var/reports/latest/`.",
        "Set `$RAGSPINE_HOME/traces` or `s3://bucket/prefix`.",
        "The outbox `postgresql://user@host:port/db`.",
        "Per run: `runs/<run id>/`, `production/<day>.json`, `latest/`, `dt=YYYY-MM-DD/*.jsonl[.gz]`.",
        "A bare file name such as `release_decision.json` or `gold.jsonl` is written at run time.",
        "[Slack](https://api.slack.com) and [a heading](#metrics).",
    ],
)
def test_checker_leaves_runtime_paths_and_external_links_alone(repo, text):
    assert check("# Metrics\n\n" + text, repo) == []
