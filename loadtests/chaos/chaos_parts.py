"""The parts of the chaos suite (:mod:`loadtests.chaos.chaos`): a Redis that loses nothing it
acknowledged, feeding clients that retry with the same ``Idempotency-Key``, and the proof
from Redis that every accepted example was learned exactly once.

Every example carries a unique ``tag`` feature. With FTRL a feature learned once from the
empty state holds ``z = g`` and ``n = g^2`` (its weight was 0, so ``sigma * w`` is 0): a tag
whose ``z^2`` differs from its ``n`` was learned more than once, a tag with no state was lost.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import redis

from loadtests.common.processes import Stack
from online_ctr.cli.embedded import RedisServer
from online_ctr.learning.features import FeatureHasher
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Layout
from testkit.ports import free_port

#: Values of the Criteo-like categorical features beside the tag.
_VALUES = [f"{value:08x}" for value in range(40)]


class DurableRedis(RedisServer):
    """A persistent Redis that fsyncs every write: a restart, even after SIGKILL, keeps
    everything it acknowledged."""

    def command(self) -> list[str]:
        argv = super().command()
        argv[argv.index("--appendfsync") + 1] = "always"
        return argv

    def _signal(self, signum: int) -> None:
        assert self.pid is not None, "redis is not running"
        os.kill(self.pid, signum)

    def stall(self, seconds: float) -> None:
        """SIGSTOP for ``seconds``, then SIGCONT: Redis neither answers nor drops connections."""
        self._signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            self._signal(signal.SIGCONT)

    def restart(self, graceful: bool) -> None:
        """SIGTERM (Redis writes and fsyncs its AOF, then exits) or SIGKILL, then start."""
        if graceful:
            self.stop()
        else:
            process = self._process
            assert process is not None, "redis is not running"
            process.kill()
            process.wait()
            if process.stderr:
                process.stderr.close()
            self._process = None
        self.start(timeout_s=30)


class Learners:
    """A stack's two real workers, each restarted under a new name when it is SIGKILLed, and
    the kills of whichever holds the model's lease (``read_lease``: its value, or None)."""

    def __init__(self, stack: Stack, read_lease: Callable[[], bytes | None]) -> None:
        self.stack = stack
        self.read_lease = read_lease
        self.names: dict[int, str] = {}
        self.generation = 0
        self.kills = 0
        self.leader_kills = 0  # kills of the worker that held the lease at the time

    def start(self) -> None:
        for slot in (0, 1):
            self.start_worker(slot)

    def start_worker(self, slot: int) -> None:
        self.generation += 1
        self.names[slot] = f"w{slot}-{self.generation}"
        port = free_port()
        self.stack.worker_metrics[f"worker{slot}"] = f"http://127.0.0.1:{port}/metrics"
        self.stack.spawn(
            f"worker{slot}",
            [sys.executable, "-m", "online_ctr.cli.main", "worker"],
            OCTR_WORKER_METRICS_PORT=str(port),
            OCTR_WORKER_NAME=self.names[slot],
        )

    def leader_slot(self) -> int | None:
        """The slot of the running worker holding the lease; None if none does (yet)."""
        value = self.read_lease()
        holder = value.decode().split()[-1] if value else ""
        return next((slot for slot, name in self.names.items() if name == holder), None)

    def _victim(self, patience_s: float) -> int:
        """The learner's slot, waiting up to ``patience_s`` for one to lead; either slot if
        none does (Redis is down or stalled, or the lease is still a killed worker's)."""
        deadline = time.monotonic() + patience_s
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                slot = self.leader_slot()
                if slot is not None:
                    self.leader_kills += 1
                    return slot
            time.sleep(0.05)
        return self.kills % 2

    def kill_leader(self, patience_s: float = 2.0) -> None:
        """SIGKILL the learner and start its slot again under a new name."""
        slot = self._victim(patience_s)
        process = self.stack.children.pop(f"worker{slot}")
        process.kill()
        process.wait()
        self.kills += 1
        self.start_worker(slot)

    def kill_loop(self, kills: int, every_s: float, patience_s: float = 2.0) -> None:
        """SIGKILL the learner (restarting it) every ``every_s`` until ``kills`` were made,
        each time waiting up to ``patience_s`` for one to lead (a long wait: only learners are
        killed, never a standby still starting while none leads)."""
        while self.kills < kills:
            time.sleep(every_s)
            self.kill_leader(patience_s)


@dataclass
class FeedLog:
    """What the feeding clients saw, shared between their threads."""

    accepted_tags: set[str] = field(default_factory=set)
    other_features: set[str] = field(default_factory=set)  # the accepted non-tag features
    accepted: int = 0
    requests: int = 0
    answers_503: int = 0
    replayed: int = 0  # retries answered as an earlier attempt that Redis had accepted
    connection_errors: int = 0
    unexpected: list[str] = field(default_factory=list)
    max_503_s: float = 0.0
    #: When the attempt that got each 202 was sent (``time.monotonic()``), with its tags: an
    #: attempt sent after a master died cannot have been written by it, so what a failover
    #: may lose is told apart by it from what it must not.
    accepted_at: list[tuple[float, list[str]]] = field(default_factory=list)
    abandoned: int = 0  # requests still unanswered 202 when the feeders gave up on them
    lock: threading.Lock = field(default_factory=threading.Lock)


class Feeders:
    """Threads that post /learn bodies of uniquely tagged examples until stopped, each
    request retried with its key until it is accepted."""

    def __init__(self, api_url: str, clients: int = 2, per_request: int = 20) -> None:
        self.api_url = api_url
        self.per_request = per_request
        self.log = FeedLog()
        self._counter = itertools.count()
        self._stop = threading.Event()
        self._abandon = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(index,), daemon=True)
            for index in range(clients)
        ]

    def __enter__(self) -> Feeders:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, patience_s: float | None = None) -> None:
        """Stop after each client's request in flight is accepted; after ``patience_s``, if
        given, give up on those still refused (counted in ``abandoned``: neither accepted nor
        known not to be)."""
        self._stop.set()
        deadline = None if patience_s is None else time.monotonic() + patience_s
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._abandon.set()
        for thread in self._threads:
            thread.join()

    def _body(self, rng: random.Random) -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
        tags = [f"e{next(self._counter)}" for _ in range(self.per_request)]
        examples: list[dict[str, Any]] = [
            {
                "features": {"tag": tag, **{f"C{c}": rng.choice(_VALUES) for c in range(1, 5)}},
                "label": int(rng.random() < 0.25),
            }
            for tag in tags
        ]
        return tags, {"examples": examples}

    def _run(self, index: int) -> None:
        rng = random.Random(index)
        with httpx.Client(base_url=self.api_url, timeout=10.0) as client:
            while not self._stop.is_set():
                tags, body = self._body(rng)
                answer = self._send(client, body, {"Idempotency-Key": str(uuid.uuid4())})
                with self.log.lock:
                    self.log.requests += 1
                    if answer is None:
                        self.log.abandoned += 1
                        return
                    accepted, sent = answer
                    self.log.accepted += accepted
                    if accepted:
                        self.log.accepted_tags.update(tags)
                        self.log.accepted_at.append((sent, tags))
                        self.log.other_features.update(
                            f"{name}={value}"
                            for example in body["examples"]
                            for name, value in example["features"].items()
                            if name != "tag"
                        )

    def _send(
        self, client: httpx.Client, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, float] | None:
        """Post until accepted (202): the number of examples the answer says it accepted, and
        when the accepted attempt was sent (None: given up on by :meth:`stop`)."""
        while not self._abandon.is_set():
            started = time.monotonic()
            try:
                reply = client.post("/learn", json=body, headers=headers)
            except httpx.HTTPError:
                with self.log.lock:
                    self.log.connection_errors += 1
                time.sleep(0.05)
                continue
            if reply.status_code == 202:
                if reply.headers.get("Idempotent-Replayed") == "true":
                    with self.log.lock:
                        self.log.replayed += 1
                return int(reply.json()["accepted"]), started
            with self.log.lock:
                if reply.status_code == 503:
                    self.log.answers_503 += 1
                    self.log.max_503_s = max(self.log.max_503_s, time.monotonic() - started)
                else:
                    self.log.unexpected.append(f"{reply.status_code} {reply.text[:200]}")
                    return 0, started
            time.sleep(0.05)
        return None


@dataclass(frozen=True)
class Audit:
    """What Redis holds after the stream drained, against what the clients had accepted."""

    t: int
    dead_letters: int
    tracked: int
    tags_once: int
    tags_doubled: int
    tags_lost: int
    stream_left: int
    #: Which tags were doubled and which lost (when each was accepted tells a failover's
    #: window from what it must never lose).
    doubled: frozenset[str] = frozenset()
    lost: frozenset[str] = frozenset()


def audit(
    client: redis.Redis | redis.RedisCluster, accepted_tags: set[str], model: str = "default"
) -> Audit:
    """Read the model's counters and every state hash; classify each accepted tag. The
    stream's length is read first: once it is 0 with feeding stopped, the counters read
    next are final (the state may still miss the last commit until its learner applies it)."""
    keys = ModelKeys(model)
    stream_left = _length(client, keys.stream)  # first: once 0, no commit can follow
    meta = {k.decode(): v.decode() for k, v in client.hgetall(keys.meta).items()}  # type: ignore[union-attr]
    hash_bits = int(meta.get("hash_bits", 64))
    layout = Layout(int(meta["buckets"]), int(meta["shards"]), hash_bits, 2)
    hasher = FeatureHasher(None if hash_bits == 64 else hash_bits)
    wanted = {hasher.id(f"tag={tag}"): tag for tag in accepted_tags}
    found: dict[int, np.ndarray] = {}
    bucket_keys = list(client.scan_iter(match=f"octr:{{{model}/*}}:b:*", count=1000))
    for start in range(0, len(bucket_keys), 1000):  # a round trip per thousand buckets
        pipe = client.pipeline(transaction=False)
        for key in bucket_keys[start : start + 1000]:
            pipe.hgetall(key)
        for key, fields in zip(bucket_keys[start : start + 1000], pipe.execute(), strict=True):
            bucket = int(key.rsplit(b":", 1)[1])
            for name, value in fields.items():
                feature = (int.from_bytes(name, "little") << layout.bucket_bits) | bucket
                if feature in wanted:
                    found[feature] = np.frombuffer(value, "<f8")
    doubled = {
        wanted[feature]
        for feature, (z, n) in found.items()
        if not np.isclose(z * z, n, rtol=1e-9, atol=0)
    }
    once = len(found) - len(doubled)
    return Audit(
        t=int(meta.get("t", 0)),
        dead_letters=_length(client, keys.dead),
        tracked=int(meta.get("tracked", 0)),
        tags_once=once,
        tags_doubled=len(doubled),
        tags_lost=len(wanted) - len(found),
        stream_left=stream_left,
        doubled=frozenset(doubled),
        lost=frozenset(tag for feature, tag in wanted.items() if feature not in found),
    )


def _length(client: redis.Redis | redis.RedisCluster, stream: str) -> int:
    length: int = client.xlen(stream)
    return length
