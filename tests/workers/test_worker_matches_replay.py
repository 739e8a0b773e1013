"""The worker, through Redis, builds exactly the state the in-process replay builds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from online_ctr.features import FeatureHasher
from online_ctr.model import InMemoryModel
from online_ctr.readers import read_examples
from online_ctr.replay import replay
from online_ctr.rules import RULES
from tests.conftest import CRITEO
from tests.workers.conftest import MakeStore, make_worker, recount_nonzero, scan_state, send

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def check_matches_replay(
    make_store: MakeStore, rule: str, rows: int, batch_size: int, commit_batches: int = 1
) -> None:
    examples = list(itertools.islice(read_examples(CRITEO, "criteo"), rows))
    store = await make_store(rule)
    occurrences = await send(store, examples)
    worker = make_worker(store, batch_size=batch_size, commit_batches=commit_batches)
    await worker.run_until_idle()

    # The worker learns summed-gradient mini-batches (workers/batch.py), so the replay must too.
    model = InMemoryModel(store.spec.rule, store.spec.params, minibatch=True)
    result = replay(examples, model, FeatureHasher(), batch_size)
    info = await store.info()
    stored = await scan_state(store)
    expected = model.snapshot()

    assert info.t == model.t == rows
    assert stored.keys() == expected.keys()
    # Same float operations in the same order on both sides: bit-for-bit equal.
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row)
    assert sum(row[-1] for row in stored.values()) == occurrences
    # The sum is accumulated by Redis (HINCRBYFLOAT, long double, printed to 17 digits) in
    # another order than numpy's; over 10^4 terms that leaves ~1e-14 relative.
    assert info.logloss_sum == pytest.approx(result.logloss * rows, rel=1e-12)
    assert info.nonzero_weights == model.nonzero_weights() == recount_nonzero(store, stored, info.t)
    assert info.features_tracked == model.features_tracked()
    assert info.stream_lag == 0


async def test_ftrl_worker_equals_replay_on_the_whole_criteo_file(make_store: MakeStore) -> None:
    # Mini-batches of one example, 64 of them learned in order per commit.
    await check_matches_replay(make_store, "ftrl", rows=10_000, batch_size=1, commit_batches=64)


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_every_rule_worker_equals_replay(make_store: MakeStore, rule: str) -> None:
    await check_matches_replay(make_store, rule, rows=1_000, batch_size=1)


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_every_rule_worker_equals_replay_in_minibatches(
    make_store: MakeStore, rule: str
) -> None:
    await check_matches_replay(make_store, rule, rows=3_000, batch_size=64)


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_every_rule_worker_equals_replay_with_grouped_commits(
    make_store: MakeStore, rule: str
) -> None:
    # Mini-batches of 16 entries, 7 of them learned in order and committed together.
    await check_matches_replay(make_store, rule, rows=3_000, batch_size=16, commit_batches=7)
