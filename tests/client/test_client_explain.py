"""The client's ``explain``: typed explanations from the real API and worker processes, whose
parts sum to the logit, for one example and many, synchronous and asynchronous."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pytest

from online_ctr.client import AsyncClient, Client, Explanation, Prediction, Term
from tests.client.conftest import ADMIN_KEY, Service
from tests.client.test_client import examples, learned


def parts_sum(prediction: Prediction) -> float:
    explanation = prediction.explanation
    assert isinstance(explanation, Explanation)
    terms = [t.contribution for t in explanation.features]
    return math.fsum([explanation.bias, explanation.base_rate, *terms, explanation.rest])


def test_explanations_are_typed_and_sum_to_the_logit(
    redis_url: str, start_authed: Callable[..., Service]
) -> None:
    service = start_authed(redis_url)
    rows = examples(60)
    features = [{**x, "hour": 14.0} for x, _ in rows[:12]]
    with Client(service.api_url, api_key=ADMIN_KEY, max_batch=5) as client:
        client.learn_many(rows)
        learned(client, 60)
        one = client.predict(features[0], explain=True)
        assert one.explanation is not None
        assert all(isinstance(t, Term) for t in one.explanation.features)
        names = {t.feature: t for t in one.explanation.features}
        assert set(names) == {
            f"site={features[0]['site']}",
            f"device={features[0]['device']}",
            "hour=6",
        }
        assert names["hour=6"].number == 14.0 and names["hour=6"].x == 1.0
        assert parts_sum(one) == pytest.approx(one.logit, rel=1e-12)
        assert client.predict(features[0]).explanation is None
        top = client.predict(features[0], explain=True, explain_top=1)
        assert top.explanation is not None and len(top.explanation.features) == 1
        assert top.explanation.omitted == 2 and parts_sum(top) == pytest.approx(
            top.logit, rel=1e-12
        )
        many = client.predict_many(features, explain=True)  # 3 requests
        assert [p.logit for p in many] == [p.logit for p in client.predict_many(features)]
        for prediction in many:
            assert parts_sum(prediction) == pytest.approx(prediction.logit, rel=1e-12)
        assert many[0] == one

    async def run() -> list[Prediction]:
        async with AsyncClient(service.api_url, api_key=ADMIN_KEY) as client:
            return [
                await client.predict(features[0], explain=True),
                *await client.predict_many(features, explain=True, explain_top=2),
            ]

    got = asyncio.run(run())
    assert got[0] == one
    assert all(p.explanation is not None and len(p.explanation.features) == 2 for p in got[1:])
