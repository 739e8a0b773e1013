"""``online-ctr models sweep|promotion``: the command-line twin of ``POST /groups/{name}/sweep``
and ``PUT|DELETE /groups/{name}/promotion``, through the same operations
(:mod:`online_ctr.challengers`).

``models sweep ctr --alpha 0.02,0.05,0.1 --l1 0.1,1,3 --promote`` creates the nine models of
the grid in group ``ctr`` and lets the best replace the serving one; ``models promotion ctr``
prints the policy and each challenger's standing.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from pydantic import ValidationError

from online_ctr.challengers import (
    SWEPT,
    Challengers,
    SweepValueError,
    challengers,
    set_policy,
    sweep,
    sweep_configs,
)
from online_ctr.cli.admin_run import admin_redis, check_name, run_admin
from online_ctr.cli.model_options import usage_error
from online_ctr.learning.crosses import crosses_text, parse_crosses
from online_ctr.store.model_config import ModelConfig, PolicyBody
from online_ctr.store.registry import RegistryError

#: The policy's options, each a field of :class:`PolicyBody`.
POLICY_OPTIONS = {
    "margin": (float, "how much lower (relative) a challenger's log loss must be (0.001)"),
    "confidence": (float, "1 - the chance of ever promoting a model that is not better (0.95)"),
    "min_examples": (int, "paired examples a challenger needs at least (1000)"),
    "planned_units": (int, "the test is most sensitive near this many /learn calls (10000)"),
}


def register(actions: Any) -> None:
    """Add ``models sweep`` and ``models promotion``."""
    grid = actions.add_parser(
        "sweep",
        help="create a grid of challengers in a group, one model per combination of values",
        description="Create a model of GROUP for every combination of the values given "
        "(named GROUP-alpha_0.05-l1_1 ...; at most 64). The group is created with the first "
        "one if new, which then serves it. With --promote the group also gets a promotion "
        "policy, so that the best challenger replaces the serving model by itself.",
    )
    grid.add_argument("group", help="the group's name")
    grid.add_argument("--rule", default="ftrl", help="every model's rule (ftrl)")
    grid.add_argument("--numeric", choices=("log_bucket", "raw"), default="log_bucket")
    for param in SWEPT:
        grid.add_argument(f"--{param}", metavar="V,V,...", help=f"{param} values")
    grid.add_argument(
        "--crosses",
        metavar="SET,SET,...",
        help="sets of crosses to sweep too, each none or A&B pairs joined by +, such as "
        "none,site&hour,site&hour+site&device (models GROUP-crosses_0, _1, ...)",
    )
    grid.add_argument("--promote", action="store_true", help="also set the promotion policy")
    _add_policy_options(grid)
    grid.set_defaults(func=sweep_group)
    policy = actions.add_parser(
        "promotion",
        help="show or set a group's promotion policy and its challengers' standings",
        description="Without options, print GROUP's promotion policy, each challenger's "
        "standing and the last promotions; with policy options, set the policy (its test "
        "starts afresh); with --off, take it away.",
    )
    policy.add_argument("group", help="the group's name")
    policy.add_argument("--off", action="store_true", help="take the policy away")
    _add_policy_options(policy)
    policy.set_defaults(func=group_promotion)


def _add_policy_options(parser: argparse.ArgumentParser) -> None:
    for name, (kind, text) in POLICY_OPTIONS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, help=text)


def _values(param: str, text: str) -> list[float]:
    """The values of ``--param`` (checked here, not by argparse: one line, as every mistake)."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        usage_error(f"argument --{param}: numbers separated by commas, got {text!r}")
    if not all(math.isfinite(v) for v in values):
        usage_error(f"argument --{param}: finite numbers, got {text!r}")
    return values


def _cross_sets(text: str) -> list[str]:
    """``--crosses``: each set as a model's crosses text (none: "")."""
    sets = []
    for value in text.split(","):
        value = value.strip()
        try:
            sets.append("" if value == "none" else crosses_text(parse_crosses(value.split("+"))))
        except ValueError as error:
            usage_error(f"argument --crosses: {value}: {error}")
    if len(set(sets)) < len(sets):
        usage_error(f"argument --crosses: the sets must be distinct, got {text!r}")
    return sets


def _policy(args: argparse.Namespace) -> PolicyBody | None:
    given = {name: getattr(args, name) for name in POLICY_OPTIONS}
    given = {name: value for name, value in given.items() if value is not None}
    try:
        return PolicyBody(**given) if given or getattr(args, "promote", False) else None
    except ValidationError as error:
        first = error.errors()[0]
        option = "--" + str(first["loc"][0]).replace("_", "-")
        usage_error(f"argument {option}: {first['msg']}")


def sweep_group(args: argparse.Namespace) -> int:
    """Create the grid's models; print each one and whether it is new."""
    check_name(args.group)
    given = {param: getattr(args, param) for param in SWEPT}
    grid = {param: _values(param, text) for param, text in given.items() if text is not None}
    crosses = None if args.crosses is None else _cross_sets(args.crosses)
    if not grid and not crosses:
        usage_error("give the values to sweep, e.g. --alpha 0.02,0.05 --l1 0.1,1")
    policy = _policy(args)
    base = ModelConfig(rule=args.rule, numeric=args.numeric)
    try:
        configs = sweep_configs(args.group, base, grid, crosses)
    except (SweepValueError, RegistryError) as error:  # the grid, before any Redis
        usage_error(str(error))

    async def create(admin: Any) -> list[tuple[str, bool]]:
        created = await sweep(admin, configs)
        if policy is not None:
            await set_policy(admin, args.group, policy)
        return created

    for name, new in run_admin(admin_redis(), create):
        print(f"{'created' if new else 'exists '} {name}")
    if policy is not None:
        print(f"group {args.group!r} promotes by itself: {_shown(policy)}")
    return 0


def group_promotion(args: argparse.Namespace) -> int:
    """Set, remove or show a group's promotion policy; print the group's standings."""
    check_name(args.group)
    policy = _policy(args)
    if args.off and policy is not None:
        usage_error("argument --off: takes no policy options")

    async def act(admin: Any) -> Challengers:
        if args.off or policy is not None:
            await set_policy(admin, args.group, policy)
        return await challengers(admin, args.group)

    _print(run_admin(admin_redis(), act))
    return 0


def _print(found: Challengers) -> None:
    info = found.info
    print(f"group {info.name!r}: serving {info.serving}")
    if info.promotion is None:
        print("promotion: off (only `models promote` changes the serving model)")
        return
    print(f"promotion: {_shown(info.promotion)}")
    print("challenger\tpaired examples\tgain\tlower bound")
    for s in found.standings:
        bound = "-" if s.lower_bound is None else f"{s.lower_bound:+.3g}"
        print(f"{s.model}\t{s.paired_examples}\t{100 * s.relative_gain:+.3f}%\t{bound}")
    for record in found.promotions:
        print(f"promoted {record['to']} over {record['from']} after {record['examples']} examples")


def _shown(policy: PolicyBody) -> str:
    return ", ".join(f"{name} {value:g}" for name, value in policy.model_dump().items())
