"""A group is read from the head of the stream in pages sized by the entries' examples: what
Redis sends is about the group, never the whole stream behind it."""

from __future__ import annotations

import itertools

import pytest

from online_ctr.learning.readers import read_examples
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, send
from workers.feedback import MAX_PAGE_ENTRIES, FeedbackStream

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))


async def sent_bytes(stream: FeedbackStream) -> int:
    info = await stream.store.redis.info("stats")
    return int(info["total_net_output_bytes"])


async def group_and_bytes(stream: FeedbackStream, max_examples: int) -> tuple[int, int, int]:
    """Examples and entries of the next group, and the bytes Redis sent meanwhile."""
    before = await sent_bytes(stream)
    group = await stream.next_group(max_examples)
    # The INFO reply itself is counted too: measure one and take it off.
    after = await sent_bytes(stream)
    info_reply = await sent_bytes(stream) - after
    return group.examples, len(group.entry_ids), after - before - info_reply


@pytest.mark.parametrize("per_entry", [1, 100])
async def test_a_group_reads_about_its_own_entries_whatever_their_size(
    make_store: MakeStore, per_entry: int
) -> None:
    store = await make_store()
    await send(store, ROWS, per_entry)
    total = await store.redis.memory_usage(store.keys.stream)
    stream = FeedbackStream(store)
    examples, entries, read = await group_and_bytes(stream, 300)
    assert examples == 300 and entries == 300 // per_entry
    # 300 of 2,000 examples: the group's share of the stream, with one page over at most.
    assert read < total * 0.3


async def test_entry_sizes_that_change_are_followed(make_store: MakeStore) -> None:
    store = await make_store()
    await send(store, ROWS[:1000], per_entry=100)
    await send(store, ROWS[1000:1500], per_entry=1)
    await send(store, ROWS[1500:], per_entry=250)
    stream = FeedbackStream(store)
    sizes = []
    while (group := await stream.next_group(1_100)).entry_ids:
        sizes.append((group.examples, len(group.entry_ids)))
        await store.redis.xdel(store.keys.stream, *group.entry_ids)
    # 10 entries of 100 and 100 singles; the other 400 singles and both entries of 250.
    assert sizes == [(1_100, 110), (900, 402)]


async def test_one_group_reads_at_most_a_page_of_entries(make_store: MakeStore) -> None:
    store = await make_store()
    await send(store, ROWS[:10] * 2_000, per_entry=1)
    stream = FeedbackStream(store)
    group = await stream.next_group(1_000_000)
    assert len(group.entry_ids) == MAX_PAGE_ENTRIES


async def test_one_entry_at_a_time_is_one_entry_even_when_it_holds_nothing(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    await store.redis.xadd(store.keys.stream, {"b": b"not an entry"})
    await send(store, ROWS[:3], per_entry=1)
    group = await FeedbackStream(store).next_group(1_000, single=True)
    assert (len(group.undecodable), group.entry_ids, group.examples) == (1, [], 0)
