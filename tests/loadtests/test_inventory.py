"""``loadtests/README.md``'s inventory is the tree: every module of ``loadtests`` is listed,
every listed module exists, every page a row says cites a module does cite it (inside the
section the row names), every module has a reason to stay (a ``make`` target runs it, another
module of ``loadtests`` imports it, or a page cites it), and every ``loadtests.…`` name written
anywhere in the repository is a module that exists."""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from loadtests.bench.run import SECTIONS
from testkit.paths import ROOT

README = ROOT / "loadtests" / "README.md"
#: A page the third column names, with the section (in italics) the citation must be in.
PAGE = re.compile(r"`(?P<page>[\w./-]+\.(?:md|py))`(?: \(\*(?P<section>[^*]+)\*)?")
#: A dotted name under loadtests, not part of a longer one (``tests.loadtests.test_x``).
DOTTED = re.compile(r"(?<![\w.])loadtests(?:\.\w+)+")


def modules() -> list[str]:
    """Every module of ``loadtests`` by its path inside it (``bench/run.py``), packages aside."""
    folder = ROOT / "loadtests"
    return sorted(
        str(path.relative_to(folder)) for path in folder.rglob("*.py") if path.name != "__init__.py"
    )


@cache
def inventory() -> dict[str, str]:
    """The inventory table: each module's path inside ``loadtests`` -> its pages cell."""
    text = README.read_text().split("## What is here, and why it stays", 1)[1]
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `")]
    return {row[0].strip("| `"): row[2].rstrip(" |") for row in rows}


def dotted(module: str) -> str:
    """``bench/run.py`` -> ``loadtests.bench.run``; a ``__main__`` runs as its package."""
    name = "loadtests." + module.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__main__")


def cites(text: str, module: str) -> bool:
    """Whether ``text`` names ``module`` by its path or by its dotted name (not a longer one)."""
    by_name = re.search(re.escape(dotted(module)) + r"(?![.\w])", text)
    return by_name is not None or f"loadtests/{module}" in text


def section(text: str, title: str) -> str:
    """The lines under the heading ``title``, up to the next heading of its level or above."""
    lines, fenced, found = text.splitlines(), False, None
    for number, line in enumerate(lines):
        fenced ^= line.startswith("```")
        heading = re.match(r"(#+) (.*)", line) if not fenced else None
        if heading and found is not None and len(heading[1]) <= found[1]:
            return "\n".join(lines[found[0] : number])
        if heading and heading[2] == title:
            found = (number, len(heading[1]))
    assert found is not None, f"no heading {title!r}"
    return "\n".join(lines[found[0] :])


def pages(cell: str) -> list[tuple[str, str | None]]:
    return [(match["page"], match["section"]) for match in PAGE.finditer(cell)]


@cache
def imported_within() -> set[str]:
    """Every module of ``loadtests`` that another one imports, spawns by name or loads as a
    section of ``make bench``."""
    found = {f"loadtests.bench.{name}" for name in SECTIONS}
    for path in (ROOT / "loadtests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


def test_every_module_is_in_the_inventory_and_every_row_is_a_module() -> None:
    listed = set(inventory())
    assert sorted(set(modules()) - listed) == [], "modules missing from loadtests/README.md"
    assert sorted(listed - set(modules())) == [], "rows of loadtests/README.md with no module"


@pytest.mark.parametrize("module", sorted(inventory()))
def test_every_page_a_row_names_cites_the_module(module: str) -> None:
    for page, title in pages(inventory()[module]):
        text = (ROOT / page).read_text()
        where = section(text, title) if title else text
        assert cites(where, module), f"{page} {title or ''} does not cite {dotted(module)}"


@pytest.mark.parametrize("module", modules())
def test_every_module_has_a_reason_to_stay(module: str) -> None:
    run_by_make = re.search(
        rf"-m {re.escape(dotted(module))}$", (ROOT / "Makefile").read_text(), re.M
    )
    imported = dotted(module) in imported_within()
    cited = bool(pages(inventory().get(module, "")))
    assert run_by_make or imported or cited, (
        f"{module}: no make target runs it, no module imports it and no page cites it; "
        "remove it (its figures stay in the commit history)"
    )


@cache
def names_in_the_repository() -> list[tuple[str, str]]:
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for file in files:
        path = ROOT / file
        if path == Path(__file__).resolve():  # this file's examples of names that moved
            continue
        if path.suffix in {".py", ".md", ".toml", ".lua", ".yml", ".sh"} or path.name == "Makefile":
            found += [(file, name) for name in DOTTED.findall(path.read_text())]
    return found


def resolves(name: str) -> bool:
    """Whether ``name`` is a module or package of ``loadtests``, or an attribute of a module
    (not of a package: ``loadtests.feed`` is a module that moved, not an attribute)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        if base.with_suffix(".py").is_file():
            return True
        if (base / "__init__.py").is_file():
            return end == len(parts)
    return False


def test_every_loadtests_name_written_anywhere_is_a_module() -> None:
    wrong = sorted(
        {f"{file}: {name}" for file, name in names_in_the_repository() if not resolves(name)}
    )
    assert wrong == []


def test_the_checks_catch_a_moved_module_and_a_page_that_does_not_cite() -> None:
    assert resolves("loadtests.common.tools.parse_wrk")
    assert resolves("loadtests.bench")
    assert not resolves("loadtests.feed")
    assert cites("`python -m loadtests.bench`", "bench/__main__.py")
    assert not cites("`python -m loadtests.bench.run`", "bench/__main__.py")
    assert cites("(`loadtests/chaos/chaos_parts.py`)", "chaos/chaos_parts.py")
    text = "# A\n\n## B\nloadtests.costs.soak\n```\n# not a heading\n```\n## C\nx\n"
    assert cites(section(text, "B"), "costs/soak.py")
    assert not cites(section(text, "C"), "costs/soak.py")
