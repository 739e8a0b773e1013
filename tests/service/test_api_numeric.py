"""OCTR_NUMERIC through the real app and worker: /predict and /learn take numbers the same
way (they share one hasher), the default buckets them, and a model is refused by a process
configured with another handling."""

from __future__ import annotations

import asyncio
import warnings

import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.features import FeatureHasher
from online_ctr.store.keys import ModelKeys
from online_ctr.store.state import ModelMismatchError, ModelStore
from online_ctr.wiring import model_spec
from service.app import create_app
from tests.service.keys import AUTH, HEADERS
from tests.service.test_api_predict import learn_with_worker, predict
from tests.workers.conftest import scan_state

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

#: Hours 10 to 23, clicked from 15 on. floor(ln(h)^2) puts them in buckets 5 (10-11),
#: 6 (12-14), 7 (15-16), 8 (17-20) and 9 (21-23): the clicks fall in buckets of their own.
HOURS = [({"hour": float(h), "site": "news"}, int(h >= 15)) for h in range(10, 24)] * 20


def app(redis_url: str, **settings: object) -> TestClient:
    configured = Settings(redis_url=redis_url, state_buckets=64, **settings, **AUTH)  # type: ignore[arg-type]
    return TestClient(create_app(configured, CollectorRegistry()), headers=HEADERS)


async def stored_ids(settings: Settings) -> set[int]:
    """The ids of every feature with state in Redis."""
    client = aioredis.Redis.from_url(str(settings.redis_url))
    state = await scan_state(ModelStore(client, model_spec(settings)))
    await client.aclose()
    return set(state)


@pytest.mark.parametrize(
    ("numeric", "names"),
    [
        ("log_bucket", ["", "site=news", "hour=5", "hour=6", "hour=7", "hour=8", "hour=9"]),
        ("raw", ["", "site=news", "hour"]),
    ],
)
def test_learn_and_predict_take_numbers_the_same_way(
    redis_url: str, numeric: str, names: list[str]
) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, numeric=numeric, **AUTH)  # type: ignore[arg-type]
    with app(redis_url, numeric=numeric) as client:
        body = {"examples": [{"features": x, "label": y} for x, y in HOURS]}
        assert client.post("/learn", json=body).status_code == 202
        asyncio.run(learn_with_worker(settings))
        hasher = FeatureHasher()
        # What /learn wrote is exactly the features the handling names.
        assert asyncio.run(stored_ids(settings)) == {hasher.id(name) for name in names}
        late = predict(client, {"features": {"hour": 20, "site": "news"}})["probability"]
        early = predict(client, {"features": {"hour": 10, "site": "news"}})["probability"]
        if numeric == "log_bucket":
            # /predict finds the buckets /learn trained: late hours click, early ones do not
            # (above and below the base rate, 9 clicks in 14, where the prior starts).
            assert late > 9 / 14 > early
            same_bucket = predict(client, {"features": {"hour": 17.5, "site": "news"}})
            assert same_bucket["probability"] == late
            assert (
                predict(client, {"features": {"hour": "8", "site": "news"}})["probability"] == late
            )


def test_a_model_is_refused_by_a_process_with_another_numeric_handling(redis_url: str) -> None:
    with app(redis_url, numeric="raw"):
        pass
    refused = pytest.raises(ModelMismatchError, match=r"OCTR_NUMERIC=log_bucket \(stored: raw\)")
    with refused, app(redis_url):
        pass
    refused = pytest.raises(ModelMismatchError, match=r"OCTR_CALIBRATION=power \(stored: off\)")
    with refused, app(redis_url, numeric="raw", calibration="power"):
        pass


def test_a_model_from_before_the_prior_keeps_none(redis_url: str) -> None:
    """A model created before the base-rate prior existed (no base_rate in its meta) is
    served without one, and a process with the new default refuses it naming the setting."""
    with app(redis_url):
        pass
    plain = redis.Redis.from_url(redis_url)
    plain.hdel(ModelKeys("default").meta, "base_rate")  # as an older version wrote
    refused = pytest.raises(ModelMismatchError, match=r"OCTR_BASE_RATE=mean \(stored: off\)")
    with refused, app(redis_url):
        pass
    with app(redis_url, base_rate="off") as client:
        assert client.get("/models/default").json()["base_rate"] == "off"
        body = {"examples": [{"features": {"a": "b"}, "label": 0}] * 20}
        assert client.post("/learn", json=body).status_code == 202
        settings = Settings(redis_url=redis_url, state_buckets=64, base_rate="off", **AUTH)  # type: ignore[arg-type]
        asyncio.run(learn_with_worker(settings))
        info = client.get("/models/default").json()
        # The counts are kept (the rate is shown), but nothing is added to the logit.
        assert (info["click_rate"], info["base_rate_logit"]) == (0.0, 0.0)
        alone = predict(client, {"features": {"c": "d"}, "explain": True})["explanation"]
        assert alone["base_rate"] == 0.0
    plain.close()


def test_a_model_from_before_the_setting_counts_as_raw_and_uncalibrated(redis_url: str) -> None:
    with app(redis_url, numeric="raw"):
        pass
    plain = redis.Redis.from_url(redis_url)
    plain.hdel(ModelKeys("default").meta, "numeric", "calibration")  # as an older version wrote
    with app(redis_url, numeric="raw") as client:
        assert predict(client, {"features": {"a": "b"}})["calibrated"] is False
    refused = pytest.raises(ModelMismatchError, match=r"OCTR_NUMERIC=log_bucket \(stored: raw\)")
    with refused, app(redis_url):
        pass
    plain.close()
