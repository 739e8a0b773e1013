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
