"""`make run` installs the project without extras (`pip install -e .`), and the quickstart's
Python client example must work right after it: every third-party module the client imports
is a core dependency, not one of an extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "online_ctr" / "client"


def imported_roots(path: Path) -> set[str]:
    """Top-level names of the modules a file imports (absolute imports only)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def core_dependencies() -> set[str]:
    """The distribution names of ``[project] dependencies``, lower case, without versions."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {
        re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0].lower()
        for d in pyproject["project"]["dependencies"]
    }


def test_the_client_needs_no_extra() -> None:
    third_party = {
        name
        for path in CLIENT.glob("*.py")
        for name in imported_roots(path)
        if name not in sys.stdlib_module_names and name not in {"online_ctr", "__future__"}
    }
    assert third_party, "the client imports httpx at least"
    # The modules the client imports are named as their distributions are (httpx).
    assert third_party <= core_dependencies()


def optional_dependencies() -> dict[str, list[str]]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras: dict[str, list[str]] = pyproject["project"]["optional-dependencies"]
    return extras


def test_the_docs_extra_holds_only_the_site_builder() -> None:
    # `make docs` installs this extra alone: no test, lint or benchmark tool in it.
    docs = optional_dependencies()["docs"]
    assert docs
    assert all(re.match(r"mkdocs[-\w]*", requirement) for requirement in docs), docs
    # The dev extra builds the site in tests/docs, so it takes the docs extra whole.
    assert "online-ctr[docs]" in optional_dependencies()["dev"]


def test_make_docs_installs_the_docs_extra_only() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^docs: (.*)$", makefile, re.MULTILINE)
    assert target is not None
    assert target.group(1).split() == ["$(DOCS_STAMP)"]
    recipe = re.search(r"^\$\(DOCS_STAMP\):.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None
    installs = re.findall(r"pip install .*", recipe.group(1))
    assert installs == ["pip install --quiet -e '.[docs]'"]


def test_the_reference_generator_needs_no_extra() -> None:
    # `make docs` runs tools/docs_reference.py with the service and the docs extra only.
    third_party = {
        name.replace("_", "-")
        for name in imported_roots(ROOT / "tools" / "docs_reference.py")
        if name not in sys.stdlib_module_names
        and name not in {"online_ctr", "service", "tools", "__future__"}
    }
    assert third_party <= core_dependencies()
