"""``learn_many`` through a real Redis outage: retried with the same keys, accepted once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest

from online_ctr.cli.embedded import RedisServer
from online_ctr.client import Accepted, Client, FeatureMap, Retry
from tests.client.conftest import ADMIN_KEY, Recorder, Service, wait_until
from tests.client.test_client import examples

COUNT, BATCH, OUTAGE_AT = 600, 10, 300


def pause(redis: RedisServer, outage: str) -> None:
    if outage == "freeze":  # stalled: a request may run when it resumes, after its 503
        assert redis.pid is not None
        os.kill(redis.pid, signal.SIGSTOP)
    else:
        redis.stop()


def resume(redis: RedisServer, outage: str) -> None:
    if outage == "freeze":
        assert redis.pid is not None
        os.kill(redis.pid, signal.SIGCONT)
    else:
        redis.start()


@pytest.mark.parametrize("outage", ["freeze", "restart"])
def test_learn_many_rides_out_a_redis_outage_exactly_once(
    make_redis_server: Callable[..., RedisServer],
    start_authed: Callable[..., Service],
    outage: str,
) -> None:
    redis = make_redis_server(persist=True)
    service = start_authed(redis.url, OCTR_BATCH_SIZE="64")
    rows = examples(COUNT)

    def feed() -> Iterator[tuple[FeatureMap, int]]:
        """The examples; Redis goes away once the first half has been sent."""
        for index, row in enumerate(rows):
            if index == OUTAGE_AT:
                pause(redis, outage)
            yield row

    recorder = Recorder()
    retry = Retry(attempts=20, deadline_s=60)
    outcome: dict[str, object] = {}
    with Client(
        service.api_url, api_key=ADMIN_KEY, max_batch=BATCH, retry=retry, transport=recorder
    ) as client:

        def send() -> None:
            try:
                outcome["accepted"] = client.learn_many(feed())
            except Exception as error:  # re-raised below, in the test's thread
                outcome["error"] = error

        sender = threading.Thread(target=send)
        sender.start()
        try:
            wait_until(lambda: any(s == 503 for _, s, _ in recorder.attempts), what="a 503")
        finally:
            resume(redis, outage)
        sender.join(60)
    assert not sender.is_alive() and "error" not in outcome, outcome.get("error")
    assert outcome["accepted"] in (Accepted(COUNT, False), Accepted(COUNT, True))

    # Every request kept its key on its retries and ended accepted; some were retried.
    keys = [key for _, _, key in recorder.attempts]
    assert len(set(keys)) == COUNT // BATCH and None not in keys
    final = {key: status for _, status, key in recorder.attempts}
    assert set(final.values()) == {202}
    assert len(recorder.attempts) > COUNT // BATCH

    with Client(service.api_url, api_key=ADMIN_KEY) as observer:
        wait_until(
            lambda: observer.model("default").global_step >= COUNT,
            what=f"the worker to learn {COUNT}\n{service.logs()}",
        )
        info = observer.model("default")
    assert (info.global_step, info.stream_lag, info.dead_letters) == (COUNT, 0, 0)
