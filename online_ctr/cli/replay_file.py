"""The heavy half of ``online-ctr replay``: the kernels' warm-up, the file's batches and the
learning. :mod:`online_ctr.cli.replay` imports it only once the file's first block is
being parsed (:class:`online_ctr.learning.parsing.Parsing`), so that importing numba and loading the
compiled kernels here overlaps that parse on the other core.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from itertools import chain
from typing import Any

import numpy as np

from online_ctr.learning import columnar, hashing, sequential, table
from online_ctr.learning.admission import Admission
from online_ctr.learning.ahead import Ahead
from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.features import Batch, FeatureHasher, bias_id
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.parsing import Parsing
from online_ctr.learning.progress import ProgressBar, count_lines
from online_ctr.learning.readers import Row, read_examples
from online_ctr.learning.replay import BatchProgress, ReplayResult, hashed, replay_batches
from online_ctr.learning.rules import Rule

#: Batches the column reader makes ahead of the learning: two, so that a slow one does not
#: hold it back. Six measured no better (200,000 rows 0.631 s against 0.617, 2,000,000 rows
#: 3.207 against 3.269, paired): unlike the parser's blocks, a batch needs numba, so none is
#: made while the replay starts up.
ENCODED_AHEAD = 2


def model(args: argparse.Namespace, rule: Rule, params: Any) -> InMemoryModel:
    """The model the options describe; a ValueError if they refuse each other."""
    return InMemoryModel(
        rule,
        params,
        args.minibatch,
        encoding=args.encoding,
        calibration=args.calibration,
        admission=Admission.parse(args.admission),
        bias=bias_id(args.hash_bits),
        expire_after=args.expire_after,
        max_features=args.max_features,
        base_rate=BaseRate.parse(args.base_rate),
    )


def warm_up(args: argparse.Namespace, rule: Rule, params: Any, parsing: Parsing | None) -> None:
    """Load the compiled code the replay runs (from numba's cache, or compile it), and only
    that, which is less than a worker's (:func:`online_ctr.learning.sequential.warm_up`):
    the column reader's pass, the table's look-ups and the grouping of a batch's ids, then
    the rule's per-example loop, or with ``--minibatch`` its array update instead, and its
    array weights (a mini-batch's scores, the final count of nonzero weights); the table's
    compaction only where features expire or are evicted."""
    if parsing is not None:
        columnar.warm_up()
    if args.expire_after or args.max_features:
        table.warm_up()
    else:
        hashing.warm_up()
    if args.minibatch:
        rule.update(rule.zeros(1), np.zeros(1), np.zeros(1), 1, params)
    else:
        sequential.warm_up_loop(rule, params)
    rule.weights(rule.zeros(1), 1, params)


def passes(args: argparse.Namespace) -> Iterator[Row]:
    # Lazy: each pass opens and parses the file again, and that parsing is timed.
    return chain.from_iterable(
        read_examples(args.file, args.format, args.limit) for _ in range(args.passes)
    )


def batches(
    args: argparse.Namespace, hasher: FeatureHasher, parsing: Parsing | None, size: int
) -> Iterator[Batch]:
    """The passes over the file in batches of ``size`` examples: read a column at a time
    where that reader exists (Criteo, with pyarrow installed; the first pass from
    ``parsing``, started already), else row by row and hashed. Where the grouping changes
    nothing (the exact learner, no calibration refitted per batch), the column reader's
    blocks are only cut to at most ``size`` examples, not copied into batches of exactly it.
    The column reader's batches are made, and their distinct ids found, in a thread of their
    own, :data:`ENCODED_AHEAD` ahead, while the learning loop (which releases the GIL) learns
    the ones before."""
    if parsing is None:
        return hashed(passes(args), hasher, size)
    blocks = chain.from_iterable(
        columnar.criteo_batches(args.file, hasher, args.limit, parsing if p == 0 else None)
        for p in range(args.passes)
    )
    if args.minibatch or args.calibration != "off":
        made = columnar.rechunk(blocks, size)
    else:
        made = columnar.pieces(blocks, size)
    return iter(Ahead(map(_grouped, made), ENCODED_AHEAD, "criteo-encoder"))


def _grouped(batch: Batch) -> Batch:
    batch.distinct  # noqa: B018 (found now, in the reader's thread, and kept by the batch)
    return batch


def replay_file(
    args: argparse.Namespace,
    model: InMemoryModel,
    hasher: FeatureHasher,
    parsing: Parsing | None,
    size: int,
) -> ReplayResult:
    """Learn the file's passes (the non-clicks sampled at ``--negative-rate``), with a
    progress bar of the examples read on a terminal."""
    rate = args.negative_rate
    if not sys.stderr.isatty():
        return replay_batches(batches(args, hasher, parsing, size), model, size, None, rate)
    lines = count_lines(args.file)  # a header line makes this 1 too many: fine for a bar
    per_pass = lines if args.limit is None else min(lines, args.limit)
    bar = ProgressBar(sys.stderr, per_pass * args.passes)

    def show(progress: BatchProgress) -> None:
        bar.update(progress.examples_read, f"log loss {progress.logloss:.4f}")

    result = replay_batches(batches(args, hasher, parsing, size), model, size, show, rate)
    logloss = math.nan if result.logloss is None else result.logloss
    bar.close(result.examples_read, f"log loss {logloss:.4f}")
    return result
