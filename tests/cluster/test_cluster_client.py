"""What redis-py's asyncio cluster client does on a real Redis Cluster with the store's
patterns: scripts, pipelines of EVALSHA over many slots, streams, hashes, INFO and TIME.

The findings are written up in docs/redis-cluster.md; these tests are their evidence.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    CrossSlotTransactionError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
)

from online_ctr.learning.rules import get_rule
from online_ctr.store.state import ModelStore, spec_from
from testkit.local_cluster import LocalCluster
from tests.cluster.conftest import INCR_META, TAGS, evalsha_all, owner

pytestmark = pytest.mark.anyio


def other_key(client: RedisCluster, key: str, same_node: bool) -> str:
    """A key in another slot than ``key``, on the same node or on another one."""
    port, slot = owner(client, key), client.keyslot(key)
    return next(
        name
        for name in (f"x{n}" for n in range(10_000))
        if client.keyslot(name) != slot and (owner(client, name) == port) == same_node
    )


async def test_script_runs_on_the_master_that_owns_its_hash_tag(
    cluster: RedisCluster, redis_cluster: LocalCluster
) -> None:
    script = cluster.register_script(INCR_META)
    masters = redis_cluster.master_ports()
    for key in TAGS[:8]:
        assert await script(keys=[key], args=[2]) == 2
        port = owner(cluster, key)
        assert port in masters
        with redis.Redis(port=port) as node:  # a plain client on the owner: no MOVED
            assert node.hget(key, "n") == b"2"


async def test_script_reloads_itself_after_the_script_cache_is_flushed(
    cluster: RedisCluster,
) -> None:
    script = cluster.register_script(INCR_META)
    assert await script(keys=[TAGS[0]], args=[1]) == 1
    assert await cluster.script_flush()  # on every master
    assert await cluster.script_exists(script.sha) == [False]
    # EVALSHA answers NOSCRIPT; the Script loads itself on every master and runs again.
    assert await script(keys=[TAGS[0]], args=[1]) == 2
    assert await cluster.script_exists(script.sha) == [True]


@pytest.mark.parametrize("shebang", ["", "#!lua\n"])
async def test_script_may_build_key_names_with_the_hash_tag_of_keys1(
    cluster: RedisCluster, shebang: str
) -> None:
    script = cluster.register_script(
        shebang
        + """
        local prefix = string.sub(KEYS[1], 1, -5)  -- 'octr:{m/3}:meta' -> 'octr:{m/3}:'
        for n = 1, tonumber(ARGV[1]) do redis.call('SET', prefix .. 's:' .. n, n) end
        return redis.call('GET', prefix .. 's:' .. ARGV[1])
        """
    )
    assert await script(keys=["octr:{m/3}:meta"], args=[4]) == b"4"
    assert await cluster.mget([f"octr:{{m/3}}:s:{n}" for n in range(1, 5)]) == [
        b"1",
        b"2",
        b"3",
        b"4",
    ]


@pytest.mark.parametrize("shebang", ["", "#!lua\n"])
async def test_script_may_not_touch_a_key_on_another_node(
    cluster: RedisCluster, shebang: str
) -> None:
    script = cluster.register_script(shebang + "return redis.call('SET', ARGV[1], 1)")
    far = other_key(cluster, TAGS[3], same_node=False)
    with pytest.raises(ResponseError, match="non local key in a cluster node"):
        await script(keys=[TAGS[3]], args=[far])


async def test_only_a_shebang_script_is_held_to_the_slot_of_its_keys(
    cluster: RedisCluster,
) -> None:
    near = other_key(cluster, TAGS[3], same_node=True)
    plain = cluster.register_script("return redis.call('SET', ARGV[1], 1)")
    flagged = cluster.register_script("#!lua\nreturn redis.call('SET', ARGV[1], 1)")
    # Without a shebang, another slot on the same node is allowed: it works by chance, and
    # stops working the day that slot moves to another node.
    assert await plain(keys=[TAGS[3]], args=[near]) == b"OK"
    with pytest.raises(ResponseError, match="do not hash to the same slot"):
        await flagged(keys=[TAGS[3]], args=[near])


@contextmanager
def reads_per_master(cluster: LocalCluster) -> Iterator[dict[int, int]]:
    """Socket reads each master did for its clients during the block (``total_reads_processed``
    less the probe's own INFO), filled in on exit."""
    probes = {port: redis.Redis(port=port) for port in cluster.master_ports()}
    try:
        before = {
            port: probe.info("stats")["total_reads_processed"] for port, probe in probes.items()
        }
        delta: dict[int, int] = {}
        yield delta
        for port, probe in probes.items():
            delta[port] = probe.info("stats")["total_reads_processed"] - before[port] - 1
    finally:
        for probe in probes.values():
            probe.close()


async def test_pipeline_of_evalsha_over_64_slots_reads_once_per_master(
    cluster: RedisCluster, redis_cluster: LocalCluster
) -> None:
    sha = await cluster.script_load(INCR_META)  # on every master
    assert await evalsha_all(cluster, sha) == [1] * 64  # also opens the connections
    assert {owner(cluster, key) for key in TAGS} == set(redis_cluster.master_ports())
    with reads_per_master(redis_cluster) as piped:
        assert await evalsha_all(cluster, sha) == [2] * 64
    with reads_per_master(redis_cluster) as one_by_one:
        for key in TAGS:
            await cluster.evalsha(sha, 1, key, 1)
    # Each master got its share in one write (all three at once, in parallel); a replica's
    # once-a-second REPLCONF ACK may add a read.
    assert all(reads in (1, 2) for reads in piped.values()), piped
    assert sum(one_by_one.values()) >= 64, one_by_one


async def test_cluster_pipeline_takes_evalsha_only_as_a_raw_command(
    cluster: RedisCluster,
) -> None:
    script = cluster.register_script(INCR_META)
    pipe = cluster.pipeline(transaction=False)
    with pytest.raises(RedisClusterException, match="evalsha is blocked"):
        pipe.evalsha(script.sha, 1, TAGS[0], 1)
    with pytest.raises(RedisClusterException, match="evalsha is blocked"):
        await script(keys=[TAGS[0]], args=[1], client=pipe)  # type: ignore[arg-type]


async def test_pipeline_does_not_reload_a_flushed_script(cluster: RedisCluster) -> None:
    sha = await cluster.script_load(INCR_META)
    assert await cluster.script_flush()
    results = await evalsha_all(cluster, sha, raise_on_error=False)
    assert all(isinstance(result, NoScriptError) for result in results)
    with pytest.raises(NoScriptError, match=r"Command # 1 \(EVALSHA .*octr:\{m/0\}:meta"):
        await evalsha_all(cluster, sha)
    assert await cluster.script_load(INCR_META) == sha
    assert await evalsha_all(cluster, sha) == [1] * 64


async def test_streams_and_hashes_go_to_the_owner_of_their_key(cluster: RedisCluster) -> None:
    stream = "octr:{m/5}:stream"
    first = await cluster.xadd(stream, {"e": "1"})
    second = await cluster.xadd(stream, {"e": "2"})
    assert await cluster.xrange(stream) == [(first, {b"e": b"1"}), (second, {b"e": b"2"})]
    assert await cluster.xdel(stream, first) == 1
    assert await cluster.xrange(stream) == [(second, {b"e": b"2"})]
    assert await cluster.hset("octr:{m/5}:h", mapping={"a": 1, "b": 2}) == 2
    assert await cluster.hmget("octr:{m/5}:h", ["a", "c", "b"]) == [b"1", None, b"2"]


async def test_time_and_info_answer_from_one_master_unless_told(
    cluster: RedisCluster, redis_cluster: LocalCluster
) -> None:
    seconds, microseconds = await cluster.time()
    assert abs(seconds + microseconds / 1e6 - time.time()) < 5
    one = await cluster.info("memory")  # the default node's alone
    assert isinstance(one["used_memory"], int)
    # PRIMARIES answers {"host:port": info} (but a bare info when only one node answers);
    # one call per master always answers a bare info.
    per_master = await cluster.info("memory", target_nodes=RedisCluster.PRIMARIES)
    assert set(per_master) == {f"127.0.0.1:{port}" for port in redis_cluster.master_ports()}
    each = [await cluster.info("memory", target_nodes=node) for node in cluster.get_primaries()]
    assert len(each) == 3
    used_memory = sum(info["used_memory"] for info in each)
    assert used_memory > 2 * one["used_memory"]


async def test_transaction_needs_its_keys_in_one_slot(cluster: RedisCluster) -> None:
    async with cluster.pipeline(transaction=True) as pipe:
        pipe.hset("octr:{m/7}:meta", "n", 1).incr("octr:{m/7}:s:1")
        assert await pipe.execute() == [1, 1]
    async with cluster.pipeline(transaction=True) as pipe:
        pipe.incr("octr:{m/7}:s:1").incr("octr:{m/8}:s:1")
        with pytest.raises(CrossSlotTransactionError):
            await pipe.execute()
    script = cluster.register_script(INCR_META)
    with pytest.raises(RedisClusterException, match="all keys must map to the same key slot"):
        await script(keys=["octr:{m/7}:meta", "octr:{m/8}:meta"], args=[1])


async def test_state_reads_one_call_per_shard_and_answer_in_the_order_asked(
    cluster: RedisCluster,
) -> None:
    """The store's own reads and applies on the cluster: per shard, each on its master,
    the state read back in the order of the ids asked for, unknown ids as zeros."""
    store = ModelStore(cluster, spec_from("c", "ftrl", get_rule("ftrl").params(), None, 256, 64))
    await store.ensure()
    rng = np.random.default_rng(11)
    ids = np.unique(rng.integers(0, 2**64 - 1, size=3_000, dtype=np.uint64, endpoint=True))
    state = rng.normal(size=(len(ids), store.spec.width))
    await store.shards.apply(1, store.spec.layout.records(ids, state))
    unknown = rng.integers(0, 2**64 - 1, size=200, dtype=np.uint64, endpoint=True)
    asked = np.concatenate([ids, unknown])
    rng.shuffle(asked)
    called, order = store.shards._read_calls(asked)
    assert len(called) == 64 and order is not None
    read = await store.shards.read(asked)
    known = {int(i): row for i, row in zip(ids, state, strict=True)}
    expected = np.array([known.get(int(i), np.zeros(store.spec.width)) for i in asked])
    np.testing.assert_array_equal(read.state, expected)
    np.testing.assert_array_equal(read.stored, [int(i) in known for i in asked])
