"""The worker's Prometheus metrics carry the values the model in Redis has."""

from __future__ import annotations

import itertools

import pytest

from online_ctr.readers import read_examples
from online_ctr.rules import RULES
from tests.conftest import CRITEO
from tests.workers.conftest import MakeStore, make_worker, recount_nonzero, scan_state, send

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 600))


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_worker_metrics_match_the_model(make_store: MakeStore, rule: str) -> None:
    store = await make_store(rule)
    await send(store, ROWS, per_entry=2)
    worker = make_worker(store, batch_size=50)
    batches = await worker.run_until_idle()
    info = await store.info()
    recount = recount_nonzero(store, await scan_state(store), info.t)

    def sample(name: str) -> float | None:
        return worker.metrics.registry.get_sample_value(name, {"model": "default"})

    assert batches == 12
    assert sample("online_ctr_learned_examples_total") == len(ROWS) == info.t
    # The counter adds per-batch float sums; Redis adds the same sums in long double.
    assert sample("online_ctr_progressive_logloss_total") == pytest.approx(
        info.logloss_sum, rel=1e-12
    )
    assert sample("online_ctr_nonzero_weights") == info.nonzero_weights == recount
    assert sample("online_ctr_features_tracked") == info.features_tracked
    assert sample("online_ctr_learn_batch_seconds_count") == batches
    assert sample("online_ctr_stream_lag_entries") is not None
