"""``online-ctr replay --sweep``: the offline twin of a group that promotes its own challengers.

Every configuration of the grid learns the file's examples in stream order, each predicted
before it is learned. The first configuration listed (every hyper-parameter's first value)
serves first, as a service's group is served by its first model; after every example the
promotion test (:mod:`online_ctr.learning.promotion`) pairs each challenger with the serving
model, and a promoted one serves from the next example on (:mod:`online_ctr.learning.sweep`).
The last line of stdout is one JSON object; progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, fields
from itertools import islice, product
from typing import Any

from online_ctr.cli import sweep_options
from online_ctr.cli.args import fail, resolve_format
from online_ctr.cli.sweep_options import CROSSES, Grid
from online_ctr.learning.crosses import Crosses, crosses_text, parse_crosses
from online_ctr.learning.detect import FormatError
from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.learning.parsing import Parsing, available
from online_ctr.learning.promotion import PromotionPolicy, alpha_each
from online_ctr.learning.readers import ReaderError, Row
from online_ctr.learning.rules import Rule, get_rule
from online_ctr.learning.sweep import Group, SweepResult, sweep

#: Progress lines on stderr at most this often (promotions are always reported).
PROGRESS_INTERVAL_S = 1.0
#: What ``mean_baseline`` predicts, stated in the JSON (``hindsight_logloss``: the one constant
#: known only at the end, the whole file's click rate).
MEAN_BASELINE = "the running mean CTR before each example, (clicks + 1/2) / (examples + 1)"


def configurations(
    grid: Grid,
    base: dict[str, Any],
    params: Callable[[dict[str, Any]], Any],
    crosses: Crosses = (),
) -> list[tuple[str, Any, Crosses]]:
    """Each configuration's name (``alpha_0.05-l1_1``, as a service's sweep names its models),
    hyper-parameters and crosses (``crosses`` unless the grid sweeps them), in the grid's
    order; a ValueError for one the rule refuses."""
    swept = [name for name in grid if name in base]
    if swept:
        raise ValueError(f"--{swept[0]} is also swept: give its values in --sweep only")
    out = []
    for values in product(*grid.values()):
        point = dict(zip(grid, values, strict=True))
        name = "-".join(_named(key, value) for key, value in point.items())
        crossed = point.pop(CROSSES, crosses)
        out.append((name, params({**base, **point}), crossed))
    return out


def _named(key: str, value: Any) -> str:
    """A grid value in a configuration's name: ``alpha_0.05``, ``crosses_C1&C2+C14&C17``."""
    if key == CROSSES:
        return f"{key}_{crosses_text(value).replace(',', '+') or 'none'}"
    return f"{key}_{value:g}"


def run(
    args: argparse.Namespace,
    base: dict[str, Any],
    params: Callable[[Rule, dict[str, Any]], Any],
    size: int,
) -> int:
    """Learn the grid on the file and print the JSON result; returns the exit status."""
    try:
        if args.sweep is None:
            raise ValueError("the --promote-* options need --sweep")
        if args.calibration != "off":
            raise ValueError("--sweep compares the models' own predictions: drop --calibration")
        rule = get_rule(args.rule)
        points = configurations(
            args.sweep, base, lambda given: params(rule, given), parse_crosses(args.crosses)
        )
        policy = sweep_options.policy(args)
        hashers = [
            FeatureHasher(hash_bits=args.hash_bits, numeric=args.numeric, crosses=crosses)
            for _, _, crosses in points
        ]
    except ValueError as error:
        return fail("replay", f"--sweep: {error}", status=2)
    grid = [(name, given) for name, given, _ in points]
    return _replay(args, rule, grid, policy, hashers, size)


def _replay(
    args: argparse.Namespace,
    rule: Rule,
    grid: list[tuple[str, Any]],
    policy: PromotionPolicy,
    hashers: list[FeatureHasher],
    size: int,
) -> int:
    """Read the file once, every configuration learning each batch; print the JSON."""
    try:
        resolve_format(args)
    except (FormatError, OSError) as error:
        return fail("replay", str(error), status=1)
    # The column reader makes no crosses: with any, the row reader and the hashers do.
    crossing = any(hasher.crosses for hasher in hashers)
    columns = args.format == "criteo" and available() and not crossing
    parsing = Parsing(args.file) if columns else None
    from online_ctr.cli import replay_file  # numba and the kernels: see replay.run

    try:
        models = [replay_file.model(args, rule, given) for _, given in grid]
    except ValueError as error:
        return fail("replay", str(error), status=2)
    try:
        replay_file.warm_up(args, rule, grid[0][1], parsing)
        gc.freeze()
        batches = (
            hashed_apart(replay_file.passes(args), hashers, size)
            if crossing
            else replay_file.batches(args, hashers[0], parsing, size)
        )
        result = sweep(batches, models, policy, on_batch=Progress([n for n, _ in grid]))
    except (FormatError, ReaderError, OSError) as error:
        return fail("replay", str(error), status=1)
    best = _best(result)
    say(
        f"{result.examples:,} examples: served log loss {result.group.served_logloss:.6f}, "
        f"best configuration {grid[best][0]} {result.logloss[best]:.6f}, running mean "
        f"{result.baseline.logloss:.6f}"
    )
    print(json.dumps(output(args, grid, policy, result), allow_nan=False))
    return 0


def hashed_apart(
    rows: Iterable[Row], hashers: list[FeatureHasher], size: int
) -> Iterator[list[Batch]]:
    """The rows in chunks of ``size``, each hashed by every distinct hasher (configurations
    that cross alike share a batch): a batch per configuration."""
    distinct = {hasher.crosses: hasher for hasher in hashers}
    rows = iter(rows)
    while chunk := list(islice(rows, size)):
        examples, labels = [x for x, _ in chunk], [float(y) for _, y in chunk]
        made = {crosses: hasher.batch(examples, labels) for crosses, hasher in distinct.items()}
        yield [made[hasher.crosses] for hasher in hashers]


class Progress:
    """Progress lines on stderr: each promotion, and where the stream stands."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.reported = 1
        self.shown_at = time.monotonic()

    def __call__(self, group: Group) -> None:
        for served in group.timeline[self.reported :]:
            assert served.paired is not None
            say(
                f"example {served.example:,}: {self.names[served.configuration]} serves, "
                f"{served.paired.relative_gain:.2%} lower loss on "
                f"{served.paired.examples:,} paired examples"
            )
        self.reported = len(group.timeline)
        if time.monotonic() - self.shown_at >= PROGRESS_INTERVAL_S:
            loss = f"served log loss {group.served_logloss:.6f}"
            say(f"{group.examples:,} examples, {loss}, {self.names[group.serving]} serving")
            self.shown_at = time.monotonic()


def say(line: str) -> None:
    """A progress line on stderr (stdout holds only the JSON)."""
    print(f"online-ctr replay: {line}", file=sys.stderr, flush=True)


def output(
    args: argparse.Namespace,
    grid: list[tuple[str, Any]],
    policy: PromotionPolicy,
    result: SweepResult,
) -> dict[str, Any]:
    """The JSON object: what the group served, the best configuration in hindsight, the
    baseline, when each configuration started serving, and every configuration's log loss."""
    names = [name for name, _ in grid]
    best = _best(result)
    group, baseline = result.group, result.baseline
    return {
        "examples": result.examples,
        "positives": result.positives,
        "served_logloss": _finite(group.served_logloss),
        "serving": names[group.serving],
        "best": {"name": names[best], "logloss": _finite(result.logloss[best])},
        "mean_baseline": {
            "logloss": _finite(baseline.logloss),
            "predicts": MEAN_BASELINE,
            "hindsight_logloss": _finite(baseline.overall_logloss),
        },
        "timeline": _timeline(result, names),
        "configurations": [
            {"name": name, "params": _params(given), "logloss": _finite(loss)}
            for (name, given), loss in zip(grid, result.logloss, strict=True)
        ],
        "rule": args.rule,
        "sweep": args.sweep,
        "policy": {**asdict(policy), "alpha_each": alpha_each(policy, len(grid) - 1)},
        **{key: getattr(args, key) for key in ("format", "limit", "hash_bits", "numeric")},
        "crosses": args.crosses,
        **{key: getattr(args, key) for key in ("passes", "minibatch", "encoding")},
        "file": str(args.file),
    }


def _timeline(result: SweepResult, names: list[str]) -> list[dict[str, Any]]:
    """Each configuration that served: from which example on and for how many, the tally
    that promoted it, its log loss there and the running mean's on the same examples."""
    timeline = result.group.timeline
    ends = [served.example for served in timeline[1:]] + [result.examples]
    entries = []
    for served, end, loss, mean in zip(
        timeline, ends, result.group.served_losses, result.baseline_losses, strict=True
    ):
        count = end - served.example
        entry: dict[str, Any] = {"example": served.example, "name": names[served.configuration]}
        if served.paired is not None:
            entry["paired_examples"] = served.paired.examples
            entry["relative_gain"] = served.paired.relative_gain
        entry["examples"] = count
        entry["logloss"] = loss / count if count else None
        entry["mean_logloss"] = mean / count if count else None
        entries.append(entry)
    return entries


def _best(result: SweepResult) -> int:
    """The configuration with the lowest log loss over the whole stream (the first if none
    is defined: no example)."""
    losses = [loss if math.isfinite(loss) else math.inf for loss in result.logloss]
    return losses.index(min(losses))


def _params(given: Any) -> dict[str, Any]:
    values = {field.name: getattr(given, field.name) for field in fields(given)}
    return {k: v if math.isfinite(v) else str(v) for k, v in values.items()}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
