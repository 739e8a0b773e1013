"""``online-ctr replay``: learn a click log in-process and report its progressive metrics.

The last line of stdout is one JSON object; a progress bar goes to stderr on a terminal.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from online_ctr.cli import sweep_options
from online_ctr.cli.args import add_data_arguments, fail, integer, resolve_format
from online_ctr.learning import eviction, retention
from online_ctr.learning.admission import Admission
from online_ctr.learning.base_rate import MEAN, BaseRate
from online_ctr.learning.calibration import CALIBRATIONS, Calibrator
from online_ctr.learning.compact import ENCODINGS
from online_ctr.learning.crosses import Crosses, crosses_text, parse_crosses
from online_ctr.learning.detect import FormatError
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.parsing import Parsing, available
from online_ctr.learning.readers import ReaderError
from online_ctr.learning.rules import RULES, Rule, get_rule
from online_ctr.learning.sampling import MIN_RATE, check_rate

if TYPE_CHECKING:  # at run time, imported with the heavy half (see run)
    from online_ctr.learning.model import InMemoryModel
    from online_ctr.learning.replay import ReplayResult

#: Every rule's hyper-parameters, with their types and help.
HYPER_PARAMETERS: dict[str, tuple[type, str]] = {
    "alpha": (float, "learning-rate scale (ftrl, fobos, tg, truncation, l1sgd)"),
    "beta": (float, "learning-rate offset (ftrl, fobos, tg, truncation, l1sgd)"),
    "l1": (float, "L1 strength (gravity for tg)"),
    "l2": (float, "L2 strength (ftrl)"),
    "gamma": (float, "step-size scale (rda)"),
    "theta": (float, "truncation threshold (tg, truncation)"),
    "k": (int, "truncation period in steps (tg, truncation)"),
}

#: Examples per chunk of the exact learner: per-chunk costs vanish (200,000 Criteo rows ran at
#: 1,160 examples/s in chunks of 1 and 12,458 in chunks of 16,384, same results), and a
#: chunk's parsed rows stay small in memory (the row reader's Avazu rows: peak 268 MB of the
#: process in chunks of 16,384, 353 MB of 32,768, no faster).
SEQUENTIAL_BATCH = 16_384

#: Examples per chunk where Criteo is read a column at a time and the grouping changes
#: nothing (the exact learner, no calibration refitted per chunk): a parsed block, whose
#: memory :data:`~online_ctr.learning.parsing.BLOCK_BYTES` bounds already (4 MiB, ~17,300
#: Criteo rows), is learned whole instead of as 16,384 rows and a remnant of ~900, each
#: with the costs of a chunk (200,000 rows, the whole process, A B B A, 6 rounds: medians
#: 0.712 s against 0.748, peak memory the same).
BLOCK_BATCH = 65_536

#: What ``examples_per_second`` measures, stated in the JSON.
TIMED = (
    "parse+hash+predict+learn, every pass re-reading the file; not startup (which the first "
    "block's parse overlaps) or final metrics"
)


#: Bytes read in all (the file's size times ``--passes``) below which the row reader reads a
#: Criteo file: pyarrow's import and its thread cost more than the column reader saves. The
#: whole process, row reader against column reader, CPU seconds (medians, A B B A): 100 rows
#: 0.480 against 0.515, 1,000 rows (241 kB) 0.500 against 0.530, 3,000 rows 0.565 against 0.545.
SMALL_FILE_BYTES = 1 << 18


class UsageError(ValueError):
    """A command line that cannot run: reported like argparse's own errors, exit status 2."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``replay`` sub-command."""
    parser = subparsers.add_parser(
        "replay",
        help="replay a click log through a learning rule in-process",
        description="Learn FILE example by example, predicting each example before learning "
        "from it (or, with --minibatch, in summed-gradient mini-batches); print the "
        "progressive metrics as JSON.",
    )
    add_data_arguments(parser)
    parser.add_argument(
        "--rule", default="ftrl", choices=sorted(RULES), help="learning rule; default: ftrl"
    )
    for name, (kind, text) in HYPER_PARAMETERS.items():
        parser.add_argument(f"--{name}", type=kind, help=f"{text}; default: the rule's")
    parser.add_argument(
        "--batch-size",
        type=integer(1),
        help="most examples read, hashed and learned at a time (still one by one, in order): "
        "it does not change the results, except with --minibatch, where it is the mini-batch "
        "size, and with --calibration power, refitted after each batch of exactly this many; "
        f"default: {SEQUENTIAL_BATCH:,}, or {BLOCK_BATCH:,} where a large Criteo file is read "
        "a column at a time and nothing depends on the size (1 with --minibatch)",
    )
    parser.add_argument(
        "--minibatch",
        action="store_true",
        help="learn summed-gradient mini-batches of --batch-size examples, each predicted with "
        "the weights at its start: a different algorithm, which drifts as the size grows",
    )
    parser.add_argument(
        "--encoding",
        choices=ENCODINGS,
        default="float64",
        help="how the state is stored: float64, or compact (4 bytes a feature, rounded after "
        "each update as OCTR_STATE_ENCODING=compact stores it; ftrl and l1sgd); default: float64",
    )
    parser.add_argument("--passes", type=integer(1), default=1, help="replay the file P times")
    parser.add_argument(
        "--calibration",
        choices=CALIBRATIONS,
        default=CALIBRATIONS[0],
        help="power: fit gamma * p^kappa online as OCTR_CALIBRATION=power does, refitted after "
        "every --batch-size examples (the service refits at every commit), and report the "
        "calibrated predictions' metrics too; default: off",
    )
    parser.add_argument(
        "--admission",
        default="all",
        metavar="RULE",
        help="which new features get state, as a model's admission setting: all; poisson:P "
        "(admitted with probability P at each occurrence); bloom:N (at the N-th occurrence, "
        "in a counting Bloom filter); bloom:N:D (its counts halved every D examples); until "
        "then a feature contributes 0 and its gradient is dropped; default: all",
    )
    parser.add_argument(
        "--base-rate",
        default=MEAN.text,
        metavar="PRIOR",
        help="the base-rate prior added to each logit, as a model's base_rate setting: mean "
        "(the log-odds of the click rate so far), decay:H (with a half-life of H examples) or "
        "off (the weights alone); default: mean",
    )
    parser.add_argument(
        "--crosses",
        default="",
        metavar="A&B,...",
        help="pairs of fields to cross, as a model's crosses setting: an example with both "
        "fields gets one more feature, named a=va&b=vb (Criteo files are then read row by "
        "row); default: none",
    )
    parser.add_argument(
        "--expire-after",
        type=int,
        default=0,
        metavar="N",
        help="delete a feature's state once N examples have passed without touching it, as a "
        "model's expire_after setting does; met again, it is learned as a new feature; "
        "default: 0, never",
    )
    parser.add_argument(
        "--max-features",
        type=int,
        default=0,
        metavar="N",
        help="hold at most N features (plus those touched in the last 64 examples): past it, "
        "evict the least recently touched, zero weights first; met again, an evicted feature is "
        "learned as a new one; default: 0, no budget",
    )
    parser.add_argument(
        "--negative-rate",
        type=float,
        default=1.0,
        metavar="R",
        help="learn every click and a fraction R of the non-clicks, the ones the service keeps "
        "for a model of negative_rate R (a hash of each example), each weighted 1/R, and report "
        f"the weighted log loss and calibration; from {MIN_RATE} to 1; default: 1, every example",
    )
    sweep_options.add_arguments(
        parser, {name: kind for name, (kind, _) in HYPER_PARAMETERS.items()}
    )
    parser.set_defaults(func=run)


def batch_size(args: argparse.Namespace, whole_blocks: bool = False) -> int:
    """The chunk size: given, or the default of the exact or the mini-batch learner; with
    ``whole_blocks`` (a column reader's blocks) the exact learner's is :data:`BLOCK_BATCH`
    where the grouping changes nothing."""
    if args.batch_size is not None:
        return int(args.batch_size)
    if args.minibatch:
        return 1
    return BLOCK_BATCH if whole_blocks and args.calibration == "off" else SEQUENTIAL_BATCH


def check_negative_rate(args: argparse.Namespace) -> None:
    """Refuse a ``--negative-rate`` out of range, or below 1 with an option that would not
    weight the examples it learns."""
    try:
        check_rate(args.negative_rate)
    except ValueError as error:
        raise UsageError(f"--negative-rate: {error}") from None
    if args.negative_rate == 1.0:
        return
    # The offline sweep's promotion test pairs the kept examples' losses unweighted, where
    # the service's promoter weights them.
    if args.sweep is not None:
        raise UsageError("--negative-rate below 1 cannot be combined with --sweep")


def check_admission(args: argparse.Namespace) -> None:
    """Refuse an ``--admission`` rule that does not parse, or one a sweep would ignore."""
    try:
        Admission.parse(args.admission)
    except ValueError as error:
        raise UsageError(f"--admission: {error}") from None
    if args.admission != "all" and args.sweep is not None:
        raise UsageError("--admission cannot be combined with --sweep (its models admit all)")


def check_base_rate(args: argparse.Namespace) -> None:
    """Refuse a ``--base-rate`` that does not parse."""
    try:
        BaseRate.parse(args.base_rate)
    except ValueError as error:
        raise UsageError(f"--base-rate: {error}") from None


def check_retention(args: argparse.Namespace) -> None:
    """Refuse an ``--expire-after`` or ``--max-features`` out of range, both, or either with
    a sweep (its models keep all), the mini-batch learner or the compact encoding."""
    given = []
    for flag, value, check in (
        ("--expire-after", args.expire_after, retention.check_expire_after),
        ("--max-features", args.max_features, eviction.check_max_features),
    ):
        try:
            check(value)
        except ValueError as error:
            raise UsageError(f"{flag}: {error}") from None
        if value:
            given.append(flag)
    if len(given) > 1:
        raise UsageError("a model has a budget or a span: give --expire-after or --max-features")
    if not given:
        return
    if args.sweep is not None:
        raise UsageError(f"{given[0]} cannot be combined with --sweep (its models keep all)")
    if args.minibatch or args.encoding != "float64":
        raise UsageError(
            f"{given[0]} needs the exact learner in the float64 encoding: drop --minibatch "
            "and --encoding compact"
        )


def check_crosses(args: argparse.Namespace) -> Crosses:
    """The ``--crosses`` pairs; a UsageError for ones that do not parse, or with a sweep that
    sweeps crosses too."""
    try:
        crosses = parse_crosses(args.crosses)
    except ValueError as error:
        raise UsageError(f"--crosses: {error}") from None
    if crosses and args.sweep is not None and "crosses" in args.sweep:
        raise UsageError("--crosses is also swept: give its values in --sweep only")
    return crosses


def small_file(args: argparse.Namespace) -> bool:
    """Whether the passes over the file read fewer than :data:`SMALL_FILE_BYTES`."""
    return os.path.getsize(args.file) * int(args.passes) < SMALL_FILE_BYTES


def rule_params(rule: Rule, given: dict[str, Any]) -> Any:
    """The rule's hyper-parameters from the flags ``given``, refusing any it does not use."""
    takes = [field.name for field in fields(rule.params_type)]
    unused = [name for name in given if name not in takes]
    if unused:
        flags = ", ".join(f"--{name}" for name in unused)
        verb = "is not a hyper-parameter" if len(unused) == 1 else "are not hyper-parameters"
        raise UsageError(f"{flags} {verb} of {rule.name} (it takes {', '.join(takes)})")
    return rule.params(**given)


def run(args: argparse.Namespace) -> int:
    """Replay the file and print the JSON result; returns the exit status."""
    given = {name: getattr(args, name) for name in HYPER_PARAMETERS}
    given = {name: value for name, value in given.items() if value is not None}
    try:
        check_negative_rate(args)
        check_admission(args)
        check_base_rate(args)
        check_retention(args)
        crosses = check_crosses(args)
    except ValueError as error:
        return fail("replay", str(error), status=2)
    if args.sweep is not None or sweep_options.policy_given(args):
        from online_ctr.cli import replay_sweep  # its modules only for a sweep

        return replay_sweep.run(args, given, rule_params, batch_size(args))
    try:
        rule = get_rule(args.rule)
        params = rule_params(rule, given)
        hasher = FeatureHasher(hash_bits=args.hash_bits, numeric=args.numeric, crosses=crosses)
    except ValueError as error:  # unknown flags for the rule, values it refuses
        return fail("replay", str(error), status=2)
    try:
        resolve_format(args)
    except (FormatError, OSError) as error:
        return fail("replay", str(error), status=1)
    # The column reader makes no crosses: with crosses, the row reader and the hasher do.
    columns = args.format == "criteo" and available() and not crosses and not small_file(args)
    parsing = Parsing(args.file) if columns else None
    # Imported only now: the compiled kernels load (numba's, where they are not precompiled,
    # ~0.2 s) while the file's first block is parsed on the other core.
    # Everything made until the replay starts (numba's and pyarrow's modules, the compiled
    # code) lives until exit: no cyclic collection meanwhile (a one-row replay's start-up
    # triggered 245, which took 40-60 ms and freed a few hundred objects), then frozen, so that none
    # traverses it during the run nor at exit (200,000 rows: about 0.35 s less, a sixth of
    # the whole process).
    gc.disable()
    try:
        from online_ctr.cli import replay_file

        model = replay_file.model(args, rule, params)
        replay_file.warm_up(args, rule, params, parsing)  # startup, not the timed replay
        gc.freeze()
    except ValueError as error:  # --encoding, or options that refuse each other
        return fail("replay", str(error), status=2)
    finally:
        gc.enable()
    try:
        size = batch_size(args, whole_blocks=parsing is not None)
        result = replay_file.replay_file(args, model, hasher, parsing, size)
    except (FormatError, ReaderError, OSError) as error:
        return fail("replay", str(error), status=1)
    print(json.dumps(_output(args, result, model), allow_nan=False))
    warning = sparsity_warning(result)
    if warning:
        print(f"online-ctr replay: warning: {warning}", file=sys.stderr)
    return 0


#: The hyper-parameter that zeroes weights, by rule: the one to lower when all are zero.
SPARSIFIER = {"truncation": "theta"}


def sparsity_warning(result: ReplayResult) -> str | None:
    """What to say when a run learned examples but kept no nonzero weight, else None."""
    if result.nonzero_weights or not result.examples:
        return None
    name = SPARSIFIER.get(result.rule, "l1")
    value = result.params.get(name)
    return (
        f"the run ended with zero nonzero weights: the model predicts a constant. "
        f"{name}={value} is likely too strong for {result.rule} on this data; "
        f"try a smaller --{name}"
    )


def _output(args: argparse.Namespace, result: ReplayResult, model: InMemoryModel) -> dict[str, Any]:
    """The JSON object: the result and how it was produced; infinities become strings."""
    calibration = model.calibration
    params = {k: v if math.isfinite(v) else str(v) for k, v in result.params.items()}
    run_info = {
        "file": str(args.file),
        "format": args.format,
        "passes": args.passes,
        "minibatch": args.minibatch,
        "encoding": args.encoding,
    }
    return {
        **result.as_dict(),
        "params": params,
        **run_info,
        "limit": args.limit,
        "hash_bits": args.hash_bits,
        "numeric": args.numeric,
        "calibrated": None if calibration is None else _calibrated(calibration),
        "base_rate": args.base_rate,
        "base_rate_logit": model.base_rate.logit(model.base),
        "admission": args.admission,
        "features_admitted": result.features_tracked,
        "admission_dropped_gradients": model.dropped,
        "features_pending_admission": model.features_pending(),
        "expire_after": args.expire_after,
        "features_expired": model.features_expired(),
        "max_features": args.max_features,
        "features_evicted": model.features_evicted(),
        "crosses": crosses_text(parse_crosses(args.crosses)),
        "timed": TIMED,
    }


def _calibrated(calibration: Calibrator) -> dict[str, Any]:
    """The calibrated predictions' progressive metrics, and the final fit."""
    report = calibration.metrics.report()
    return {
        "logloss": report.logloss,
        "calibration": report.calibration,
        "gamma": calibration.fit.gamma,
        "kappa": calibration.fit.kappa,
    }
