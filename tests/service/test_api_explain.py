"""POST /predict with `explain: true` against a real Redis, on models learned from every
shared data file through the real API and worker: each logit is its bias plus its listed
contributions plus the rest, the terms are weight * x of the features as sent, and explaining
costs no Redis command more."""

from __future__ import annotations

import asyncio
import itertools
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.explain import sent_features
from online_ctr.learning.features import Example, FeatureHasher, concat
from online_ctr.learning.learner import logits, scoring_features
from online_ctr.learning.readers import read_examples
from service.api.explained import explanations
from service.api.predict_schemas import MAX_EXPLAIN_TOP
from service.app import create_app
from tests.service.keys import AUTH, HEADERS
from tests.service.test_api_calibration import learn_in_two_commits
from tests.service.test_api_predict import ROWS, learn_with_worker, predict
from tests.service.test_api_uncertainty import EXAMPLES, learned, warm_commands

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

#: Every shared data file of labelled examples, with its reader's format.
DATA_FILES = [
    ("criteo/criteo_kaggle_train_head10k.tsv", "criteo"),
    ("criteo/criteo_deepctr_sample200.csv", "criteo"),
    ("avazu/avazu_train_head10k.csv", "avazu"),
    ("ipinyou/ipinyou_train.fm.txt", "libfm"),
]
LEARNED, EXPLAINED = 3000, 300


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, api_keys=AUTH["api_keys"])


def check_sums(explanation: dict[str, Any], logit: float) -> None:
    """bias + base_rate + listed + rest is the logit, to 1e-12 relative (the API sums the
    same terms in another order: its rounding is a few ulps of the terms' magnitudes, which the
    absolute part allows for when they cancel to a logit near 0)."""
    terms = explanation["features"]
    head = [explanation["bias"], explanation["base_rate"]]
    parts = [*head, *(t["contribution"] for t in terms), explanation["rest"]]
    scale = sum(abs(h) for h in head) + sum(abs(t["contribution"]) for t in terms)
    assert math.isclose(math.fsum(parts), logit, rel_tol=1e-12, abs_tol=1e-15 * scale)
    for t in terms:
        assert t["contribution"] == t["weight"] * t["x"]
    magnitudes = [abs(t["contribution"]) for t in terms]
    assert magnitudes == sorted(magnitudes, reverse=True)


@pytest.mark.parametrize(("relative", "fmt"), DATA_FILES)
def test_contributions_sum_to_the_logit_on_every_data_file(
    client: TestClient, settings: Settings, data_dir: Path, relative: str, fmt: str
) -> None:
    rows = list(itertools.islice(read_examples(data_dir / relative, fmt), LEARNED + EXPLAINED))
    learning, held_out = rows[:LEARNED], rows[LEARNED:] or rows[-EXPLAINED:]
    for start in range(0, len(learning), 1000):
        part = learning[start : start + 1000]
        body = {"examples": [{"features": x, "label": y} for x, y in part]}
        assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_with_worker(settings))
    examples = [x for x, _ in held_out]
    plain = predict(client, {"examples": [{"features": x} for x in examples]})["predictions"]
    every = {"examples": [{"features": x} for x in examples], "explain": True}
    whole = predict(client, {**every, "explain_top": MAX_EXPLAIN_TOP})["predictions"]
    top = predict(client, every)["predictions"]
    assert [p["logit"] for p in whole] == [p["logit"] for p in plain] == [p["logit"] for p in top]
    nonzero = 0
    for x, all_terms, top_terms in zip(examples, whole, top, strict=True):
        check_sums(all_terms["explanation"], all_terms["logit"])
        check_sums(top_terms["explanation"], top_terms["logit"])
        # Every feature sent is listed once, named as the model hashed it.
        names = sorted(t["feature"] for t in all_terms["explanation"]["features"])
        assert names == sorted(s.name for s in sent_features(x, settings.numeric))
        assert all_terms["explanation"]["rest"] == 0.0 == all_terms["explanation"]["omitted"]
        listed = top_terms["explanation"]["features"]
        assert len(listed) == min(10, len(names))
        assert top_terms["explanation"]["omitted"] == len(names) - len(listed)
        assert listed == all_terms["explanation"]["features"][: len(listed)]
        nonzero += any(t["weight"] != 0.0 for t in listed)
    assert nonzero > len(examples) // 2  # the model learned: the terms are not all zero
    # Each weight is its own feature's: sent alone, a feature scores bias + prior + w x.
    first = whole[0]["explanation"]
    assert first["base_rate"] < 0  # the prior of a model that learned a rate below 1/2
    for term in first["features"][:8]:
        field, _, value = term["feature"].partition("=")
        sent = term.get("number", value)  # a number is sent as the number
        alone = predict(client, {"features": {field: sent}})["logit"]
        expected = first["bias"] + term["contribution"] + first["base_rate"]
        assert alone == pytest.approx(expected, rel=1e-12, abs=1e-15)
    for x, expected in zip(examples[:5], top, strict=False):  # single bodies answer the same
        single = predict(client, {"features": x, "explain": True})
        assert single["explanation"] == expected["explanation"]
        assert single["logit"] == expected["logit"]


def test_numbers_are_named_as_the_model_saw_them(redis_url: str) -> None:
    example = {"site": "news", "hour": 14, "price": 2.5, "zero": 0, "tags": ["a", "b"]}
    expected = {
        "log_bucket": {"site=news", "hour=6", "price=0", "zero=0", "tags=a", "tags=b"},
        "raw": {"site=news", "hour", "price", "tags=a", "tags=b"},  # a raw 0 is absent
    }
    for numeric, names in expected.items():
        settings = Settings(
            redis_url=redis_url, numeric=numeric, model=numeric, api_keys=AUTH["api_keys"]
        )
        with app_client(settings) as client:
            body = {"examples": [{"features": example, "label": 1}] * 20}
            assert client.post("/learn", json=body).status_code == 202
            asyncio.run(learn_with_worker(settings))
            answer = predict(client, {"features": example, "explain": True})
        terms = {t["feature"]: t for t in answer["explanation"]["features"]}
        assert set(terms) == names
        check_sums(answer["explanation"], answer["logit"])
        assert terms["hour" if numeric == "raw" else "hour=6"]["number"] == 14.0
        assert "number" not in terms["site=news"]
        if numeric == "raw":
            assert terms["price"]["x"] == 2.5
            assert terms["price"]["contribution"] == 2.5 * terms["price"]["weight"] != 0.0
        else:
            assert {t["x"] for t in terms.values()} == {1.0}


def app_client(settings: Settings) -> TestClient:
    """The real app on ``settings`` (a test that needs two differently configured)."""
    return TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS)


def test_explanations_only_when_asked(client: TestClient) -> None:
    plain = predict(client, {"features": EXAMPLES[0]})
    assert "explanation" not in plain
    off = predict(client, {"examples": [{"features": EXAMPLES[0]}], "explain": False})
    assert "explanation" not in off["predictions"][0]
    # explain_top without explain changes nothing
    alone = predict(client, {"features": EXAMPLES[0], "explain_top": 3})
    assert "explanation" not in alone
    asked = predict(client, {"features": EXAMPLES[0], "explain": True, "uncertainty": True})
    assert (asked["probability"], asked["logit"]) == (plain["probability"], plain["logit"])
    assert "uncertainty" in asked and "explanation" in asked


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"explain": True, "explain_top": 0}, "explain_top"),
        ({"explain": True, "explain_top": MAX_EXPLAIN_TOP + 1}, "explain_top"),
        ({"explain": True, "explain_top": "3"}, "explain_top"),
        ({"explain": True, "explain_top": 2.5}, "explain_top"),
        ({"explain": "yes"}, "explain"),
        ({"explain": 1}, "explain"),
    ],
)
def test_explain_top_is_bounded_by_a_422_naming_it(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    for shaped, where in (
        ({"features": {"a": "b"}, **body}, field),
        ({"examples": [{"features": {"a": "b"}}], **body}, field),
    ):
        reply = client.post("/predict", json=shaped)
        assert reply.status_code == 422, reply.text
        assert [error["field"] for error in reply.json()["errors"]] == [where]
    if body.get("explain_top") == MAX_EXPLAIN_TOP + 1:  # the message says the bound
        text = client.post("/predict", json={"features": {"a": "b"}, **body}).text
        assert str(MAX_EXPLAIN_TOP) in text


def test_explain_top_at_its_bounds(client: TestClient) -> None:
    for top in (1, MAX_EXPLAIN_TOP):
        answer = predict(client, {"features": EXAMPLES[-1], "explain": True, "explain_top": top})
        assert len(answer["explanation"]["features"]) == min(top, 4)
        assert answer["explanation"]["omitted"] == 4 - min(top, 4)


def test_explain_costs_no_extra_redis_command(settings: Settings) -> None:
    # Auth off: no key watch polls Redis during the count (service.api.key_watch).
    settings = settings.model_copy(update={"auth": "off"})
    with app_client(settings) as client:
        learned(client, settings)
        plain = redis.Redis.from_url(str(settings.redis_url))
        bodies = [{"features": x} for x in EXAMPLES] + [
            {"examples": [{"features": x} for x in EXAMPLES]}
        ]
        counted = {}
        for asked in (False, True):

            def send(asked: bool = asked) -> None:
                for body in bodies:
                    answer = predict(client, {**body, "explain": asked})
                    assert ("explanation" in str(answer)) == asked

            counted[asked] = warm_commands(plain, send)
        plain.close()
        # No call at all: the API's copy holds these features, and Redis has told of no
        # change since its last call (online_ctr.store.change_notices).
        assert counted[True] == counted[False] == {}


@pytest.mark.parametrize("hash_bits", [None, 3])
def test_merged_ids_are_explained_by_name(hash_bits: int | None) -> None:
    """A repeated list item, or ids colliding at 3 bits, are merged when a request is hashed
    (its rows then sorted by id): each feature's weight is then found by its name's id, and
    the terms still sum to the logit the pass computes. The request is the second of a pass,
    as service.api.served puts it: hashed on its own, after another request's rows."""
    hasher = FeatureHasher(hash_bits=hash_bits, numeric="log_bucket")
    before: list[Example] = [{"site": "other"}, {"os": "android", "hour": 3}]
    rows: list[Example] = [
        {"tags": ["a", "a", "b"], "site": "news"},
        {"site": "blog", "hour": 14, "os": "ios", "device": "phone", "c": "1", "d": "2"},
        {"site": "news"},
    ]
    for request in (rows, rows[1:]):  # merged, and (at 64 bits) not
        batch = concat([hasher.batch(before), hasher.batch(request)])
        features = scoring_features(batch)
        weights = np.linspace(-1.0, 1.5, len(features.ids))
        s = logits(batch, features, weights).tolist()[len(before) :]
        distinct = features.ids.tolist()
        explained = explanations(request, batch, len(before), features, weights, hasher, 3)
        for logit, explanation in zip(s, explained, strict=True):
            parts = [explanation.bias, *(t.contribution for t in explanation.terms)]
            assert math.isclose(
                math.fsum([*parts, explanation.rest]), logit, rel_tol=1e-12, abs_tol=1e-15
            )
            for term in explanation.terms:  # each the weight of its own id
                assert term.weight == weights[distinct.index(hasher.id(term.name))]


def test_a_calibrated_model_explains_its_logit_before_calibration(redis_url: str) -> None:
    settings = Settings(
        redis_url=redis_url, state_buckets=64, calibration="power", api_keys=AUTH["api_keys"]
    )
    with app_client(settings) as client:
        asyncio.run(learn_in_two_commits(client, settings))
        examples = [x for x, _ in ROWS[:30]]
        body = {"examples": [{"features": x} for x in examples], "explain": True}
        got = predict(client, body)
    assert got["calibrated"] is True
    moved = 0
    for prediction in got["predictions"]:
        check_sums(prediction["explanation"], prediction["logit"])
        moved += prediction["probability"] != pytest.approx(
            1 / (1 + math.exp(-prediction["logit"]))
        )
    assert moved > 0  # the probability is the fit's, not sigmoid(logit): the logit is explained


def test_a_whole_float_explain_top_is_that_integer(client: TestClient) -> None:
    # JSON Schema's integers include 2.0 (schemathesis sent one): answered as for 2.
    answer = predict(client, {"features": EXAMPLES[-1], "explain": True, "explain_top": 2.0})
    assert len(answer["explanation"]["features"]) == 2
