"""The layout's arrows all point down: each part of the product imports only the parts below it
(the layers of ``online_ctr/__init__.py``), never one above or beside it, by any import
statement, inside a function too, or by a module name handed to ``importlib``; and the trees
beside the product import only what :data:`SUPPORT_MAY_NOT_IMPORT` leaves them."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Each part, by the lowest layer first; parts on one line are beside each other, and
#: neither may import the other.
LAYERS: list[tuple[str, ...]] = [
    ("online_ctr",),  # the package itself: a docstring, importing nothing
    ("online_ctr.learning",),
    ("online_ctr.config",),
    ("online_ctr.metrics",),
    ("online_ctr.process",),
    ("online_ctr.store",),
    ("online_ctr.wiring",),
    ("online_ctr.startup", "online_ctr.admin"),
    ("online_ctr.challengers",),  # the group operations above admin: service and cli use them
    ("service", "workers", "online_ctr.client"),
    ("online_ctr.cli",),
]
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}
PRODUCT = ("online_ctr", "service", "workers")
#: What the pure core may import besides the standard library and itself (pyarrow: the
#: optional columnar reader of ``replay``, imported only when it is installed).
CORE_MAY_IMPORT = {"numpy", "numba", "pyarrow"}
#: What each tree beside the product (and the product itself) may not import. The tests and the
#: load tests both stand on ``testkit`` (a local cluster, free ports, the data's paths), which
#: stands on neither; the load tests never import the tests (the tests import the load tests'
#: modules, but only to test them); ``loadtests.common`` is what the benchmarks, chaos suites
#: and cost measurements share, so it imports none of them; the product imports none of these.
SUPPORT_MAY_NOT_IMPORT: dict[str, tuple[str, ...]] = {
    "testkit": ("tests", "loadtests"),
    "loadtests": ("tests",),
    "loadtests.common": ("tests", "loadtests.bench", "loadtests.chaos", "loadtests.costs"),
    **dict.fromkeys(PRODUCT, ("tests", "loadtests", "testkit")),
}


def part_of(module: str) -> str | None:
    """The part of the layout ``module`` belongs to (None: not the product's)."""
    names = module.split(".")
    if names[0] not in PRODUCT:
        return None
    part = ".".join(names[:2]) if names[0] == "online_ctr" else names[0]
    if part not in LEVEL:
        raise AssertionError(f"{module} belongs to no layer of LAYERS: add its part there")
    return part


def module_of(path: Path) -> str:
    names = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def imported(tree: ast.AST, ours: tuple[str, ...] = PRODUCT) -> set[str]:
    """Every module the code imports, and every dotted module name under ``ours`` it spells out
    (the argument of ``importlib.import_module``, a table of sub-command modules)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = node.value.split(".")
            if names[0] in ours and len(names) > 1 and all(n.isidentifier() for n in names):
                found.add(node.value)
    return found


def product_modules() -> list[Path]:
    return sorted(path for part in PRODUCT for path in (ROOT / part).rglob("*.py"))


def test_the_layers_name_every_part_of_the_product() -> None:
    for path in product_modules():
        part_of(module_of(path))


@pytest.mark.parametrize("path", product_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_only_parts_below_its_own(path: Path) -> None:
    own = part_of(module_of(path))
    assert own is not None
    wrong = sorted(
        f"{module} ({part})"
        for module in imported(ast.parse(path.read_text()))
        if (part := part_of(module)) is not None and part != own and LEVEL[part] >= LEVEL[own]
    )
    assert not wrong, f"{own} (layer {LEVEL[own]}) imports a part above or beside it: {wrong}"


def test_the_learning_core_needs_only_numpy_and_numba() -> None:
    outside = set()
    for path in (ROOT / "online_ctr" / "learning").rglob("*.py"):
        for module in imported(ast.parse(path.read_text())):
            top = module.split(".")[0]
            if top not in sys.stdlib_module_names and top != "online_ctr":
                outside.add(top)
    assert outside <= CORE_MAY_IMPORT, sorted(outside - CORE_MAY_IMPORT)


def test_an_upward_import_is_caught() -> None:
    tree = ast.parse(
        "def f():\n    from service.app import create_app\n"
        "import importlib\nimportlib.import_module('workers.main')\n"
    )
    assert imported(tree) == {"service.app", "importlib", "workers.main"}
    assert LEVEL[part_of("service.app") or ""] > LEVEL["online_ctr.store"]


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def may_not_import(module: str) -> tuple[str, ...]:
    """What ``module`` may not import: the rule of the longest tree of
    :data:`SUPPORT_MAY_NOT_IMPORT` it is in."""
    trees = [tree for tree in SUPPORT_MAY_NOT_IMPORT if within(module, tree)]
    return SUPPORT_MAY_NOT_IMPORT[max(trees, key=len)] if trees else ()


def support_modules() -> list[Path]:
    roots = {tree.split(".")[0] for tree in SUPPORT_MAY_NOT_IMPORT}
    return sorted(path for root in roots for path in (ROOT / root).rglob("*.py"))


@pytest.mark.parametrize("path", support_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_support_trees_import_only_what_stands_below_them(path: Path) -> None:
    module = module_of(path)
    forbidden = may_not_import(module)
    tree = ast.parse(path.read_text())
    wrong = sorted(
        name
        for name in imported(tree, ("tests", "loadtests", "testkit"))
        if any(within(name, prefix) for prefix in forbidden)
    )
    assert not wrong, f"{module} may not import {', '.join(forbidden)}, but imports {wrong}"


def test_an_import_of_the_tests_from_the_load_tests_is_caught() -> None:
    tree = ast.parse(
        "from tests.conftest import CRITEO\nimport importlib\n"
        "importlib.import_module('loadtests.bench.run')\n"
    )
    found = imported(tree, ("tests", "loadtests", "testkit"))
    assert found == {"tests.conftest", "importlib", "loadtests.bench.run"}
    assert may_not_import("loadtests.costs.feature_names_cost") == ("tests",)
    assert "loadtests.bench" in may_not_import("loadtests.common.feed")
    assert may_not_import("testkit.paths") == ("tests", "loadtests")
    assert may_not_import("tests.conftest") == ()
