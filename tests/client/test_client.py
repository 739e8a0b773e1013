"""The sync and async clients against the real API and worker processes on a real Redis."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import online_ctr.client
from online_ctr.client import (
    Accepted,
    AsyncClient,
    Client,
    ClientError,
    FeatureMap,
    InvalidExampleError,
    Prediction,
    Retry,
    UnreachableError,
    operations,
)
from testkit.ports import free_port
from tests.client.conftest import ADMIN_KEY, PREDICT_KEY, Recorder, Service, wait_until

SITES = [f"site{i}.example" for i in range(20)]


def examples(count: int, seed: int = 0) -> list[tuple[FeatureMap, int]]:
    """Labelled examples whose label depends on the site, so the model learns something."""
    rng = random.Random(seed)
    rows: list[tuple[FeatureMap, int]] = []
    for _ in range(count):
        site = rng.randrange(len(SITES))
        features = {"site": SITES[site], "device": rng.choice(["mobile", "desktop"])}
        rows.append((features, int(rng.random() < (0.8 if site < 10 else 0.1))))
    return rows


def test_the_former_name_of_feature_map_still_imports() -> None:
    assert online_ctr.client.Features is FeatureMap


def learned(client: Client, count: int) -> None:
    wait_until(lambda: client.model("default").global_step >= count, what=f"{count} learned")


def test_predict_learn_model_and_delete(
    redis_url: str, start_authed: Callable[..., Service]
) -> None:
    service = start_authed(redis_url, OCTR_BATCH_SIZE="16")
    rows = examples(50)
    recorder = Recorder()
    with Client(service.api_url, api_key=ADMIN_KEY, max_batch=8, transport=recorder) as client:
        assert client.predict(rows[0][0]) == Prediction(0.5, 0.0, "default")
        assert client.learn(*rows[0]) == Accepted(1)
        assert client.learn_many(rows[1:]) == Accepted(49)  # 7 requests of at most 8
        learns = [key for path, status, key in recorder.attempts if path == "/learn"]
        assert len(learns) == 8 and len(set(learns)) == 8 and None not in learns
        learned(client, 50)

        info = client.model("default")
        assert (info.name, info.rule, info.global_step, info.stream_lag) == (
            "default",
            "ftrl",
            50,
            0,
        )
        assert info.progressive_logloss is not None and info.nonzero_weights > 0
        assert (info.admission, info.negative_rate, info.learned_weight) == ("all", 1.0, 50.0)
        clicks = sum(label for _, label in rows)
        assert (info.base_rate, info.click_rate) == ("mean", clicks / 50)
        assert info.base_rate_logit == pytest.approx(math.log((clicks + 0.5) / (50 - clicks + 0.5)))
        assert info.calibration_ratio is not None and info.recent_calibration_ratio is not None
        features = [x for x, _ in rows[:20]]
        many = client.predict_many(features)  # 3 requests
        assert many == [client.predict(x) for x in features]
        assert many[0].probability != 0.5 and client.predict_many([]) == []

        deleted = client.delete_model("default")
        assert deleted.name == "default" and deleted.keys_deleted > 0
        assert client.model("default").global_step == 0
        assert client.predict(rows[0][0]).probability == 0.5
        # Dozens of requests, one keep-alive connection.
        assert len(recorder.attempts) >= 36 and recorder.open_connections() == 1


def test_async_client(redis_url: str, start_authed: Callable[..., Service]) -> None:
    service = start_authed(redis_url)
    rows = examples(30)

    async def run() -> tuple[Accepted, list[Prediction], Prediction, int]:
        async with AsyncClient(service.api_url, api_key=ADMIN_KEY, max_batch=7) as client:
            accepted = await client.learn_many(rows)
            accepted_one = await client.learn({"site": "solo.example"}, 0)
            assert accepted_one == Accepted(1)
            for _ in range(600):
                if (await client.model("default")).global_step >= 31:
                    break
                await asyncio.sleep(0.05)
            many = await client.predict_many(x for x, _ in rows)
            one = await client.predict(rows[0][0])
            return accepted, many, one, (await client.model("default")).global_step

    accepted, many, one, step = asyncio.run(run())
    assert accepted == Accepted(30) and step == 31
    assert len(many) == 30 and many[0] == one and one.probability != 0.5


def test_errors_are_client_errors_with_the_servers_message(
    redis_url: str, start_authed: Callable[..., Service]
) -> None:
    service = start_authed(redis_url)
    recorder = Recorder()
    with Client(service.api_url, api_key=ADMIN_KEY, transport=recorder) as client:
        with pytest.raises(ClientError) as invalid:
            client.learn({"site": "a"}, 1, weight=-1.0)
        assert invalid.value.status == 422
        assert invalid.value.message.startswith("invalid request")
        assert [field for field, _ in invalid.value.errors] == ["weight"]
        with pytest.raises(ClientError) as weightless:
            client.learn({"site": "a"}, 1, weight=0.0)
        assert weightless.value.status == 422
        assert [field for field, _ in weightless.value.errors] == ["weight"]
        assert client.learn({"site": "a"}, 1, weight=2.5) == Accepted(1)
        assert client.learn_many([({"site": "a"}, 1, 3.0), ({"site": "b"}, 0)]) == Accepted(2)
        with pytest.raises(ClientError) as unknown:
            client.model("other")
        assert unknown.value.status == 404 and "no model or group" in unknown.value.message
        # A later request of a batch fails: the earlier ones were accepted, and it says so.
        with pytest.raises(ClientError) as partial:
            client.learn_many([({"site": "a"}, 1)] * 1000 + [({"a=b": "c"}, 1)])
        assert partial.value.status == 422 and partial.value.examples_done == 1000
    statuses = [status for _, status, _ in recorder.attempts]
    assert statuses == [422, 422, 202, 202, 404, 202, 422]  # no retries

    with Client(service.api_url) as anonymous, pytest.raises(ClientError) as no_key:
        anonymous.predict({"site": "a"})
    assert no_key.value.status == 401 and "Authorization: Bearer" in no_key.value.message
    with Client(service.api_url, api_key=PREDICT_KEY) as predictor:
        assert predictor.predict({"site": "a"}).model == "default"
        with pytest.raises(ClientError) as forbidden:
            predictor.learn({"site": "a"}, 1)
    assert forbidden.value.status == 403 and "learn" in forbidden.value.message


def test_a_bad_label_is_a_typed_error_and_nothing_is_sent(
    redis_url: str, start_authed: Callable[..., Service]
) -> None:
    service = start_authed(redis_url)
    recorder = Recorder()
    with Client(service.api_url, api_key=ADMIN_KEY, transport=recorder) as client:
        # Refused before it is sent, where int() made "yes" a bare ValueError, 0.5 a silent 0
        # and "1" a 1 the service itself refuses.
        for bad in (2, 0.5, "yes", "1", None, float("nan")):
            with pytest.raises(InvalidExampleError) as refused:
                client.learn({"site": "a"}, bad)  # type: ignore[arg-type]
            assert isinstance(refused.value, ClientError) and isinstance(refused.value, ValueError)
            assert refused.value.status == 422 and refused.value.errors[0][0] == "label"
        for heavy in ("heavy", float("inf"), float("nan")):  # JSON has no inf: a bare error
            with pytest.raises(InvalidExampleError) as weighed:
                client.learn({"site": "a"}, 1, weight=heavy)  # type: ignore[arg-type]
            assert weighed.value.errors[0][0] == "weight"
        assert recorder.attempts == []
        assert client.learn({"site": "a"}, True) == Accepted(1)
        # In a batch: its index among the examples given, and how many were accepted before.
        with pytest.raises(InvalidExampleError) as late:
            client.learn_many([({"site": "a"}, 1)] * 1001 + [({"site": "b"}, "yes")])  # type: ignore[list-item]
        assert late.value.errors[0][0] == "examples[1001].label"
        assert late.value.examples_done == 1000
    assert [status for _, status, _ in recorder.attempts] == [202, 202]


def test_each_call_may_name_its_model_and_ask_for_uncertainty(
    redis_url: str, start_authed: Callable[..., Service]
) -> None:
    service = start_authed(redis_url)
    rows = examples(20)

    async def run_async() -> tuple[Prediction, list[Prediction]]:
        async with AsyncClient(service.api_url, api_key=ADMIN_KEY) as aio:
            await aio.learn_many(rows[10:], model="other")
            one = await aio.predict(rows[0][0], model="other", uncertainty=True)
            return one, await aio.predict_many([rows[0][0]], uncertainty=True, model="other")

    with Client(service.api_url, api_key=ADMIN_KEY) as client:
        put = httpx.put(
            f"{service.api_url}/models/other",
            json={"rule": "ftrl"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        )
        assert put.status_code == 201, put.text
        assert client.learn(*rows[0], model="other") == Accepted(1)
        assert client.learn_many(rows[1:10], model="other") == Accepted(9)
        one, many = asyncio.run(run_async())
        wait_until(lambda: client.model("other").global_step >= 20, what="20 learned")
        assert client.model("default").global_step == 0  # the client's model had none
        plain = client.predict(rows[0][0])
        assert plain.model == "default" and plain.uncertainty is None
        other = client.predict(rows[0][0], model="other", uncertainty=True)
        assert other.model == "other" and other.uncertainty is not None
        # Learning only shrinks the step sizes (the worker learned meanwhile, or had).
        assert one.uncertainty is not None and many[0].uncertainty is not None
        assert 0 < other.uncertainty <= many[0].uncertainty <= one.uncertainty
        assert (one.model, many[0].model) == ("other", "other")
        batch = client.predict_many([x for x, _ in rows[:3]], uncertainty=True, model="other")
        assert [p.model for p in batch] == ["other"] * 3
        assert all(p.uncertainty is not None and p.uncertainty > 0 for p in batch)


def test_an_unreachable_service_is_retried_then_reported() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with (
        Client(url, retry=Retry(attempts=3, backoff_s=0.01)) as client,
        pytest.raises(UnreachableError, match="after 3 attempt") as error,
    ):
        client.predict({"site": "a"})
    assert isinstance(error.value.__cause__, httpx.ConnectError)

    async def learn() -> None:
        async with AsyncClient(url, retry=Retry(attempts=2, backoff_s=0.01)) as client:
            await client.learn_many([({"site": "a"}, 1)])

    with pytest.raises(UnreachableError, match="after 2 attempt"):
        asyncio.run(learn())


def test_the_documented_example_runs(
    redis_url: str,
    start_authed: Callable[..., Service],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The example of docs/getting-started.md, which reads the key `serve` writes; its output
    # after the page's own examples is checked by tests/docs/test_doc_commands.py.
    service = start_authed(redis_url)
    (tmp_path / ".online-ctr").mkdir()
    (tmp_path / ".online-ctr" / "api-keys").write_text(f"{ADMIN_KEY} admin\n")
    monkeypatch.chdir(tmp_path)
    page = (Path(__file__).parents[2] / "docs" / "getting-started.md").read_text()
    section = page[page.index("## The Python client") :]
    code = section[section.index("```python\n") + 10 : section.index("```\n")]
    code = code.replace("http://127.0.0.1:8000", service.api_url)
    exec(compile(code, "getting-started.md", "exec"), {})
    probability, accepted, batch = capsys.readouterr().out.splitlines()
    assert 0 < float(probability) < 1
    assert (accepted, batch) == ("1", "Accepted(accepted=2, replayed=False)")


def test_a_weight_goes_in_the_body_only_when_given() -> None:
    one = next(iter(operations.learn({"a": "b"}, 1, None, "k", 2.5).calls))
    assert one.body == {"features": {"a": "b"}, "label": 1, "weight": 2.5}
    plain = next(iter(operations.learn({"a": "b"}, 1, None, "k").calls))
    assert plain.body == {"features": {"a": "b"}, "label": 1}
    many = next(iter(operations.learn_many([({"a": "b"}, 0, 4), ({"c": "d"}, 1)], None, 8).calls))
    assert many.body == {
        "examples": [
            {"features": {"a": "b"}, "label": 0, "weight": 4.0},
            {"features": {"c": "d"}, "label": 1},
        ]
    }
