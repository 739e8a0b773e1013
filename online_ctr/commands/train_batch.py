"""``online-ctr train-batch``: fit L1 logistic regression on a whole click log with OWL-QN.

The batch optimum is the reference the online rules are measured against. The last line of
stdout is one JSON object: ``objective`` (summed log loss + C ||w||_1), ``nonzero_weights``,
``logloss`` (mean training log loss), ``iterations``, ``converged``, ``examples``, ``features``,
``l1`` and ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from online_ctr.commands.args import add_data_arguments, fail, integer, number
from online_ctr.features import Batch, FeatureHasher
from online_ctr.owlqn import OWLQNResult, design_from_batch, minimize
from online_ctr.readers import ReaderError, read_examples

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
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read the file, fit, and print the JSON result; returns the exit status."""
    try:
        hasher = FeatureHasher(hash_bits=args.hash_bits)
    except ValueError as error:  # hash bits above 64
        return fail("train-batch", str(error), status=2)
    start = time.perf_counter()
    try:
        batch = _read(args, hasher)
    except (ReaderError, OSError) as error:
        return fail("train-batch", str(error), status=1)
    if len(batch) == 0:
        return fail("train-batch", f"{args.file}: no examples to train on", status=1)
    design = design_from_batch(batch)
    result = minimize(design, args.l1, max_iter=args.max_iter, tol=args.tol)
    seconds = time.perf_counter() - start
    print(json.dumps(_output(args, result, len(batch), design.n_features, seconds)))
    return 0


def _read(args: argparse.Namespace, hasher: FeatureHasher) -> Batch:
    """Every example of the file (up to ``--limit``) as one batch."""
    rows = list(read_examples(args.file, args.format, args.limit))
    return hasher.batch((example for example, _ in rows), (label for _, label in rows))


def _output(
    args: argparse.Namespace, result: OWLQNResult, examples: int, features: int, seconds: float
) -> dict[str, Any]:
    """The JSON object: the optimum's figures, then how they were produced."""
    return {
        "objective": result.objective,
        "nonzero_weights": result.nonzero_weights,
        "logloss": result.loss / examples,
        "iterations": result.iterations,
        "converged": result.converged,
        "examples": examples,
        "features": features,
        "l1": args.l1,
        "seconds": seconds,
        "file": str(args.file),
        "format": args.format,
        "limit": args.limit,
        "hash_bits": args.hash_bits,
        "max_iter": args.max_iter,
        "tol": args.tol,
        "timed": TIMED,
    }
