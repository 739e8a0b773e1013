"""Learning one group: bring its features' state into the cache, learn the examples one at a
time in stream order (the compiled sequential learner), and describe the change for the commit.

The math is exactly the in-process replay's: the same :func:`learn_sequential` on the same
state, so the service's model equals ``online-ctr replay``'s bit for bit at any group size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning import retention
from online_ctr.learning.admission import (
    Admitting,
    Tally,
    changed_counters,
    counters_after,
    halvings,
    local_admitting,
)
from online_ctr.learning.calibration import Histogram
from online_ctr.learning.eviction import (
    CUT_ALL,
    CUT_ZERO,
    EVICTED,
    LOWEST,
    STABLE,
    TRACKED,
    Evicting,
    recount_stable,
)
from online_ctr.learning.features import Batch, bias_id
from online_ctr.learning.learner import unique_features
from online_ctr.learning.nonzero import NonzeroChange, nonzero_change
from online_ctr.learning.sequential import Learned, learn_sequential
from online_ctr.learning.stream_metrics import decayed_sums, log_loss
from online_ctr.store.calibration_codec import encode_fit, encode_histogram
from online_ctr.store.commits import (
    NO_BUDGET,
    WHOLE_BUDGET_ABOVE,
    WHOLE_FILTER_ABOVE,
    BudgetChange,
    CounterChange,
    StateChange,
)
from online_ctr.store.filter import ExistenceFilter
from online_ctr.store.state import ModelStore
from workers.cache import StateCache
from workers.model_mirror import ModelMirror


class NonFiniteError(ValueError):
    """Learning a group gave a non-finite value (a feature's state or a log loss): it is never
    committed, since Redis and every later example would take it as the model."""


@dataclass(frozen=True)
class Learning:
    """A learned group: its change to commit, the cache rows it touched and the results."""

    change: StateChange
    #: The group's distinct features, and their cache rows (in the same order).
    ids: NDArray[np.uint64]
    rows: NDArray[np.intp]
    learned: Learned
    #: The state of ``ids`` after the group: what the cache's ``rows`` hold once it commits
    #: (``learned.state`` has every feature of the group, admitted or not).
    state: NDArray[np.float64]
    #: The features the group stores for the first time whose filter bit its commit sets:
    #: the others' bit an earlier commit set, so this is every bit the group adds.
    marked: NDArray[np.uint64]
    #: Occurrences whose gradient admission dropped (their feature not admitted yet).
    dropped: int
    #: Which of ``ids`` the commit deletes, their features gone (expired: see
    #: :mod:`online_ctr.learning.retention`), after those it writes; a row of -1 in ``rows``
    #: is a feature not cached.
    deleted: NDArray[np.bool_]
    #: Features the commit stores for the first time.
    stored_new: int
    histogram: Histogram | None = None
    #: The model's feature budget once the group commits (None: it has none).
    budget: Evicting | None = None
    #: The admission filter's tally once the group commits (None: it has no filter).
    tally: Tally | None = None
    #: The base rate's counts once the group commits (None: not given).
    base: NDArray[np.float64] | None = None


async def cached_rows(
    store: ModelStore,
    cache: StateCache,
    ids: NDArray[np.uint64],
    known: ExistenceFilter | None = None,
) -> NDArray[np.intp]:
    """The cache rows of ``ids`` (distinct), reading from Redis only those not cached and,
    with the model's existence filter ``known``, not surely new."""
    rows = cache.find(ids)
    missing = rows < 0
    if missing.any():
        absent = ids[missing]
        state = np.zeros((len(absent), cache.width))  # a new feature's, as a read gives it
        stored = np.zeros(len(absent), np.bool_)
        asked = np.ones(len(absent), np.bool_) if known is None else known.maybe(absent)
        if asked.any():
            read = await store.shards.read(absent[asked])
            state[asked], stored[asked] = read.state, read.stored
        rows[missing] = cache.insert(absent, state, stored)
    return rows


async def learn_group(
    store: ModelStore,
    cache: StateCache,
    batch: Batch,
    entries: list[str],
    model: ModelMirror,
    served: NDArray[np.float64] | None = None,
    gone: NDArray[np.uint64] | None = None,
) -> Learning:
    """Learn ``batch`` (the decoded ``entries``) from ``model``, the learner's mirror of the
    model as of its version = (step, epoch), read only: the change says what the group's
    commit writes, and the :class:`Learning` what the mirror holds once it commits (with
    the calibration's histogram, the calibration is refit too).

    ``served`` is per example the probability this model served for it (a joined impression;
    NaN for the others): the log loss counted is that of what was served, the business
    metric, and the learner's own progressive loss for the rest. The state is unaffected.
    The mirror's existence filter is used if the learner trusts one. Features the model's
    admission rule leaves out get no state, and nothing of them is committed (the mirror's
    admission counters need their tally). ``gone``: stored features of an expiring model
    found gone as of the group's end (:class:`workers.gone_sweep.GoneSweep`), which the
    commit deletes unless the group touches them; a stored feature the group found expired
    and did not admit again is deleted too. With a feature budget the group learns on a
    copy of it, and ``gone`` holds features it evicted. A base rate's counts and the recent
    window's sums (:func:`decayed_sums`) that the mirror lacks are zeros."""
    version, histogram, known = model.version, model.histogram, model.known
    counters, tally, budget = model.counters, model.tally, model.budget
    base, recent_sums = model.base, model.recent_sums
    spec = store.spec
    t, epoch = version
    features = unique_features(batch)
    rows = await cached_rows(store, cache, features.ids, known)
    before, new = cache.state(rows), ~cache.stored(rows)
    # A new feature whose filter bit an earlier commit set (another feature's) needs it set
    # no more: the shards apply commits in order, so that one's bit is in Redis first. At 10M
    # features that spares about one new feature in five (those the learner had to read) a
    # BITFIELD op in Redis. Only the new features are looked up.
    marked = new.copy()
    if known is not None:
        marked[new] = ~known.maybe(features.ids[new])
    bias = features.ids == np.uint64(bias_id(spec.hash_bits))
    recent = None if tally is None else tally.recent
    argument, where = local_admitting(spec.admission, features.ids, ~new | bias, counters, recent)
    work = None if budget is None else budget.copy()
    retaining = retention.retaining(spec.expire_after, work)
    kernel_base = spec.base_rate.kernel(spec.base_rate.start() if base is None else base)
    learned = learn_sequential(
        spec.rule, spec.params, before, t, batch, features, spec.encoding, argument, retaining,
        kernel_base,
    )  # fmt: skip
    logloss_sum = _loss_sum(learned.losses, batch, served)
    check_finite(features.ids, before, learned, logloss_sum)
    # Only admitted features are stored, and cached as stored; the others stay as they were,
    # but for a stored one that expired and was not admitted again: it is deleted.
    kept = argument.admitted_rows()
    lapsed = ~new & ~kept
    lapsed_ids, lapsed_rows = features.ids[lapsed], rows[lapsed]
    ids, state = features.ids, learned.state
    if not kept.all():
        ids, state = ids[kept], state[kept]
        rows, before, new, marked = rows[kept], before[kept], new[kept], marked[kept]
    end = t + len(batch)
    marks = None if budget is None or work is None else (budget.marks, work.marks)
    nonzero = nonzero_change(
        spec.rule, spec.params, ids, before, t, state, end, spec.expire_after, marks
    )
    budgeted = NO_BUDGET
    if budget is not None and work is not None:
        budgeted = _budget_change(budget, work, before, state, nonzero)
        nonzero = replace(nonzero, stable_delta=_stable(work) - _stable(budget))
    swept = np.zeros(0, np.uint64)
    if gone is not None and len(gone):
        swept = gone[~np.isin(gone, features.ids)]
    stored_new = int(new.sum())
    deleted = np.zeros(len(ids), np.bool_)
    if len(lapsed_ids) or len(swept):  # only with expiry: no copies of the group otherwise
        # Deleted: the stored features it found expired and did not admit again, the swept.
        gone_ids = np.concatenate([lapsed_ids, swept])
        gone_rows = np.concatenate([lapsed_rows, cache.find(swept)])
        ids, rows, state, marked, deleted = _then_deleted(
            ids, rows, state, marked, gone_ids, gone_rows
        )
    counted, tallied = _counter_change(argument, where, counters, tally, t, len(batch))
    change = StateChange(
        t=t,
        epoch=epoch,
        examples=len(batch),
        logloss_sum=logloss_sum,
        entries=entries,
        runs=spec.layout.records(ids, state, marked, deleted),
        leaving=nonzero.leaving,
        entering=nonzero.entering,
        entering_steps=nonzero.entering_steps,
        stable_delta=nonzero.stable_delta,
        tracked_delta=stored_new - int(deleted.sum()),
        weight_excess=weight_excess(batch),
        counters=counted,
        expired=0 if work is not None else retaining.expired_count() + len(swept),
        budget=budgeted,
        base=(float(kernel_base[2]), float(kernel_base[3])),
        sums=_sums(learned.probabilities, batch, served, recent_sums),
    )
    learning = Learning(
        change,
        ids,
        rows,
        learned,
        state,
        ids[marked],
        argument.dropped_count(),
        deleted=deleted,
        stored_new=stored_new,
        budget=work,
        tally=tallied,
        base=kernel_base[2:].copy(),
    )
    if histogram is None:
        return learning
    # The histogram takes the group's progressive predictions in stream order, so it is the
    # same at any group size; the fit is a pure function of it.
    histogram = histogram.add(learned.probabilities, batch.labels, batch.weights)
    calibration = (encode_fit(histogram.fit()), encode_histogram(histogram))
    return replace(learning, change=replace(change, calibration=calibration), histogram=histogram)


def _stable(budget: Evicting) -> int:
    """How many weights that never reach zero untouched the budget's features carry."""
    return int(budget.counts[STABLE].sum())


def _budget_change(
    budget: Evicting,
    work: Evicting,
    before: NDArray[np.float64],
    state: NDArray[np.float64],
    nonzero: NonzeroChange,
) -> BudgetChange:
    """What a group that took the model's ``budget`` to ``work`` commits of it, once the
    stable weights of the features it touched (rows ``before`` and ``state``) are counted in
    their bins (:func:`recount_stable`, which updates ``work``)."""
    assert nonzero.stable_before is not None and nonzero.stable_after is not None
    old, new = before[:, -1], state[:, -1]
    recount_stable(work, budget, (old, nonzero.stable_before), (new, nonzero.stable_after))
    flat_before, flat_after = budget.counts.reshape(-1), work.counts.reshape(-1)
    slots = np.flatnonzero(flat_before != flat_after)
    marks = work.marks
    return BudgetChange(
        size=len(flat_after),
        slots=slots,
        values=flat_after[slots],
        marks=(int(marks[LOWEST]), int(marks[TRACKED]), int(marks[CUT_ZERO]), int(marks[CUT_ALL])),
        evicted=int(marks[EVICTED] - budget.marks[EVICTED]),
        entering_steps=new[nonzero.entering_rows],
        whole=flat_after.copy() if len(slots) > WHOLE_BUDGET_ABOVE else None,
    )


def _then_deleted(
    ids: NDArray[np.uint64],
    rows: NDArray[np.intp],
    state: NDArray[np.float64],
    marked: NDArray[np.bool_],
    gone_ids: NDArray[np.uint64],
    gone_rows: NDArray[np.intp],
) -> tuple[
    NDArray[np.uint64], NDArray[np.intp], NDArray[np.float64], NDArray[np.bool_], NDArray[np.bool_]
]:
    """The features a commit writes, then those it deletes (``gone_ids``, state all zero, no
    filter bit to set, each with its cache row or -1), and which are deleted."""
    gone = len(gone_ids)
    deleted = np.concatenate([np.zeros(len(ids), np.bool_), np.ones(gone, np.bool_)])
    return (
        np.concatenate([ids, gone_ids]),
        np.concatenate([rows, gone_rows]),
        np.concatenate([state, np.zeros((gone, state.shape[1]))]),
        np.concatenate([marked, np.zeros(gone, np.bool_)]),
        deleted,
    )


def _loss_sum(
    losses: NDArray[np.float64], batch: Batch, served: NDArray[np.float64] | None
) -> float:
    """The group's log loss, each example's times its importance weight (so that, over the
    examples' total weight, it estimates the loss of the stream before negative sampling):
    of the served probability where there is one."""
    if served is not None:
        known = ~np.isnan(served)
        losses = np.where(known, log_loss(np.where(known, served, 0.5), batch.labels), losses)
    return float(batch.weighted(losses).sum())


def _sums(
    probabilities: NDArray[np.float64],
    batch: Batch,
    served: NDArray[np.float64] | None,
    recent_sums: NDArray[np.float64] | None,
) -> tuple[float, float, float, float]:
    """The group's importance-weighted sums of its predictions (the served one where there
    is one, as for the log loss) and of its labels, whose ratio is its calibration; then the
    model's decayed sums after it, from ``recent_sums`` (the recent window's)."""
    if served is not None:
        probabilities = np.where(np.isnan(served), probabilities, served)
    before = np.zeros(2) if recent_sums is None else recent_sums
    after = decayed_sums(before, probabilities, batch.labels, batch.weights)
    predicted, labels = batch.weighted(probabilities).sum(), batch.weighted(batch.labels).sum()
    return float(predicted), float(labels), float(after[0]), float(after[1])


def weight_excess(batch: Batch) -> float:
    """The batch's importance weights less 1, summed: 0.0 when it has none."""
    if batch.weights is None:
        return 0.0
    return float((batch.weights - 1.0).sum())


def check_finite(
    ids: NDArray[np.uint64], before: NDArray[np.float64], learned: Learned, logloss_sum: float
) -> None:
    """Raise :class:`NonFiniteError` naming the first non-finite value of a learned group: a
    feature's state as read (stored so), its log loss, or a feature's state after it (a huge
    value within float range overflows an update: FTRL's ``n += (g x)^2`` with ``x = 1e300``).
    One vectorized pass over the group's state: O(features), no per-example work."""
    if np.isfinite(learned.state).all() and math.isfinite(logloss_sum):
        return
    stored = ~np.isfinite(before).all(axis=1)
    if stored.any():
        row = int(np.argmax(stored))
        raise NonFiniteError(
            f"stored state of feature {int(ids[row]):#x} is not finite: {before[row].tolist()}"
        )
    losses = ~np.isfinite(learned.losses)
    if losses.any():
        raise NonFiniteError(f"non-finite log loss at example {int(np.argmax(losses))}")
    bad = ~np.isfinite(learned.state).all(axis=1)
    if bad.any():
        row = int(np.argmax(bad))
        examples = len(learned.losses)
        after = "this example" if examples == 1 else f"these {examples} examples"
        raise NonFiniteError(
            f"non-finite state for feature {int(ids[row]):#x} after {after}: "
            f"{learned.state[row].tolist()}"
        )
    raise NonFiniteError(f"non-finite log loss {logloss_sum!r}")


def _counter_change(
    argument: Admitting,
    where: NDArray[np.int64],
    counters: NDArray[np.uint8] | None,
    tally: Tally | None,
    t: int,
    examples: int,
) -> tuple[CounterChange, Tally | None]:
    """What a group changed of the admission filter (the counters it used, or all of them
    if it halved them or changed many), and the filter's tally after it."""
    changed = changed_counters(argument, where, counters)
    if counters is None:
        return CounterChange(*changed), None
    if tally is None:
        raise ValueError("an admission filter's counters need their tally")
    times = halvings(t, examples, int(argument.halve_every))
    if times or len(changed[0]) > WHOLE_FILTER_ABOVE:  # every counter halved, or many changed
        whole = counters_after(argument, where, counters, times)
        after = Tally.of(whole, argument.recent)
        return CounterChange.replacing(whole, after.text()), after
    # Between halvings counts only go up: a counter used stays used.
    used = tally.used + int(np.count_nonzero(counters[changed[0]] == 0))
    after = Tally(used, argument.recent)
    return CounterChange(*changed, tally=after.text()), after
