"""Every script that writes checks its inputs before its first write (style rule 10): driven
with a bad argument or a bad stored value, it is refused and every key it could touch is left
byte for byte as it was (``DUMP`` of each key, and the set of keys, before and after)."""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.exceptions import ResponseError

from online_ctr.store.keys import FeedbackKeys, RegistryKeys
from online_ctr.store.scripts import register
from online_ctr.store.state import ModelStore
from tests.workers.conftest import MakeStore, make_worker, send
from workers.committer import MOST_WAITING

pytestmark = pytest.mark.anyio

#: A script call on a model with some history: it answers, or raises ResponseError.
Drive = Callable[[ModelStore], Awaitable[Any]]


async def dumps(store: ModelStore) -> dict[bytes, bytes]:
    """Every key of the Redis and its DUMP."""
    keys = [key async for key in store.redis.scan_iter(count=1000)]
    return {key: await store.redis.dump(key) for key in keys}


async def with_history(store: ModelStore) -> None:
    """A model that learned some groups, with one commit left in its redo log and a pin."""
    await send(store, [({"a": str(i % 7), "b": str(i % 3)}, i % 2) for i in range(40)])
    await make_worker(store, "w1", batch_size=10).run_until_idle()
    await store.redis.hset(store.keys.pins, "export", "1 99999999999999")
    assert await store.redis.xlen(store.keys.redo) <= 2 * MOST_WAITING


def finalize_args(store: ModelStore, fence: str, t: int, **changed: Any) -> list[Any]:
    args: dict[str, Any] = {
        "fence": fence, "t": t, "epoch": "", "examples": 1, "loss": "0.5", "ids": "",
        "leaving": b"", "entering": b"", "steps": b"", "stable": 0, "tracked": 0,
        "through": 1, "fit": "", "histogram": b"", "excess": "0",
        "positions": b"", "counts": b"", "counters": 1 << 22, "expired": 0,
        "slots": b"", "values": b"", "size": 0, "marks": "", "evicted": 0, "taus": b"",
        "tally": "", "base": "", "sums": "0.5 1.0 0.5 1.0",
    }  # fmt: skip
    args.update(changed)
    return [
        *args.values(),
        "s0",
        b"\0" * (4 + store.spec.layout.field_bytes + store.spec.layout.value_bytes),
    ]


async def finalize(
    store: ModelStore, meta: dict[str, Any] | None = None, cut: int = 0, **args: Any
) -> Any:
    """finalize.lua with the stored fence, step and epoch, after writing ``meta``; the
    arguments the defaults of :func:`finalize_args` with ``args``, less the last ``cut``."""
    if meta:
        pin = meta.pop("pin", None)
        if pin is not None:
            await store.redis.hset(store.keys.pins, "export", pin)
        if meta:
            await store.redis.hset(store.keys.meta, mapping=meta)
    fence = (await store.redis.hget(store.keys.meta, "fence") or b"0").decode()
    t, epoch = await store.version()
    keys = store.keys
    return await store.scripts.finalize(
        keys=keys.finalize_keys(),
        args=finalize_args(store, fence, t, epoch=epoch, **args)[: -cut or None],
    )


def apply(args: dict[int, Any]) -> Drive:
    async def drive(store: ModelStore) -> Any:
        layout = store.spec.layout
        head = [99, layout.field_bytes, layout.value_bytes, layout.shards, 8]
        shards = [store.keys.shard(i) for i in range(2)]
        record = b"\0" * (4 + layout.field_bytes + layout.value_bytes)
        call: list[Any] = [*head]
        for shard in shards:
            call += [shard.bucket_prefix, record, shard.filter]
        for at, value in args.items():
            call[at] = value
        return await store.scripts.apply(keys=[s.applied for s in shards], args=call)

    return drive


def apply_on(stored: str, stamp: Any = 99) -> Drive:
    """apply.lua with the first shard's ``applied`` set to ``stored`` and commit ``stamp``."""
    call = apply({0: stamp})

    async def drive(store: ModelStore) -> Any:
        await store.redis.set(store.keys.shard(0).applied, stored)
        return await call(store)

    return drive


def generation(
    seq: Any = None, gen: Any = 5, report: str = "went back", meta: dict[str, str] | None = None
) -> Drive:
    """generation.lua with the stored fence and seq (unless given), after writing ``meta``."""

    async def drive(store: ModelStore) -> Any:
        await store.redis.hset(store.keys.meta, mapping=meta or {"note": "as is"})
        fence, stored = await store.redis.hmget(store.keys.meta, "fence", "seq")
        args = [fence or b"0", stored if seq is None else seq, gen, report]
        return await store.scripts.generation(keys=[store.keys.meta], args=args)

    return drive


async def set_then(store: ModelStore, key: str, field: str, value: str) -> None:
    await store.redis.hset(key, field, value)


def finalize_case(meta: dict[str, Any] | None = None, **args: Any) -> Drive:
    return lambda store: finalize(store, meta, **args)


#: finalize.lua's arguments of a commit to a feature budget of 8 slots, changing none.
BUDGET: dict[str, Any] = {"size": 8, "marks": "0 0 0 0"}


def set_key_then(key: str, value: bytes, then: Drive) -> Drive:
    """``then``, after setting the model's ``key`` (a :class:`ModelKeys` property) to ``value``."""

    async def drive(store: ModelStore) -> Any:
        await store.redis.set(getattr(store.keys, key), value)
        return await then(store)

    return drive


def lease(ttl: Any, token: str = "", meta: dict[str, str] | None = None) -> Drive:
    async def drive(store: ModelStore) -> Any:
        await store.redis.delete(store.keys.lease)  # free: the call would take it
        await store.redis.hset(store.keys.meta, mapping=meta or {"note": "free"})
        keys = [store.keys.meta, store.keys.lease]
        return await store.scripts.lease(keys=keys, args=["w9", ttl, token, ""])

    return drive


def trim(through: Any, pin: str | None = None) -> Drive:
    async def drive(store: ModelStore) -> Any:
        if pin is not None:
            await store.redis.hset(store.keys.pins, "export", pin)
        keys = [store.keys.redo, store.keys.pins, store.keys.meta]
        return await store.scripts.trim(keys=keys, args=[through])

    return drive


def finish(*fields: str) -> Drive:
    async def drive(store: ModelStore) -> Any:
        await store.redis.hset(store.keys.meta, "importing", "tok")
        return await store.scripts.finish(keys=[store.keys.meta], args=["tok", *fields])

    return drive


def claim(mode: str, fence: str | None = None) -> Drive:
    async def drive(store: ModelStore) -> Any:
        if fence is not None:
            await store.redis.hset(store.keys.meta, "fence", fence)
        return await store.scripts.claim(keys=store.keys.log_side(), args=["tok", mode])

    return drive


def expired(**changed: Any) -> Drive:
    """``expired.lua`` (reads only) over shard 0's first buckets, with ``changed`` arguments."""

    async def drive(store: ModelStore) -> Any:
        shard = store.keys.shard(0)
        args: dict[str, Any] = {"prefix": shard.bucket_prefix, "first": 0, "step": 8,
                                "stop": 64, "gone": 10, "value_bytes": 24}  # fmt: skip
        args.update(changed)
        return await store.scripts.expired(keys=[shard.applied], args=list(args.values()))

    return drive


def dead_letter(entry: str) -> Drive:
    async def drive(store: ModelStore) -> Any:
        keys = store.keys
        fence = (await store.redis.hget(keys.meta, "fence") or b"0").decode()
        return await store.scripts.dead_letter(
            keys=[keys.meta, keys.stream, keys.dead, keys.failures], args=[fence, entry, "why"]
        )

    return drive


def snapshot_pin(what: str, ttl: Any, pin: str | None = None) -> Drive:
    async def drive(store: ModelStore) -> Any:
        if pin is not None:
            await store.redis.hset(store.keys.pins, "tok", pin)
        keys = store.keys
        return await store.scripts.snapshot_pin(
            keys=[keys.meta, keys.redo, keys.pins, keys.expiry], args=[what, "tok", ttl]
        )

    return drive


def sweep(impression: dict[str, str], policy: str = "negative", count: Any = 10) -> Drive:
    """sweep.lua (registered by Impressions, here alone) over two due impressions,
    the second one ``impression``: the first would be closed before it."""

    async def drive(store: ModelStore) -> Any:
        script = register(store.redis, "sweep")
        keys = FeedbackKeys.of(store.spec.name, None)
        good = {"s": "pending", "b": "entry", "p": "0.5", "m": "default"}
        await store.redis.zadd(keys.pending, {"i1": 1, "i2": 2})
        await store.redis.hset(keys.impression("i1"), mapping=good)
        await store.redis.hset(keys.impression("i2"), mapping=impression)
        args = [keys.impression(""), count, policy, 1000]
        return await script(keys=[keys.pending, store.keys.stream], args=args)

    return drive


async def full_index(store: ModelStore, keys: FeedbackKeys, index: str = "zset") -> None:
    """The tag holding one live Idempotency-Key record, at a limit of one: a new record would
    drop it (with ``index`` 'string', the index is a key of another type)."""
    await store.redis.set(keys.idempotency("old"), "digest 1", ex=600)
    if index == "string":
        await store.redis.set(keys.idempotency_index, "not a zset")
    else:
        await store.redis.zadd(keys.idempotency_index, {"old": 2**40})


def append(
    window: Any = 60,
    n: Any = 1,
    keyed: str = "1",
    second: str | None = None,
    most: Any = 1,
    index: str = "zset",
    prefix: str | None = None,
    extra: int = 0,
) -> Drive:
    """append.lua (registered by FeedbackLog, here alone) for the model, or with ``second``
    (its stream's type: 'string' for another type) for a group of two; the tag at its limit of
    ``most`` records (:func:`full_index`), the records under ``prefix`` (None: the tag's);
    ``extra`` more entries, as if each stream had its own."""

    async def drive(store: ModelStore) -> Any:
        keys = FeedbackKeys.of(store.spec.name, None)
        metas, streams = [store.keys.meta], [store.keys.stream]
        if second is not None:
            other = store.keys.meta + ":other"
            await store.redis.set(other + ":stream", "not a stream")
            await store.redis.hset(other, "t", "0")
            metas.append(other)
            streams.append(other + ":stream")
        await full_index(store, keys, index)
        script = register(store.redis, "append")
        bound = [most, keys.idempotency("") if prefix is None else prefix]
        args = [b"\1" * 16, "digest 1", window, n, keyed, *bound, *[b"\2" * 16] * extra]
        record, held = keys.idempotency("k"), keys.idempotency_index
        return await script(keys=[record, *metas, *streams, held], args=args)

    return drive


SWEPT = {"s": "pending", "p": "0.5", "m": "default"}
GOOD_IMPRESSION = {"s": "pending", "b": b"\0" * 12, "p": b"\0" * 8, "m": "default"}


def join(
    label: str = "1",
    impression: dict[str, Any] | None = None,
    window: Any = 1000,
    key_window: Any = "",
    string_stream: bool = False,
    most: Any = 1,
    index: str = "zset",
) -> Drive:
    """join.lua over two pending impressions, labelling the first '1' and the second
    ``label`` (``impression``, if given): the first would be appended before the second;
    the tag at its limit of ``most`` Idempotency-Key records (:func:`full_index`)."""

    async def drive(store: ModelStore) -> Any:
        keys = FeedbackKeys.of(store.spec.name, None)
        streams = [store.keys.stream]
        if string_stream:
            await store.redis.set(store.keys.stream + ":other", "not a stream")
            streams.append(store.keys.stream + ":other")
        await store.redis.zadd(keys.pending, {"i1": 2**50, "i2": 2**50})  # not due
        await store.redis.hset(keys.impression("i1"), mapping=GOOD_IMPRESSION)
        await store.redis.hset(keys.impression("i2"), mapping=impression or GOOD_IMPRESSION)
        await full_index(store, keys, index)
        script = register(store.redis, "join")
        record = keys.idempotency("k") if key_window != "" else keys.pending
        ids = [keys.impression("i1"), keys.impression("i2")]
        bound = [most, keys.idempotency("")]
        args = [len(streams), window, key_window, "digest", "3", *bound, "i1", "1", "i2", label]
        held = keys.idempotency_index
        return await script(keys=[keys.pending, record, *streams, *ids, held], args=args)

    return drive


def impressions_log(
    window: Any = 1000,
    sizes: tuple[Any, ...] = (2,),
    probability: bytes = b"\0" * 8,
    pending_string: bool = False,
    most: Any = 10,
    weight: bytes = b"",
) -> Drive:
    """impressions_log.lua logging two impressions, the second with ``probability`` and
    ``weight`` as a negative: the first would be written before the second."""

    async def drive(store: ModelStore) -> Any:
        keys = FeedbackKeys.of(store.spec.name, None)
        if pending_string:
            await store.redis.set(keys.pending, "not a zset")
        script = register(store.redis, "impressions_log")
        args = [window, "default", most, len(sizes), *sizes]
        args += ["i1", b"\0" * 12, b"\0" * 8, b"", "i2", b"\0" * 12, probability, weight]
        ids = [keys.impression("i1"), keys.impression("i2")]
        return await script(keys=[keys.pending, *ids], args=args)

    return drive


def registry(*args: Any, group: str | None = None, model: str | None = None) -> Drive:
    """registry.lua with ``args``, its groups holding 'g' as ``group`` (and the model 'm' as
    ``model``) and a model 'a' of group 'g' as the API would have recorded them."""

    async def drive(store: ModelStore) -> Any:
        keys = RegistryKeys()
        await store.redis.hset(keys.models, "a", '{"group": "g"}')
        if model is not None:
            await store.redis.hset(keys.models, "m", model)
        good = '{"models": ["a"], "serving": "a", "split": {}, "shared": "{}"}'
        await store.redis.hset(keys.groups, "g", good if group is None else group)
        script = register(store.redis, "registry")
        return await script(keys=[keys.models, keys.groups], args=list(args))

    return drive


def promotion(*args: Any, group: str | None = None, tallies: Any = None) -> Drive:
    """promotion.lua with ``args``, the group 'g' (models 'a' and 'b', 'a' serving) stored as
    ``group``, its promoter's state as 'S' (or ``tallies`` in its place)."""

    async def drive(store: ModelStore) -> Any:
        keys = RegistryKeys()
        good = '{"models": ["a", "b"], "serving": "a", "split": {}, "shared": "{}"}'
        await store.redis.hset(keys.groups, "g", good if group is None else group)
        if tallies is None:
            await store.redis.hset(keys.tallies, "g", "S")
        else:
            await store.redis.set(keys.tallies, tallies)
        script = register(store.redis, "promotion")
        return await script(keys=[keys.groups, keys.tallies, keys.promotions], args=list(args))

    return drive


POLICY = '{"margin": 0.001, "confidence": 0.95, "min_examples": 10, "planned_units": 100}'


def create(
    config: str = "{}", group: str = "g", most: Any = 10, shared: str = "{}"
) -> tuple[Any, ...]:
    return ("create", "b", config, group, most, 0, shared)


CASES: dict[str, tuple[Drive, str]] = {
    # finalize: the finding (a stored log-loss sum of NaN), each stored counter, each argument.
    "finalize meta logloss_sum nan": (finalize_case({"logloss_sum": "nan"}), "logloss_sum"),
    "finalize meta logloss_sum inf": (finalize_case({"logloss_sum": "inf"}), "logloss_sum"),
    "finalize sum overflows": (finalize_case({"logloss_sum": "1.7e308"}, loss="1.7e308"), "after"),
    "finalize meta seq": (finalize_case({"seq": "x"}), "seq"),
    "finalize meta nnz_stable": (finalize_case({"nnz_stable": "1.5"}), "nnz_stable"),
    "finalize meta tracked": (finalize_case({"tracked": ""}), "tracked"),
    "finalize meta trimmed": (finalize_case({"trimmed": "nan"}), "trimmed"),
    "finalize bad pin": (finalize_case({"pin": "x"}, through=5), "pin"),
    "finalize counter past the filter": (
        finalize_case(positions=struct.pack("<II", 1, 10), counts=b"\1\1", counters=10),
        "past the filter",
    ),
    "finalize counters not 4 bytes each": (
        finalize_case(positions=b"\0" * 5, counts=b"\1"),
        "4 bytes per value",
    ),
    "finalize counter count zero": (finalize_case(counters=0), "ARGV[18]"),
    "finalize whole filter short": (
        finalize_case(positions=b"", counts=b"\1" * 9, counters=10),
        "ARGV[17] whole filter is not ARGV[18] bytes long",
    ),
    "finalize whole filter long": (
        finalize_case(positions=b"", counts=b"\1" * 11, counters=10),
        "whole filter",
    ),
    "finalize loss nan": (finalize_case(loss="nan"), "ARGV[5]"),
    "finalize loss inf": (finalize_case(loss="-inf"), "ARGV[5]"),
    "finalize examples": (finalize_case(examples="1.5"), "ARGV[4]"),
    "finalize entry id": (finalize_case(ids="1-0 x"), "ARGV[6]"),
    "finalize leaving": (finalize_case(leaving=b"1234567"), "ARGV[7]"),
    "finalize steps": (finalize_case(entering=b"\0" * 8, steps=b"\0" * 4), "ARGV[9]"),
    "finalize step nan": (finalize_case(entering=b"\0" * 8, steps=b"\0" * 6 + b"\xf8\x7f"), "step"),
    "finalize stable": (finalize_case(stable="nan"), "ARGV[10]"),
    "finalize expired negative": (finalize_case(expired=-1), "ARGV[19]"),
    "finalize expired fraction": (finalize_case(expired="0.5"), "ARGV[19]"),
    "finalize meta expired": (finalize_case({"expired": "x"}), "expired"),
    # finalize: a feature budget's counts and marks (issue 34).
    "finalize budget slot past the counts": (
        finalize_case(slots=struct.pack("<I", 9), values=struct.pack("<q", 1), **BUDGET),
        "past the counts",
    ),
    "finalize budget count below zero": (
        finalize_case(slots=struct.pack("<I", 1), values=struct.pack("<q", -1), **BUDGET),
        "below 0",
    ),
    "finalize budget slots not 4 bytes each": (
        finalize_case(slots=b"\0" * 3, values=struct.pack("<q", 1), **BUDGET),
        "ARGV[20]",
    ),
    "finalize budget whole short": (
        finalize_case(values=struct.pack("<7q", *[0] * 7), **BUDGET),
        "8 bytes a slot",
    ),
    "finalize budget three marks": (finalize_case(**{**BUDGET, "marks": "0 0 0"}), "4 marks"),
    "finalize budget mark fraction": (finalize_case(**{**BUDGET, "marks": "0 0 1.5 0"}), "mark"),
    "finalize budget held negative": (finalize_case(**{**BUDGET, "marks": "0 -1 0 0"}), "mark"),
    "finalize budget cutoffs crossed": (
        finalize_case(**{**BUDGET, "marks": "0 0 0 1"}),
        "cutoff of all",
    ),
    "finalize budget cutoff back": (
        finalize_case({"cut_zero": "1"}, **BUDGET),
        "moves cut_zero back",
    ),
    "finalize budget cutoff past the end": (
        finalize_case(**{**BUDGET, "marks": "0 0 999 0"}),
        "past the commit",
    ),
    "finalize budget steps": (
        finalize_case(entering=b"\0" * 8, steps=struct.pack("<d", 9), **BUDGET),
        "ARGV[25]",
    ),
    "finalize budget step fraction": (
        finalize_case(
            entering=b"\0" * 8,
            steps=struct.pack("<d", 9),
            **{**BUDGET, "taus": struct.pack("<d", 1.5)},
        ),
        "last step",
    ),
    "finalize tally short": (finalize_case(tally="1 0 0"), "ARGV[26] has not 9 numbers"),
    "finalize tally long": (finalize_case(tally=" ".join(["0"] * 10)), "ARGV[26] has not 9"),
    "finalize tally fraction": (finalize_case(tally="1 0 0 0 0 0 0 0 0.5"), "ARGV[26]"),
    "finalize tally negative": (finalize_case(tally="-1 0 0 0 0 0 0 0 0"), "ARGV[26]"),
    "finalize tally past the filter": (
        finalize_case(tally="11 0 0 0 0 0 0 0 0", counters=10),
        "counters used past ARGV[18]",
    ),
    "finalize redo fields not pairs": (finalize_case(cut=1), "ARGV[29..] are not pairs"),
    # finalize: the base rate's counts and the calibration sums (issue 50).
    "finalize base one number": (finalize_case(base="1"), "ARGV[27] has not 2 numbers"),
    "finalize base nan": (finalize_case(base="nan 2"), "ARGV[27] base-rate clicks"),
    "finalize base inf": (finalize_case(base="1 inf"), "ARGV[27] base-rate examples"),
    "finalize base clicks past examples": (finalize_case(base="3 2"), "not within 0"),
    "finalize base clicks negative": (finalize_case(base="-1 2"), "not within 0"),
    "finalize sums one": (finalize_case(sums="0.5"), "ARGV[28] has not 4 sums"),
    "finalize sums two": (finalize_case(sums="0.5 1"), "ARGV[28] has not 4 sums"),
    "finalize recent sum negative": (finalize_case(sums="0.5 1 -1 1"), "below 0"),
    "finalize sums negative": (finalize_case(sums="-0.5 1 0 0"), "ARGV[28] weighted sum below 0"),
    "finalize sums nan": (finalize_case(sums="nan 1 0 0"), "ARGV[28]"),
    "finalize meta predicted_sum": (finalize_case({"predicted_sum": "x"}), "predicted_sum"),
    "finalize meta label_sum inf": (finalize_case({"label_sum": "inf"}), "label_sum"),
    "finalize no budget but marks": (finalize_case(marks="0 0 0 0"), "ARGV[20..25]"),
    "finalize no budget but evicted": (finalize_case(evicted=1), "ARGV[20..25]"),
    "finalize budget stored counts": (
        set_key_then("budget", b"x" * 7, finalize_case(**BUDGET)),
        "budget counts",
    ),
    "finalize meta evicted": (finalize_case({"evicted": "x"}), "evicted"),
    "finalize meta cut_all": (finalize_case({"cut_all": "-1"}, **BUDGET), "cut_all"),
    "apply seq": (apply({0: "1e3"}), "ARGV[1]"),
    "apply records": (apply({6: b"\0" * 5}), "records"),
    "apply arguments": (apply({4: 0}), "ARGV[5]"),
    # apply: a commit is its stamp, number and log generation (issue 37).
    "apply stamp generation": (apply({0: "99 x"}), "ARGV[1]"),
    "apply stamp three parts": (apply({0: "99 1 2"}), "ARGV[1]"),
    "apply stored stamp": (apply_on("5 x"), "applied"),
    "apply stored stamp sign": (apply_on("5 -1"), "applied"),
    "apply stored generation too large": (apply_on("5 1e3"), "applied"),
    # generation: the learner moves the log generation on after finding a rollback.
    "generation not above": (generation(gen=1, meta={"gen": "1"}), "ARGV[3]"),
    "generation zero": (generation(gen=0), "ARGV[3]"),
    "generation commit": (generation(seq="x"), "ARGV[2]"),
    "generation empty report": (generation(report=""), "ARGV[4]"),
    "generation stored gen": (generation(meta={"gen": "one"}), "meta field gen"),
    "generation stored fence": (generation(meta={"fence": "x"}), "fence"),
    "lease ttl": (lease("soon"), "TTL"),
    "lease ttl zero": (lease(0), "TTL"),
    "lease stored fence": (lease(100, meta={"fence": "x"}), "fence"),
    "trim through": (trim("nan"), "ARGV[1]"),
    "trim pin": (trim(5, pin="garbage"), "pin"),
    "finish logloss_sum nan": (finish("t", "5", "logloss_sum", "nan"), "logloss_sum"),
    "finish t": (finish("t", "5.5"), "meta field t"),
    "finish odd fields": (finish("t"), "pairs"),
    "finish counters used": (finish("counters_used", "-1"), "counters_used"),
    "finish base clicks nan": (finish("base_clicks", "nan"), "base_clicks"),
    "finish base clicks past examples": (
        finish("base_clicks", "3", "base_examples", "2"),
        "within 0 and base_examples",
    ),
    "finish predicted_sum": (finish("predicted_sum", "x"), "predicted_sum"),
    "finish admitted short": (finish("admitted_recent", "1 2 3"), "not 8 numbers"),
    "finish admitted not whole": (finish("admitted_recent", "0 0 0 0 0 0 0 x"), "admitted_recent"),
    "claim mode": (claim("sure"), "ARGV[2]"),
    "claim stored fence": (claim("replace", fence="x"), "fence"),
    "dead_letter id": (dead_letter("nope"), "ARGV[2]"),
    "expired step zero": (expired(step=0), "ARGV[3]"),
    "expired gone not whole": (expired(gone="1.5"), "ARGV[5]"),
    "expired value bytes short": (expired(value_bytes=4), "ARGV[6]"),
    "snapshot_pin what": (snapshot_pin("grab", 1000), "ARGV[1]"),
    "snapshot_pin ttl": (snapshot_pin("pin", "1s"), "TTL"),
    "snapshot_pin bad pin": (snapshot_pin("renew", 1000, pin="x y"), "pin"),
    "sweep impression without entry": (sweep({"s": "pending", "p": "0.5"}), "lacks"),
    "sweep policy": (sweep({"s": "pending"}, policy="keep"), "ARGV[3]"),
    "sweep count": (sweep({"s": "pending"}, count="all"), "ARGV[2]"),
    "sweep negative weight": (
        sweep({**SWEPT, "b": "e" * 12, "w": struct.pack("<d", -1.0)}),
        "weight as a negative",
    ),
    "sweep weight of a short entry": (
        sweep({**SWEPT, "b": "e", "w": struct.pack("<d", 2.0)}),
        "weight as a negative",
    ),
    # append: the XADDs came before the record's SET, each stream's before the next one's.
    "append window zero": (append(window=0), "ARGV[3]"),
    "append window not whole": (append(window="1.5"), "ARGV[3]"),
    "append second stream a string": (append(n=2, second="string"), "is a string"),
    "append keyed flag": (append(keyed="yes"), "ARGV[5]"),
    "append n beyond keys": (append(n=2), "keys"),
    "append an entry per stream, one too many": (append(extra=1), "n + 6 arguments"),
    # append and join: the oldest record was dropped before the new one was written.
    "append most zero": (append(most=0), "ARGV[6]"),
    "append most not whole": (append(most="lots"), "ARGV[6]"),
    "append index a string": (append(index="string"), "zset"),
    "append record under another prefix": (append(prefix="octr:{other}:idem:"), "ARGV[7]"),
    "join most zero": (join(key_window=60, most=0), "ARGV[6]"),
    "join index a string": (join(key_window=60, index="string"), "zset"),
    # join: the first id is appended, closed and unpended before the second is read.
    "join label": (join(label="yes"), "label of i2"),
    "join impression without entry": (join(impression={"s": "pending", "p": "x"}), "lacks"),
    "join short entry": (join(impression={**GOOD_IMPRESSION, "b": b"\0" * 4}), "lacks"),
    "join negative weight": (
        join(label="0", impression={**GOOD_IMPRESSION, "w": b"\0" * 7}),
        "weight as a negative",
    ),
    "join window": (join(window="soon"), "ARGV[2]"),
    "join idempotency window zero": (join(key_window=0), "ARGV[3]"),
    "join second stream a string": (join(string_stream=True), "is a string"),
    # impressions_log: every impression is written before the pending set's ZADD.
    "impressions_log window fraction": (impressions_log(window="0.3"), "ARGV[1]"),
    "impressions_log pending a string": (impressions_log(pending_string=True), "is a string"),
    "impressions_log counts": (impressions_log(sizes=(1,)), "examples counted"),
    "impressions_log count negative": (impressions_log(sizes=(3, -1)), "example count"),
    "impressions_log probability bytes": (impressions_log(probability=b"\0" * 4), "8 bytes"),
    "impressions_log probability nan": (
        impressions_log(probability=b"\0" * 6 + b"\xf8\x7f"),
        "[0, 1]",
    ),
    "impressions_log most zero": (impressions_log(most=0), "ARGV[3]"),
    "impressions_log weight bytes": (impressions_log(weight=b"\0" * 4), "weight as a negative"),
    "impressions_log weight nan": (
        impressions_log(weight=b"\0" * 6 + b"\xf8\x7f"),
        "weight as a negative",
    ),
    "impressions_log weight negative": (
        impressions_log(weight=struct.pack("<d", -2.0)),
        "weight as a negative",
    ),
    "impressions_log most not whole": (impressions_log(most="lots"), "ARGV[3]"),
    # registry: what it stores must decode (delete reads a model's group from its config).
    "registry create config not json": (registry(*create(config="{oops")), "ARGV[3]"),
    "registry create most": (registry(*create(most="lots")), "ARGV[5]"),
    "registry create stored group": (registry(*create(), group="{oops"), "group g"),
    "registry create group without models": (
        registry(*create(), group='{"serving": "a", "split": {}, "shared": "{}"}'),
        "lacks",
    ),
    "registry delete model record": (registry("delete", "m", model="[oops"), "model m"),
    "registry delete stored group": (registry("delete", "a", group='"g"'), "group g"),
    "registry serve split": (registry("serve", "g", "a", "{oops"), "ARGV[4]"),
    "registry serve weight": (registry("serve", "g", "a", '{"a": -1}'), "weight"),
    "registry operation": (registry("rename", "a"), "unknown"),
    # promotion: the policy's every field, the states and fields as JSON, the stored group.
    "promotion policy not json": (promotion("policy", "g", "{oops"), "ARGV[3]"),
    "promotion policy margin": (promotion("policy", "g", POLICY.replace("0.001", "1")), "margin"),
    "promotion policy confidence": (
        promotion("policy", "g", POLICY.replace("0.95", "0.2")),
        "confidence",
    ),
    "promotion policy min_examples": (
        promotion("policy", "g", POLICY.replace('"min_examples": 10', '"min_examples": "x"')),
        "min_examples",
    ),
    "promotion policy min_examples past 1e12": (
        promotion("policy", "g", POLICY.replace('"min_examples": 10', '"min_examples": 1e13')),
        "min_examples",
    ),
    "promotion policy planned_units not whole": (
        promotion("policy", "g", POLICY.replace('"planned_units": 100', '"planned_units": 1.5')),
        "planned_units",
    ),
    "promotion policy arguments": (promotion("policy", "g"), "2 arguments"),
    "promotion stored group": (promotion("policy", "g", POLICY, group="{oops"), "group g"),
    "promotion group lacks models": (
        promotion("policy", "g", "", group='{"serving": "a", "split": {}}'),
        "lacks",
    ),
    "promotion tallies not a hash": (promotion("tally", "g", "S", "{}", 10, tallies="x"), "hash"),
    "promotion tally state": (promotion("tally", "g", "S", "{oops", 10), "ARGV[4]"),
    "promotion tally most": (promotion("tally", "g", "S", "{}", "many"), "ARGV[5]"),
    "promotion promote fields": (
        promotion("promote", "g", "S", "a", "b", "{}", '{"x": [1]}', 10),
        "ARGV[7]",
    ),
    "promotion promote state": (
        promotion("promote", "g", "S", "a", "b", "[1", "{}", 10),
        "ARGV[6]",
    ),
    "promotion operation": (promotion("demote", "g"), "unknown"),
}


#: The writes a case makes to set up its keys; the keys are compared from after the last one.
SETUP = ("hset", "set", "zadd")


@pytest.mark.parametrize("case", CASES)
async def test_a_refused_script_call_changes_no_key(make_store: MakeStore, case: str) -> None:
    drive, named = CASES[case]
    store = await make_store()
    await with_history(store)
    # The bad stored value is set by the case itself, before it calls the script (SETUP): so
    # the keys are compared from the instant before the call, stored value included.
    before: dict[bytes, bytes] = {}
    originals = {name: getattr(store.redis, name) for name in SETUP}

    def then_dump(write: Any) -> Any:
        async def write_then_dump(*args: Any, **kwargs: Any) -> Any:
            done = await write(*args, **kwargs)
            before.clear()
            before.update(await dumps(store))
            return done

        return write_then_dump

    before.update(await dumps(store))
    for name, write in originals.items():
        setattr(store.redis, name, then_dump(write))
    try:
        reply = await drive(store)
    except ResponseError as error:
        reply = [b"error", str(error).encode()]
    finally:
        for name, write in originals.items():
            setattr(store.redis, name, write)
    status, why = reply[0], reply[1].decode()
    assert status in (b"error", b"refused", b"damaged"), reply
    assert named in why, why
    after = await dumps(store)
    assert after.keys() == before.keys()
    assert after == before


async def test_impressions_at_the_bound_write_nothing_beyond_it(make_store: MakeStore) -> None:
    # Not a refusal but a bound: the requests that do not fit are left out whole, decided
    # before the first write; a full pending set is left byte for byte as it was.
    store = await make_store()
    keys = FeedbackKeys.of(store.spec.name, None)
    await store.redis.zadd(keys.pending, {"old-1": 1e15, "old-2": 1e15})
    await store.redis.hset(keys.impression("old-1"), mapping=GOOD_IMPRESSION)
    before = await dumps(store)
    full = await impressions_log(most=2)(store)
    assert full == [[], [0]]
    assert await dumps(store) == before
    # Room for one: a request of two is left out, the single one after it is logged; a
    # request refused for a clash takes no room.
    script = register(store.redis, "impressions_log")
    entry, p = b"\0" * 12, b"\0" * 8
    ids = ["old-1", "a", "b", "c"]  # requests [old-1], [a, b], [c]
    args: list[Any] = ["1000", "default", 3, 3, 1, 2, 1]
    for prediction_id in ids:
        args += [prediction_id, entry, p, b""]
    keys_of = [keys.pending, *map(keys.impression, ids)]
    assert await script(keys=keys_of, args=args) == [[0], [1]]
    assert await store.redis.zcard(keys.pending) == 3
    assert await store.redis.exists(keys.impression("a"), keys.impression("b")) == 0
    assert await store.redis.hget(keys.impression("c"), "s") == b"pending"
