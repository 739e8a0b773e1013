"""``online-ctr train-batch``: fit L1 logistic regression on a whole click log with OWL-QN.

The batch optimum is the reference the online rules are measured against. The last line of
stdout is one JSON object: ``objective`` (summed log loss + C ||w||_1), ``nonzero_weights``,
``training_logloss`` (mean log loss on the examples it was fitted on, an optimistic figure),
``heldout_logloss`` (with ``--holdout``: mean log loss on the file's tail, which the fit never
saw; null without), ``iterations``, ``converged``, ``examples`` (trained on),
``heldout_examples``, ``features``, ``l1`` and ``seconds``.

With ``--out FILE`` it also writes the optimum as a snapshot that seeds an online model of
``--rule`` (a warm start); :mod:`online_ctr.learning.warm_start` documents the mapping from the
batch
weights to each rule's state, whose weights equal them up to float rounding.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from online_ctr.cli.args import add_data_arguments, fail, integer, number, resolve_format
from online_ctr.cli.replay import rule_params
from online_ctr.learning import warm_start
from online_ctr.learning.base_rate import MEAN, BaseRate
from online_ctr.learning.detect import FormatError
from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.learning.owlqn import Design, OWLQNResult, design_from_batch, minimize
from online_ctr.learning.readers import ReaderError, Row, read_examples
from online_ctr.learning.rules import RULES, Rule, get_rule

#: What ``seconds`` measures, stated in the JSON.
TIMED = "read+hash+fit, wall clock"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``train-batch`` sub-command."""
    parser = subparsers.add_parser(
        "train-batch",
        help="fit L1 logistic regression on a whole file (OWL-QN)",
        description="Minimize the summed log loss of FILE plus C ||w||_1 with OWL-QN "
        "(Andrew & Gao 2007); print the optimum's figures as JSON.",
    )
    add_data_arguments(parser)
    parser.add_argument("--l1", required=True, type=number(0.0), help="C, the L1 strength")
    parser.add_argument("--max-iter", type=integer(1), default=1000, help="default: 1000")
    parser.add_argument(
        "--tol", type=number(0.0), default=1e-6, help="relative decrease of the objective, "
        "averaged over 5 iterations, to stop at; default: 1e-6"
    )  # fmt: skip
    parser.add_argument(
        "--holdout",
        type=fraction,
        default=0.0,
        help="hold out this fraction of the file's last examples (in file order) and report "
        "their log loss under the fitted weights; default: 0 (report only the training loss)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="also write the optimum as a snapshot FILE that seeds an online model of --rule "
        "(a warm start: `online-ctr import FILE NAME`, or PUT /models/NAME/snapshot)",
    )
    parser.add_argument(
        "--rule", default="ftrl", choices=sorted(RULES), help="with --out: the online rule"
    )
    parser.add_argument(
        "--rule-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --out: a hyper-parameter of the online rule (e.g. l1=1), repeatable; "
        "default: the rule's",
    )
    parser.add_argument(
        "--base-rate",
        default=MEAN.text,
        metavar="PRIOR",
        help="with --out: the online model's base-rate prior (mean, decay:H or off), which "
        "starts from the batch's click rate, the bias giving up its share; default: mean",
    )
    parser.set_defaults(func=run)


def online_rule(args: argparse.Namespace) -> tuple[Rule, Any]:
    """The online rule and hyper-parameters ``--rule`` and ``--rule-param`` name."""
    rule = get_rule(args.rule)
    given: dict[str, float] = {}
    for item in args.rule_param:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--rule-param {item!r}: write it as NAME=VALUE")
        given[name] = int(value) if name == "k" else float(value)
    return rule, rule_params(rule, given)


def fraction(text: str) -> float:
    """An argparse type: a number in [0, 1)."""
    value = float(text)
    if not 0.0 <= value < 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1), got {text}")
    return value


def run(args: argparse.Namespace) -> int:
    """Read the file, fit, and print the JSON result; returns the exit status."""
    try:
        hasher = FeatureHasher(hash_bits=args.hash_bits, numeric=args.numeric)
        rule, params = online_rule(args)
        base_rate = BaseRate.parse(args.base_rate)
    except ValueError as error:  # hash bits above 64, a rule's invalid hyper-parameters
        return fail("train-batch", str(error), status=2)
    start = time.perf_counter()
    try:
        resolve_format(args)
        rows = list(read_examples(args.file, args.format, args.limit))
    except (FormatError, ReaderError, OSError) as error:
        return fail("train-batch", str(error), status=1)
    held = round(len(rows) * args.holdout)
    if len(rows) - held == 0:
        return fail("train-batch", f"{args.file}: no examples to train on", status=1)
    design = design_from_batch(_batch(hasher, rows[: len(rows) - held]))
    result = minimize(design, args.l1, max_iter=args.max_iter, tol=args.tol)
    heldout = heldout_logloss(design, result.w, _batch(hasher, rows[len(rows) - held :]))
    seconds = time.perf_counter() - start
    if args.out is not None:
        try:
            args.out.write_bytes(
                warm_start.snapshot(
                    rule,
                    params,
                    design,
                    result.w,
                    args.hash_bits,
                    result.loss,
                    args.numeric,
                    base_rate,
                )
            )
        except OSError as error:
            return fail("train-batch", f"--out {args.out}: {error.strerror}", status=1)
    print(json.dumps(_output(args, result, design, seconds, (heldout, held))))
    return 0


def _batch(hasher: FeatureHasher, rows: list[Row]) -> Batch:
    return hasher.batch((example for example, _ in rows), (label for _, label in rows))


def heldout_logloss(design: Design, w: Any, batch: Batch) -> float | None:
    """Mean log loss of ``batch`` under the weights ``w`` of ``design``'s features (a feature
    the fit never saw weighs 0); None for an empty batch."""
    if len(batch) == 0:
        return None
    column = np.searchsorted(design.ids, batch.ids).clip(max=len(design.ids) - 1)
    known = design.ids[column] == batch.ids
    weights = np.where(known, w[column], 0.0)
    logits = np.bincount(batch.rows(), weights * batch.values, len(batch))
    losses = np.logaddexp(0.0, (1.0 - 2.0 * batch.labels) * logits)
    return float(np.mean(losses))


def _output(
    args: argparse.Namespace,
    result: OWLQNResult,
    design: Design,
    seconds: float,
    heldout: tuple[float | None, int],
) -> dict[str, Any]:
    """The JSON object: the optimum's figures, then how they were produced."""
    return {
        "objective": result.objective,
        "nonzero_weights": result.nonzero_weights,
        "training_logloss": result.loss / design.n_examples,
        "heldout_logloss": heldout[0],
        "iterations": result.iterations,
        "converged": result.converged,
        "examples": design.n_examples,
        "heldout_examples": heldout[1],
        "features": design.n_features,
        "l1": args.l1,
        "seconds": seconds,
        "file": str(args.file),
        "format": args.format,
        "limit": args.limit,
        "hash_bits": args.hash_bits,
        "numeric": args.numeric,
        "max_iter": args.max_iter,
        "tol": args.tol,
        "holdout": args.holdout,
        "timed": TIMED,
        "out": None if args.out is None else str(args.out),
        "rule": args.rule if args.out is not None else None,
    }
