"""README and docs/ as a user follows them: every relative link resolves (file and anchor), every
``make`` target exists and every ``tidelake`` command parses (subcommand and flags, per the CLI's parser)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from spark.cli.main import parser

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def prose(text: str) -> str:
    return FENCE.sub("", text)


def code(text: str) -> list[str]:
    """Shell-like code: fenced blocks other than Python (continuation lines joined) and inline code spans."""
    out = [re.sub(r"(?m)(^|\s)#.*$", "", re.sub(r"\\\n\s*", " ", body))  # comments are prose
           for lang, body in FENCE.findall(text) if lang not in ("python", "sql", "properties")]
    out += [span for _, span in re.findall(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", prose(text), re.S)]
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, broken


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


def subcommands() -> dict[str, argparse.ArgumentParser]:
    p = parser()
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return {None: p, **sub.choices}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_make_and_tidelake_command_exists(page: Path) -> None:
    targets, commands = make_targets(), subcommands()
    top = set(commands[None]._option_string_actions)
    wrong, seen = [], 0
    for snippet in code(page.read_text()):
        for target in re.findall(r"(?:^|[\s;&|(])make ([a-z][\w-]*)", snippet):
            seen += 1
            if target not in targets:
                wrong.append(f"make {target}: no such target in the Makefile")
        # A tidelake command runs to the end of the snippet's line, or to the next command.
        for line in snippet.splitlines():
            for m in re.finditer(r"(?:^|[\s/;&|(])tidelake((?: +[^\s;&|]+)*)", line):
                words = m.group(1).split()
                if not words:
                    continue
                seen += 1
                name = words[0] if not words[0].startswith("-") else None
                if name not in commands:
                    wrong.append(f"tidelake {words[0]}: no such command")
                    continue
                known = set(commands[name]._option_string_actions) | top
                for flag in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(words[1:] if name else words)):
                    if flag not in known:
                        wrong.append(f"tidelake {name or ''} {flag}: no such flag")
    assert not wrong, wrong
    if page.name == "README.md":
        assert seen >= 8  # the two commands and the tour's are checked, not skipped by a too narrow pattern


# ---------------------------------------------------------------- module names in prose

ROOMS = {p.name for p in (REPO / "spark").iterdir() if (p / "__init__.py").exists()}
# Where prose names modules: the docs, the deployment, the DAGs and every docstring and comment of spark/.
PROSE = [*PAGES, *sorted(p for p in (REPO / "deploy").rglob("*") if p.is_file() and p.suffix in (".md", ".toml", ".yaml", ".conf")),
         *sorted((REPO / "dags").rglob("*.py")), *sorted((REPO / "spark").rglob("*.py"))]
SPARK_PATH = re.compile(r"(?<![\w/.-])(spark/(?:\w+/)*\w+\.py|spark/\w+/)")
ROOM_PATH = re.compile(r"(?<![\w/.-])((\w+)/\w+\.py)\b")
DOTTED = re.compile(r"(?<![\w.])spark((?:\.\w+)+)(?![\w-])")


def stale_module_names(path: Path) -> list[str]:
    """Paths (``spark/x/y.py``, ``x/y.py`` of a spark room) and dotted names (``spark.x.y[.name]``)
    in ``path``'s text that name no module (or no name of it) of the tree: prose left behind by a
    move. Dotted names whose room is not a spark room (``spark.sql.catalog``: Spark settings) are not
    names of ours; test paths may be given from tests/ (``spark/query/test_changes.py``)."""
    text, out = path.read_text(), []
    for m in SPARK_PATH.findall(text):
        if not ((REPO / m).exists() or (REPO / "tests" / m).exists()):
            out.append(m)
    for m, room in ROOM_PATH.findall(text):
        if room in ROOMS and not any((base / m).exists() for base in (REPO / "spark", REPO / "tests" / "spark")):
            out.append(m)
    for m in DOTTED.findall(text):
        parts = m.strip(".").split(".")
        if parts[0] not in ROOMS:
            continue
        for i in range(len(parts), 0, -1):  # the longest prefix that is a module
            base = REPO.joinpath("spark", *parts[:i])
            module = next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.exists()), None)
            if module is not None:
                break
        rest = parts[i:]
        if rest and not rest[0].startswith("__") and not re.search(rf"\b{re.escape(rest[0])}\b", module.read_text()):
            out.append("spark." + m.strip("."))
    return sorted(set(out))


@pytest.mark.parametrize("path", PROSE, ids=lambda p: str(p.relative_to(REPO)))
def test_prose_names_only_modules_that_exist(path: Path) -> None:
    assert not stale_module_names(path), f"{path.relative_to(REPO)} names what no longer exists"
