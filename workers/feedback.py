"""Taking feedback off a model's stream in order, and setting aside what cannot be learned.

Entries are learned strictly in stream order and deleted by the commit that learns them, so
the next group always starts at the head of the stream: no consumer group, no per-consumer
pending lists, nothing a dead worker leaves behind. Each time a group is read from the head,
the head entry's delivery count goes up; a group whose head keeps coming back (it crashed the
learner or kept failing) is then learned one entry at a time, and an entry delivered more than
``max_deliveries`` times goes to the dead-letter stream with the last failure reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import Batch
from online_ctr.store.codec import EntryError, decode_entries, header_examples
from online_ctr.store.feedback_reads import FeedbackReads
from online_ctr.store.state import ModelStore
from workers.units import entry_units

Message = tuple[bytes, dict[bytes, bytes]]

#: Most entries one XRANGE reads (each read entry travels once more, in the commit).
MAX_PAGE_ENTRIES = 16_384
#: Before any page is read, assume entries as big as a full ``/learn`` body by default.
FIRST_GUESS_EXAMPLES_PER_ENTRY = 1_000


@dataclass
class Group:
    """Consecutive stream entries learned and committed together, decoded as one batch."""

    entry_ids: list[str] = field(default_factory=list)
    batch: Batch | None = None
    undecodable: dict[str, str] = field(default_factory=dict)
    head_deliveries: int = 0
    #: The entry whose deliveries ``head_deliveries`` counts.
    head: str = ""
    #: Per example the probability this model served (joined impressions), else NaN.
    served: NDArray[np.float64] | None = None
    #: Per decoded entry its unit key and examples, if asked for (:mod:`workers.units`).
    units: tuple[NDArray[np.uint64], NDArray[np.int64]] | None = None

    @property
    def examples(self) -> int:
        return len(self.batch) if self.batch is not None else 0


class FeedbackStream:
    """The reading end of one model's feedback stream."""

    def __init__(self, store: ModelStore) -> None:
        self.store = store
        self.reads = FeedbackReads(store.redis, store.keys, store.scripts)
        self.last_seen = b"0-0"
        self.model = store.spec.name.encode()
        #: Examples per entry in the last page read: sizes the next page.
        self.examples_per_entry = float(FIRST_GUESS_EXAMPLES_PER_ENTRY)
        #: A head entry whose next reading is no delivery (see :meth:`uncount`).
        self._uncounted = b""
        #: Whether groups carry their units (the model's group has a promotion policy).
        self.units = False

    async def next_group(self, max_examples: int, single: bool = False) -> Group:
        """The entries at the head of the stream, up to ``max_examples`` examples (at least
        one entry), or one entry if ``single``; an empty group if the stream is empty."""
        if single:  # exactly one entry, even one that holds no decodable example
            messages = await self.reads.entries(count=1)
        else:
            messages = await self._head(max(1, max_examples))
        if not messages:
            return Group()
        messages = _within(messages, max_examples)
        self.last_seen = max(self.last_seen, messages[-1][0], key=_entry_order)
        deliveries = await self._deliver(messages[0][0])
        group = _decode(messages, self.model, self.units)
        group.head_deliveries = int(deliveries)
        group.head = messages[0][0].decode()
        return group

    async def _head(self, max_examples: int) -> list[Message]:
        """Entries from the head holding about ``max_examples`` examples (one page over at
        most), read in pages sized by the examples per entry seen so far: entries hold one
        example or a thousand, and reading a fixed count of them would copy a long stream of
        big entries in full to learn its first few (a cost of the stream, not the group)."""
        messages: list[Message] = []
        examples, start = 0, "-"
        while examples < max_examples:
            wanted = (max_examples - examples) / self.examples_per_entry
            count = max(1, min(MAX_PAGE_ENTRIES - len(messages), math.ceil(wanted)))
            page = await self.reads.entries(start, count)
            if not page:
                break
            in_page = sum(header_examples(fields.get(b"b", b"")) for _, fields in page)
            self.examples_per_entry = max(1.0, in_page / len(page))
            messages += page
            examples += in_page
            if len(page) < count or len(messages) == MAX_PAGE_ENTRIES:
                break
            start = "(" + page[-1][0].decode()
        return messages

    async def _deliver(self, head: bytes) -> int:
        """Count a delivery of the head entry (unless :meth:`uncount` said not to); how many
        it has had."""
        if head == self._uncounted:
            self._uncounted = b""
            return await self.reads.deliveries(head)
        self._uncounted = b""
        return await self.reads.count_delivery(head)

    def uncount(self, entry_id: str) -> None:
        """The group read from ``entry_id`` was not committed through no fault of its own (Redis
        refused it at its memory limit): reading it again is no delivery. Kept in this process
        (no write: Redis refuses writes then); a learner that dies meanwhile counts one."""
        self._uncounted = entry_id.encode()

    async def not_delivered(self, entry_id: str) -> None:
        """Take back the delivery ``next_group`` counted for a head entry that was not at fault
        (its commit was refused for the model's sake): it must not be dead-lettered for it."""
        await self.reads.count_delivery(entry_id, -1)

    async def wait(self, wait_ms: int) -> None:
        """Block up to ``wait_ms`` until an entry newer than any seen arrives."""
        await self.reads.wait(self.last_seen, wait_ms)

    async def length(self) -> int:
        """How many entries wait in the stream (learned ones leave it with their commit)."""
        return await self.reads.length()

    async def dead_letter(self, fence: str, entry_id: str, reason: str) -> bool:
        """Move an entry to the dead-letter stream (if still the learner); True if moved."""
        return await self.reads.dead_letter(fence, entry_id, reason)

    async def reason(self, entry_id: str) -> str | None:
        """The last recorded reason an entry failed, if any."""
        return await self.reads.reason(entry_id)

    async def record_failures(self, reasons: dict[str, str]) -> None:
        """Remember why entries failed, for when they are dead-lettered."""
        await self.reads.record_reasons(reasons)


def _entry_order(entry_id: bytes) -> tuple[int, int]:
    millis, sequence = entry_id.split(b"-")
    return int(millis), int(sequence)


def _within(messages: list[Message], max_examples: int) -> list[Message]:
    """The leading entries holding at most ``max_examples`` examples (at least one entry)."""
    total = 0
    for index, (_, fields) in enumerate(messages):
        total += header_examples(fields.get(b"b", b""))
        if total > max_examples and index > 0:
            return messages[:index]
    return messages


def _decode(messages: list[Message], model: bytes, units: bool = False) -> Group:
    """Decode the entries together (numpy once); if that fails, find the bad ones."""
    group = Group()
    ids = [raw_id.decode() for raw_id, _ in messages]
    blobs = [fields.get(b"b", b"") for _, fields in messages]
    try:
        group.batch = decode_entries(blobs)
        group.entry_ids = ids
        group.served = _served([fields for _, fields in messages], model)
        if units:
            group.units = entry_units([fields for _, fields in messages])
        return group
    except EntryError:
        pass
    good: list[bytes] = []
    kept: list[dict[bytes, bytes]] = []
    for entry_id, blob, (_, fields) in zip(ids, blobs, messages, strict=True):
        try:
            decode_entries([blob])
        except EntryError as error:
            group.undecodable[entry_id] = f"undecodable entry: {error}"
            continue
        group.entry_ids.append(entry_id)
        good.append(blob)
        kept.append(fields)
    if good:
        group.batch = decode_entries(good)
        group.served = _served(kept, model)
        if units:
            group.units = entry_units(kept)
    return group


def _served(entries: list[dict[bytes, bytes]], model: bytes) -> NDArray[np.float64] | None:
    """Per example the probability ``model`` served, from joined entries (fields ``p`` and
    ``m``, one example each); NaN for the others; None if no entry is a join of this model."""
    if not any(fields.get(b"m") == model for fields in entries):
        return None
    parts = []
    for fields in entries:
        served = fields.get(b"p") if fields.get(b"m") == model else None
        if served is not None and len(served) == 8:
            parts.append(np.frombuffer(served, "<f8"))
        else:
            parts.append(np.full(header_examples(fields.get(b"b", b"")), np.nan))
    return np.concatenate(parts).astype(np.float64)
