"""The options of ``online-ctr replay --sweep``: the grid and the promotion policy
(:mod:`online_ctr.cli.replay_sweep` runs it)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from online_ctr.cli.args import integer
from online_ctr.learning.crosses import Crosses, parse_crosses
from online_ctr.learning.promotion import PromotionPolicy

#: Most configurations one sweep learns, as a service's sweep creates at most 64 models.
MOST_CONFIGURATIONS = 64
#: The policy's options, by the field of :class:`PromotionPolicy` each sets.
POLICY_OPTIONS = {
    "margin": "--promote-margin",
    "confidence": "--promote-confidence",
    "min_examples": "--promote-min-examples",
    "planned_units": "--promote-planned-units",
}
Grid = dict[str, list[Any]]
#: The sweep's one dimension that is not a hyper-parameter: which fields are crossed. Its
#: values are sets of crosses, ``none`` or pairs joined by ``+`` (``C1&C2+C14&C17``).
CROSSES = "crosses"


def grid_type(kinds: dict[str, type]) -> Callable[[str], Grid]:
    """An argparse type: ``NAME=V1,V2;NAME=V1,...`` over the hyper-parameters ``kinds``."""

    def parse(text: str) -> Grid:
        grid: Grid = {}
        for part in text.split(";"):
            name, equals, values = (piece.strip() for piece in part.partition("="))
            if not equals or not name or not values:
                raise argparse.ArgumentTypeError(f"{part.strip()!r} is not NAME=V1,V2,...")
            if name not in kinds and name != CROSSES:
                known = ", ".join([*kinds, CROSSES])
                raise argparse.ArgumentTypeError(f"cannot sweep {name!r}: sweep {known}")
            if name in grid:
                raise argparse.ArgumentTypeError(f"{name} is listed twice")
            grid[name] = (
                _cross_sets(values) if name == CROSSES else _values(name, values, kinds[name])
            )
        count = math.prod(len(values) for values in grid.values())
        if count > MOST_CONFIGURATIONS:
            raise argparse.ArgumentTypeError(
                f"the grid has {count} configurations; a sweep learns at most {MOST_CONFIGURATIONS}"
            )
        return grid

    parse.__name__ = "grid"
    return parse


def _values(name: str, text: str, kind: type) -> list[Any]:
    try:
        values = [kind(value) for value in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{name}={text} is not a comma-separated list of {kind.__name__} values"
        ) from None
    if not all(math.isfinite(value) for value in values) or len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(f"{name}'s values must be finite and distinct")
    return values


def _cross_sets(text: str) -> list[Crosses]:
    """``none,C1&C2,C1&C2+C14&C17`` as sets of crosses, each distinct."""
    sets = []
    for value in text.split(","):
        value = value.strip()
        try:
            sets.append(() if value == "none" else parse_crosses(value.split("+")))
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"crosses={value}: {error}") from None
    if len(set(sets)) < len(sets):
        raise argparse.ArgumentTypeError("crosses' values must be distinct")
    return sets


def between(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number in ``[low, high)``."""

    def parse(text: str) -> float:
        value = float(text)
        if not low <= value < high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}), got {text}")
        return value

    parse.__name__ = "number"
    return parse


def add_arguments(parser: argparse.ArgumentParser, kinds: dict[str, type]) -> None:
    """``--sweep`` and the promotion policy's options."""
    default = PromotionPolicy()
    group = parser.add_argument_group(
        "sweep", "learn a grid of configurations as a group that promotes its own challengers"
    )
    group.add_argument(
        "--sweep",
        type=grid_type(kinds),
        metavar="GRID",
        help="every combination of the values listed, such as 'alpha=0.02,0.05,0.1;l1=0.1,1,3' "
        "or 'crosses=none,C1&C2,C1&C2+C14&C17' (sets of crosses: none, or pairs joined by +) "
        f"(at most {MOST_CONFIGURATIONS}), each learning every example; the first one listed "
        "(each hyper-parameter's first value) serves first, as a group's first model does, and "
        "a challenger the promotion test finds better replaces it; the other options are the "
        "base of every configuration",
    )
    types: dict[str, Callable[[str], Any]] = {
        "margin": between(0.0, 1.0),
        "confidence": between(0.5, 1.0),
        "min_examples": integer(1),
        "planned_units": integer(1),
    }
    texts = {
        "margin": "relative: a challenger's loss must be below (1 - margin) times the champion's",
        "confidence": "1 - the chance of ever promoting a configuration not better by the margin",
        "min_examples": "paired examples a challenger needs before it can be promoted",
        "planned_units": "the test's boundary is tightest near this many paired examples",
    }
    for field, option in POLICY_OPTIONS.items():
        text = f"{texts[field]}; default: {getattr(default, field)}"
        group.add_argument(
            option, type=types[field], metavar=field.upper(), help=f"with --sweep: {text}"
        )


def policy_given(args: argparse.Namespace) -> bool:
    """Whether any promotion option is on the command line."""
    return any(getattr(args, _dest(option)) is not None for option in POLICY_OPTIONS.values())


def policy(args: argparse.Namespace) -> PromotionPolicy:
    """The policy the options give, the defaults for those not given."""
    given = {field: getattr(args, _dest(option)) for field, option in POLICY_OPTIONS.items()}
    return PromotionPolicy(**{k: v for k, v in given.items() if v is not None})


def _dest(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")
