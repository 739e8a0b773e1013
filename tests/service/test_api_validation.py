"""Bad input gets 413, 415 or 422 naming the field and what to do, on both endpoints."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from online_ctr.config.settings import Settings
from online_ctr.store.keys import ModelKeys
from tests.service.keys import AUTH

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

JSON = {"content-type": "application/json"}
OK = {"site": "news"}

#: (raw JSON body, field, part of the message); raw text so NaN and Infinity literals get sent.
FEATURE_CASES = [
    ('{"a": NaN}', "features.a", "must be a finite number, not NaN or Infinity"),
    ('{"a": Infinity}', "features.a", "must be a finite number"),
    ('{"a": -Infinity}', "features.a", "must be a finite number"),
    ('{"a": 1e999}', "features.a", "must be a finite number"),
    ('{"a": 1.5e15}', "features.a", "must be between -1e+15 and 1e+15"),
    ('{"a": -1e300}', "features.a", "must be between -1e+15 and 1e+15"),
    ('{"a": true}', "features.a", "a string, a finite number or a list of strings, not true/false"),
    ('{"a": null}', "features.a", "not null"),
    ('{"a": {"b": "c"}}', "features.a", "not an object"),
    ('{"a": ["x", 1]}', "features.a[1]", "list items must be strings, not a number"),
    ('{"a": ["x", null]}', "features.a[1]", "list items must be strings, not null"),
    ('{"a": ' + "1" * 400 + "}", "features.a", "too large"),
    ('{"": "x"}', 'features[""]', "field names must not be empty"),
    ('{"a=b": "x"}', 'features["a=b"]', "must not contain '='"),
    (json.dumps({"a": "x" * 1025}), "features.a", "longer than 1024 characters"),
    (json.dumps({"a": ["x" * 1025]}), "features.a[0]", "longer than 1024 characters"),
    (json.dumps({"a" * 257: "x"}), f'features["{"a" * 40}..."]', "limited to 256 characters"),
    ("{}", "features", "must not be empty"),
    ('"site=news"', "features", "must be a JSON object"),
    ("[]", "features", "must be a JSON object"),
]

#: EXAMPLE stands for one valid example of the endpoint (with a label for /learn).
SHAPE_CASES = [
    ("{}", "body", "send either 'features' (one example) or 'examples'"),
    ('{"examples": [EXAMPLE], EXAMPLE_FIELDS}', "body", "not both"),
    ('{"examples": []}', "examples", "must not be empty"),
    ('{"examples": EXAMPLE}', "examples", "must be a list"),
    ('{"feature": {"a": "b"}}', "feature", "is not a field of this request"),
    ("[1, 2]", "body", "must be a JSON object"),
    ('{"features": {"a": "b"}', "body", "is not valid JSON"),
    ("", "body", "a JSON object is required"),
]

LABEL_CASES = [
    ("true", "must be 0 or 1"),
    ("false", "must be 0 or 1"),
    ("0.5", "must be 0 or 1"),
    ("2", "must be 0 or 1"),
    ("-1", "must be 0 or 1"),
    ('"1"', "must be 0 or 1"),
]


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        state_buckets=64,
        max_examples_per_request=3,
        max_features_per_example=4,
        max_body_bytes=2048,
        **AUTH,
    )


@pytest.fixture(autouse=True)
def nothing_appended(redis_url: str) -> Iterator[None]:
    """No refused /learn request may leave anything in the stream."""
    yield
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.xlen(ModelKeys("default").stream) == 0
    finally:
        client.close()


def post(client: TestClient, path: str, raw: str | bytes, **headers: str) -> Any:
    return client.post(path, content=raw, headers={**JSON, **headers})


def assert_invalid(reply: Any, field: str, message: str) -> None:
    assert reply.status_code == 422, reply.text
    body = reply.json()
    assert any(
        error["field"] == field and message in error["message"] for error in body["errors"]
    ), body
    assert field in body["detail"] and message in body["detail"]


@pytest.mark.parametrize(("raw", "field", "message"), FEATURE_CASES)
def test_bad_features_single_and_batch(
    client: TestClient, raw: str, field: str, message: str
) -> None:
    assert_invalid(post(client, "/predict", f'{{"features": {raw}}}'), field, message)
    batch = f'{{"examples": [{{"features": {json.dumps(OK)}}}, {{"features": {raw}}}]}}'
    assert_invalid(post(client, "/predict", batch), f"examples[1].{field}", message)
    labelled = f'{{"features": {raw}, "label": 1}}'
    assert_invalid(post(client, "/learn", labelled), field, message)
    batch = f'{{"examples": [{{"features": {raw}, "label": 0}}]}}'
    assert_invalid(post(client, "/learn", batch), f"examples[0].{field}", message)


@pytest.mark.parametrize(("raw", "field", "message"), SHAPE_CASES)
@pytest.mark.parametrize("path", ["/predict", "/learn"])
def test_bad_shapes(client: TestClient, path: str, raw: str, field: str, message: str) -> None:
    fields = '"features": {"a": "b"}' + (', "label": 1' if path == "/learn" else "")
    raw = raw.replace("EXAMPLE_FIELDS", fields).replace("EXAMPLE", f"{{{fields}}}")
    assert_invalid(post(client, path, raw), field, message)


@pytest.mark.parametrize(("raw", "message"), LABEL_CASES)
def test_labels_are_the_numbers_0_and_1(client: TestClient, raw: str, message: str) -> None:
    assert_invalid(
        post(client, "/learn", f'{{"features": {{"a": "b"}}, "label": {raw}}}'), "label", message
    )
    batch = f'{{"examples": [{{"features": {{"a": "b"}}, "label": {raw}}}]}}'
    assert_invalid(post(client, "/learn", batch), "examples[0].label", message)


@pytest.mark.parametrize("raw", ["0.0", "1.0", "1"])
def test_whole_number_labels_are_integers(client: TestClient, settings: Settings, raw: str) -> None:
    """JSON Schema counts 1.0 as an integer, so the API does too (schemathesis found it)."""
    reply = post(client, "/learn", f'{{"features": {{"a": "b"}}, "label": {raw}}}')
    assert reply.status_code == 202, reply.text
    assert settings.redis_url is not None
    with redis.Redis.from_url(settings.redis_url) as direct:
        assert direct.delete(ModelKeys("default").stream) == 1  # appended; nothing left over


def test_label_and_features_go_together(client: TestClient) -> None:
    assert_invalid(post(client, "/learn", '{"features": {"a": "b"}}'), "label", "is required")
    assert_invalid(post(client, "/learn", '{"label": 1}'), "body", "send either")
    batch = '{"examples": [{"features": {"a": "b"}}]}'
    assert_invalid(post(client, "/learn", batch), "examples[0].label", "is required")
    predict_with_label = '{"features": {"a": "b"}, "label": 1}'
    assert_invalid(post(client, "/predict", predict_with_label), "label", "not a field")


@pytest.mark.parametrize("path", ["/predict", "/learn"])
def test_too_many_examples(client: TestClient, path: str) -> None:
    body = {"examples": [{"features": OK, "label": 1} for _ in range(4)]}
    if path == "/predict":
        body = {"examples": [{"features": OK} for _ in range(4)]}
    reply = client.post(path, json=body)
    assert_invalid(reply, "examples", "4 examples; at most 3 per request")


@pytest.mark.parametrize("path", ["/predict", "/learn"])
def test_too_many_features_counting_list_items(client: TestClient, path: str) -> None:
    label = {"label": 1} if path == "/learn" else {}
    fits = {"a": "1", "tags": ["x", "y", "z"]}
    assert client.post("/predict", json={"features": fits}).status_code == 200
    too_many = {"a": "1", "tags": ["x", "y", "z", "w"]}
    reply = client.post(path, json={"features": too_many, **label})
    assert_invalid(reply, "features", "5 features (list items count one each); at most 4")
    body = {"examples": [{"features": fits, **label}, {"features": too_many, **label}]}
    assert_invalid(client.post(path, json=body), "examples[1].features", "5 features")


@pytest.mark.parametrize("path", ["/predict", "/learn"])
def test_body_over_the_limit_is_413(client: TestClient, path: str) -> None:
    big = json.dumps({"features": {"a": "x" * 1100, "b": "y" * 1100}, "label": 1})
    reply = post(client, path, big)
    assert reply.status_code == 413
    assert reply.json() == {"detail": "the request body is larger than the limit of 2048 bytes"}

    def chunks() -> Iterator[bytes]:  # no Content-Length: the bytes received are counted
        yield big.encode()[:1000]
        yield big.encode()[1000:]

    reply = client.post(path, content=chunks(), headers=JSON)
    assert reply.status_code == 413, reply.text


@pytest.mark.parametrize("path", ["/predict", "/learn"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_non_json_content_type_is_415(
    client: TestClient, path: str, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    reply = client.post(path, content=b'{"features": {"a": "b"}, "label": 1}', headers=headers)
    assert reply.status_code == 415
    assert "Content-Type: application/json" in reply.json()["detail"]


def test_json_media_types_with_parameters_are_accepted(client: TestClient) -> None:
    body = b'{"features": {"a": "b"}}'
    for content_type in ("application/json; charset=utf-8", "application/ctr+json"):
        reply = client.post("/predict", content=body, headers={"content-type": content_type})
        assert reply.status_code == 200, reply.text
