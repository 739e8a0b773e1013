"""Replay a stream of labelled examples through a model, scoring each before learning from it.

This is progressive validation (McMahan et al. 2013, section 5.1): every example is predicted
before it is learned. Examples are read, hashed and handed to the model ``batch_size`` at a time;
an :class:`~online_ctr.learning.model.InMemoryModel` learns them one by one whatever that size
(only with
``minibatch=True`` does it predict a whole batch with the weights at its start). The same loop
serves the ``replay`` command, the benchmarks and the tests.

With a ``negative_rate`` below 1, each batch read is first passed through
:func:`~online_ctr.learning.sampling.keep_negatives`, as the service samples a model's
feedback (McMahan et al. 2013, section 4.4): every click and a fraction of the non-clicks are
learned, the kept non-clicks weighted ``1 / rate``, and the metrics are the weighted ones
(:mod:`online_ctr.learning.stream_metrics`).

>>> from online_ctr.learning.features import FeatureHasher
>>> from online_ctr.learning.model import InMemoryModel
>>> from online_ctr.learning.rules import get_rule
>>> stream = [({"site": "news"}, 1), ({"site": "blog"}, 0)] * 50
>>> seen = []
>>> result = replay(
...     stream, InMemoryModel(get_rule("ftrl")), FeatureHasher(), batch_size=10,
...     on_batch=lambda progress: seen.append(progress.examples),
... )
>>> result.examples, seen[:3], result.auc
(100, [10, 20, 30], 0.944)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from typing import Any, Protocol

from online_ctr.learning.features import Batch, Example, FeatureHasher
from online_ctr.learning.rules.base import Array, Rule
from online_ctr.learning.sampling import check_rate, keep_negatives
from online_ctr.learning.sequential import Learned
from online_ctr.learning.stream_metrics import StreamMetrics


class Model(Protocol):
    """What the replay needs of a model: :class:`online_ctr.learning.model.InMemoryModel` has it."""

    rule: Rule
    params: Any

    def learn(self, batch: Batch) -> Learned:
        """Predict each example of the batch before learning from it."""

    def nonzero_weights(self) -> int:
        """An exact count of the nonzero weights now."""

    def features_tracked(self) -> int:
        """How many features have state."""


@dataclass(frozen=True)
class BatchProgress:
    """Where the replay stands after a batch, handed to the ``on_batch`` callback.

    ``examples`` counts the examples learned so far, ``examples_read`` those read (more when
    negatives are sampled). ``probabilities`` are the batch's predictions, made before learning
    it. ``model`` is live: a callback may read it (``model.nonzero_weights()`` for a sparsity
    curve, say) but not change it. Time spent in the callback is not counted in ``seconds``.
    """

    examples: int
    probabilities: Array
    batch_logloss: float
    logloss: float
    seconds: float
    model: Model
    examples_read: int


@dataclass(frozen=True)
class ReplayResult:
    """The outcome of a replay: progressive metrics, sparsity and speed. ``examples`` and
    ``examples_learned`` are the examples learned, ``examples_read`` those read (the same at a
    ``negative_rate`` of 1); ``examples_per_second`` is per example read."""

    rule: str
    params: dict[str, Any]
    batch_size: int
    examples: int
    positives: int
    logloss: float | None
    auc: float | None
    calibration: float | None
    nonzero_weights: int
    features_tracked: int
    seconds: float
    examples_per_second: float | None
    negative_rate: float
    examples_read: int
    examples_learned: int
    #: ``calibration`` over the recent window (:func:`~online_ctr.learning.stream_metrics.
    #: decayed_sums`: each example's share halved every 10,000 examples after it).
    recent_calibration: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready values (``None`` where a metric is undefined)."""
        return asdict(self)


OnBatch = Callable[[BatchProgress], None]


def replay(
    examples: Iterable[tuple[Example, int]],
    model: Model,
    hasher: FeatureHasher,
    batch_size: int,
    on_batch: OnBatch | None = None,
    negative_rate: float = 1.0,
) -> ReplayResult:
    """Learn ``examples``, read and hashed ``batch_size`` at a time, predicting each first
    (of the non-clicks, only those kept at ``negative_rate``).

    ``seconds`` times drawing the examples from the iterable (so parsing, if it reads a file
    lazily), hashing, predicting, learning and the metric sums; not ``on_batch`` and not the
    final AUC and nonzero-weight recount.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    batches = hashed(examples, hasher, batch_size)
    return replay_batches(batches, model, batch_size, on_batch, negative_rate)


def hashed(
    examples: Iterable[tuple[Example, int]], hasher: FeatureHasher, size: int
) -> Iterator[Batch]:
    """``examples`` read and hashed ``size`` at a time, lazily."""
    stream = iter(examples)
    chunks = iter(lambda: list(islice(stream, size)), [])
    return (hasher.batch([x for x, _ in chunk], [y for _, y in chunk]) for chunk in chunks)


def replay_batches(
    batches: Iterable[Batch],
    model: Model,
    batch_size: int,
    on_batch: OnBatch | None = None,
    negative_rate: float = 1.0,
) -> ReplayResult:
    """:func:`replay` of examples already hashed into ``batches`` (of ``batch_size`` each,
    the last one maybe smaller); drawing them from the iterable is timed."""
    check_rate(negative_rate)
    metrics = StreamMetrics()
    stream = iter(batches)
    read, seconds = 0, 0.0
    started = time.perf_counter()
    while (batch := next(stream, None)) is not None:
        read += len(batch)
        # At rate 1 the batch itself, whose weights (None) leave every sum as it was.
        kept = keep_negatives(batch, negative_rate)
        if len(batch) and not len(kept):  # sampled out whole: the service appends nothing
            continue
        step = model.learn(kept)
        metrics.add(step.probabilities, kept.labels, step.losses, kept.weights)
        if on_batch is not None:
            seconds += time.perf_counter() - started
            on_batch(_progress(metrics, step, kept, seconds, model, read))
            started = time.perf_counter()
    seconds += time.perf_counter() - started
    return _result(model, metrics, batch_size, seconds, negative_rate, read)


def _progress(
    metrics: StreamMetrics, step: Learned, kept: Batch, seconds: float, model: Model, read: int
) -> BatchProgress:
    """Where the replay stands after learning ``kept``; its log loss weighted as the stream's."""
    if kept.weights is None:
        batch_logloss = float(step.losses.mean())
    else:
        batch_logloss = float(kept.weighted(step.losses).sum() / kept.weights.sum())
    return BatchProgress(
        metrics.count, step.probabilities, batch_logloss, metrics.logloss, seconds, model, read
    )


def _result(
    model: Model,
    metrics: StreamMetrics,
    batch_size: int,
    seconds: float,
    negative_rate: float,
    read: int,
) -> ReplayResult:
    report = metrics.report()
    return ReplayResult(
        rule=model.rule.name,
        params=asdict(model.params),
        batch_size=batch_size,
        examples=report.count,
        positives=report.positives,
        logloss=report.logloss,
        auc=report.auc,
        calibration=report.calibration,
        nonzero_weights=model.nonzero_weights(),
        features_tracked=model.features_tracked(),
        seconds=seconds,
        examples_per_second=read / seconds if seconds > 0 else None,
        negative_rate=negative_rate,
        examples_read=read,
        examples_learned=report.count,
        recent_calibration=report.recent_calibration,
    )
