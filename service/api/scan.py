"""The common ``/learn`` and ``/predict`` bodies read in one compiled pass: no Python object
per feature.

A 1,000-example ``/learn`` spent most of its CPU on objects made and dropped per feature
(py-spy), and so did a batch ``/predict``: orjson's strings and dicts, pydantic's validation
of each, and the tuple and dict look-up that finds each name's id. Most bodies have one of
two plain shapes, a batch of examples or one example, whose feature values are strings of
printable ASCII without escapes::

    {"examples": [{"features": {"site": "news", "os": "ios"}, "label": 1}, ...]}
    {"features": {"site": "news", "os": "ios"}, "label": 1}

(``/predict``'s without labels). :func:`scan` reads exactly those shapes from the body's bytes
(any JSON whitespace, the two keys of an example in either order) and says where each field
and value are; anything else (a number or list value, an escape, a byte outside printable
ASCII, another key, a duplicate field, an empty object, a label that is not the integer 0 or
1, JSON that does not parse) is left to the general path, which parses and validates with
orjson and pydantic and gives the errors their messages. What this accepts, the general path
accepts too, and makes the same batch of: a test holds the two equal, on real rows and on
bodies mutated at random.

:class:`NameIds` then finds each ``field=value`` name's id in a compiled hash table keyed by the
name's bytes (compared in full, so exact; its slots and probe are those of the project's table,
:mod:`online_ctr.learning.hashing`, by the name's hash); only names it has not seen are hashed
(BLAKE2b, as :mod:`online_ctr.learning.features` defines ids), all at once.

>>> body = b'{"examples": [{"label": 1, "features": {"site": "news", "os": "ios"}}]}'
>>> scanned = scan(body, want_label=True)
>>> scanned.indptr.tolist(), scanned.labels.tolist(), scanned.names(body, np.array([1]))
([0, 2], [1.0], [b'os=ios'])
>>> scan(b'{"examples": [{"features": {"hour": 14}, "label": 0}]}', want_label=True) is None
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from fastapi import Request
from numpy.typing import NDArray

from online_ctr.learning.budget import Budget
from online_ctr.learning.features import Batch, FeatureHasher, merge_repeats
from online_ctr.learning.hashing import hash_slot, next_slot, slot_count
from online_ctr.learning.jit import compiled, helper, inlined
from service.api.example_schemas import MAX_NAME_CHARS, MAX_VALUE_CHARS
from service.api.limits import Limits

U8 = NDArray[np.uint8]
#: The names table's hash: 8 bytes at a time, a multiply and a shift each, then splitmix64's
#: finalizer. It only places names in the table (a hit compares the bytes), so any well-mixed
#: hash is exact; FNV-1a, a multiply per byte, took 5x as long (1.26 ms against 0.25 for the
#: 33,401 names of a 1,000-row Criteo body).
_MIX, _MIX2, _MIX3 = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
)
_S27, _S30, _S31, _S32, _S56 = (np.uint64(s) for s in (27, 30, 31, 32, 56))
_QUOTE, _BACKSLASH, _EQUALS = 34, 92, 61
#: JSON tokens, as byte arrays the compiled code compares against.
_EXAMPLES = np.frombuffer(b'"examples"', np.uint8)
_FEATURES = np.frombuffer(b'"features"', np.uint8)
_LABEL = np.frombuffer(b'"label"', np.uint8)
#: A slot of the names table: where the name's bytes are in the arena (start << 16 | length;
#: 0: empty), its id, and its first 16 bytes as two words (zero-padded). A probe reads one
#: slot's 32 bytes (half a cache line), and a name of at most 16 bytes (all of Criteo's) is
#: compared there; only a longer one reads its remaining bytes in the arena. Comparing in
#: the arena was a second dependent cache miss per name: 60% of the look-up.
_NAME, _ID, _HEAD, _TAIL = range(4)
_INLINE = 16
_LENGTH_BITS = 16  # a name is at most 256 + 1 + 1024 bytes
Keys = tuple[U8, U8, int, int]
#: What an example may hold: its two keys, and the longest field name and value.
_KEYS: Keys = (_FEATURES, _LABEL, MAX_NAME_CHARS, MAX_VALUE_CHARS)


@dataclass(frozen=True)
class Scanned:
    """Where a body's features are: feature ``k`` has its field at ``spans[k, 0:2]`` and its
    value at ``spans[k, 2:4]`` (byte offsets, end exclusive) of the body; example ``j`` has
    features ``indptr[j]:indptr[j + 1]``, in the body's order, and ``labels[j]``."""

    indptr: NDArray[np.int64]
    spans: NDArray[np.int64]
    labels: NDArray[np.float64]
    #: The most features of one example.
    widest: int = 0
    #: Whether the body was one example (``{"features": ...}``) rather than a batch.
    single: bool = False

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def within(self, limits: Limits) -> bool:
        """Whether the examples are within a model's per-request limits."""
        return limits.within(len(self), self.widest)

    def names(self, body: bytes, features: NDArray[np.intp]) -> list[bytes]:
        """The names of ``features``, ``field=value`` each (the offsets as Python ints in one
        call: indexing ``spans`` a feature at a time was most of hashing a new body's names)."""
        spans = self.spans[features].tolist()
        return [body[start:end] + b"=" + body[value:stop] for start, end, value, stop in spans]


#: The content types the scanned path takes; any other goes through validation, which
#: answers as FastAPI does (a 415 for a body that is not JSON, say).
JSON_TYPE = re.compile(r"application/json(;\s*charset=utf-8)?", re.IGNORECASE)


def scanned_body(request: Request, body: bytes, want_label: bool) -> Scanned | None:
    """What :func:`scan` reads of ``body``, the request's, if it was sent as JSON; else None.
    (A plain function on a body read already: an await per request costs on ``/predict``.)"""
    for name, value in request.scope["headers"]:
        if name == b"content-type":
            # The usual value compared first: the pattern's match costs a decode and a call.
            if value != b"application/json" and not JSON_TYPE.fullmatch(value.decode("latin-1")):
                return None
            return scan(body, want_label)
    return None


def scan(body: bytes, want_label: bool) -> Scanned | None:
    """The body's features and labels if it has a plain shape, else None."""
    data = np.frombuffer(body, np.uint8)
    ok, examples, features, widest, one, indptr, spans, labels = _scan(
        data, want_label, _EXAMPLES, _KEYS
    )
    if not ok:
        return None
    labels = labels[:examples] if want_label else labels[:0]
    return Scanned(indptr[: examples + 1], spans[:features], labels, widest, one)


def warm_up() -> None:
    """Load the compiled scanner and table (numba's cache) or compile them, on a tiny body;
    and the crossing (:func:`_cross_names`), so a model with crosses waits for no compile."""
    body = b'{"examples": [{"features": {"a": "b", "c": "d"}, "label": 0}]}'
    scanned = scan(body, want_label=True)
    if scanned is not None:
        NameIds(FeatureHasher(crosses=(("a", "c"),))).batch(body, scanned)


class NameIds:
    """Feature ids by the bytes of their names, for one hasher: the ids it gives, remembered
    in an open-addressing table that compiled code probes, whose arrays grow by doubling (a
    name takes the same probes whatever the table holds), up to a bound, as the hasher's own
    cache. With a ``budget`` (:mod:`online_ctr.learning.budget`) its bytes count against it:
    the largest tables start again empty when all of them together hold too much."""

    #: Names held at most; past it the table starts again, empty. 2^18 names is a table of
    #: 2^19 slots (16 MiB), the size a model of 100,000 features fills: after the scale
    #: benchmark's fill of 10 million distinct names, 2^20 left a 64 MiB table, whose cache
    #: misses cost `/learn` ~1 ms more per 1,000-row body than at 100,000 (the API's CPU for 50
    #: such bodies: 0.23-0.26 s against 0.18-0.21 s; 2^18: 0.16-0.21 s at both sizes).
    LIMIT = 1 << 18

    def __init__(self, hasher: FeatureHasher, budget: Budget | None = None) -> None:
        self.hasher = hasher
        self.budget = budget
        self._crossed = _CrossedFields.of(hasher)
        self._reset()
        if budget is not None:
            budget.track(self)

    def held(self) -> int:
        """Bytes of the table's arrays."""
        # Written out: with a generator over the five, a budget's fit of two such tables took
        # 3.1 us against 1.3 (a /predict that reads new names makes two fits).
        return (
            self.slots.nbytes
            + self.hashes.nbytes
            + self.ids.nbytes
            + self.starts.nbytes
            + self.arena.nbytes
        )

    def forget(self) -> None:
        """Start again, empty (names are hashed again as they come)."""
        self._reset()

    def _reset(self) -> None:
        # Small to start with, grown by doubling: an empty table costs ~1 KB, so the tables of
        # many models that see few names hold little of the budget they share.
        self.count = 0
        self.slots = np.zeros((1 << 4, 4), np.int64)  # at most half full; see _NAME
        self.hashes = np.empty(1 << 3, np.uint64)
        self.ids = np.empty(1 << 3, np.int64)
        self.starts = np.zeros((1 << 3) + 1, np.int64)  # name i: arena[starts[i]:starts[i + 1]]
        self.arena = np.empty(1 << 8, np.uint8)

    def batch(self, body: bytes, scanned: Scanned) -> Batch:
        """The scanned examples as the hasher's :meth:`~FeatureHasher.batch` makes them: the
        bias first in each example, then its features in order."""
        data = np.frombuffer(body, np.uint8)
        ids = self._ids(body, data, scanned)
        # One compiled pass, not numpy's insert, diff and cumsum: for the one example of a
        # single /predict those calls' fixed costs were most of the look-up.
        indptr, with_bias, values = _with_bias(ids, scanned.indptr, self.hasher.bias_id)
        batch = Batch(indptr, with_bias.view(np.uint64), values, scanned.labels)
        if self._crossed is not None:
            batch = self._with_crosses(data, scanned, batch, self._crossed)
        return merge_repeats(batch) if self.hasher.hash_bits is not None else batch

    def _ids(self, body: bytes, data: U8, scanned: Scanned) -> NDArray[np.int64]:
        """The ids of the scanned names, hashing (and adding) those the table lacks."""
        ids, missing, hashes = _look_up(data, scanned.spans, self.slots, self.arena)
        if len(missing):
            self._learn(body, scanned, missing, hashes, ids)
        return ids

    def _with_crosses(
        self, data: U8, scanned: Scanned, batch: Batch, crossed: _CrossedFields
    ) -> Batch:
        """``batch`` with each example's cross features after its own, as the hasher adds
        them. A cross ``a=va&b=vb`` is written out as a name ``a=va&b`` = ``vb``, so that
        the table looks it up, hashes and records it as any scanned name."""
        rows, names, spans = _cross_names(
            data, scanned.spans, scanned.indptr, crossed.fields, crossed.starts, crossed.pairs
        )
        if not len(rows):
            return batch
        named = Scanned(np.array([0, len(rows)], np.int64), spans, scanned.labels[:0])
        ids = self._ids(names.tobytes(), names, named)
        return batch.appended(rows, ids, np.ones(len(rows)))

    def _learn(
        self,
        body: bytes,
        scanned: Scanned,
        missing: NDArray[np.intp],
        hashes: NDArray[np.uint64],
        ids: NDArray[np.int64],
    ) -> None:
        """Hash the names not in the table, each once, and add them: a body the table has
        not seen repeats its names (1,000 Criteo rows: 33,318 names, 8,131 distinct)."""
        names = scanned.names(body, missing)
        distinct = list(dict.fromkeys(names))
        if len(distinct) == len(names):  # one example's names: no repeats to map
            distinct_ids = self.hasher.ids_of_bytes(distinct)
            ids[missing] = distinct_ids
            distinct_hashes = hashes
        else:
            index = {name: k for k, name in enumerate(distinct)}
            which = np.fromiter(map(index.__getitem__, names), np.intp, len(names))
            distinct_ids = self.hasher.ids_of_bytes(distinct)
            ids[missing] = distinct_ids[which]
            distinct_hashes = np.empty(len(distinct), np.uint64)
            distinct_hashes[which] = hashes  # the same at each occurrence of a name
        if self.hasher.new_names is not None:  # first hashed here: to be recorded
            self.hasher.new_names.extend(distinct_ids.tolist(), distinct)
        if self.count + len(distinct) > self.LIMIT:
            self._reset()
        # The budget is fitted after the arrays grew: held() changes only then.
        if self._add(distinct, distinct_hashes, distinct_ids) and self.budget is not None:
            self.budget.fit()

    def _add(self, names: list[bytes], hashes: NDArray[np.uint64], ids: NDArray[np.int64]) -> bool:
        """Add the names, absent and distinct; whether the table's arrays grew."""
        first, count = self.count, self.count + len(names)
        joined = b"".join(names)
        grew = self._make_room(count, int(self.starts[first]) + len(joined))
        placed = first
        if 2 * count > len(self.slots):
            self.slots = np.zeros((slot_count(count), 4), np.int64)
            placed, grew = 0, True  # every name placed again
        lengths = np.fromiter(map(len, names), np.int64, len(names))
        data = np.frombuffer(joined, np.uint8)
        table = (self.slots, self.hashes, self.ids, self.starts, self.arena)
        _append(table, first, placed, hashes, ids, lengths, data)
        self.count = count
        return grew

    def _make_room(self, count: int, arena_bytes: int) -> bool:
        """Room for ``count`` names of ``arena_bytes`` bytes in all; whether an array grew."""
        grew = False
        if count > len(self.ids):
            size = _doubled(len(self.ids), count)
            self.hashes, self.ids = _grown(self.hashes, size), _grown(self.ids, size)
            self.starts = _grown(self.starts, size + 1)
            grew = True
        if arena_bytes > len(self.arena):
            self.arena = _grown(self.arena, _doubled(len(self.arena), arena_bytes))
            grew = True
        return grew


@dataclass(frozen=True)
class _CrossedFields:
    """A hasher's crosses as compiled code compares them: the distinct fields' bytes
    (field ``f`` is ``fields[starts[f]:starts[f + 1]]``) and each pair's two fields."""

    fields: U8
    starts: NDArray[np.int64]
    pairs: NDArray[np.int64]

    @classmethod
    def of(cls, hasher: FeatureHasher) -> _CrossedFields | None:
        if not hasher.crosses:
            return None
        distinct = list(dict.fromkeys(field for pair in hasher.crosses for field in pair))
        encoded = [field.encode() for field in distinct]
        starts = np.concatenate(([0], np.cumsum([len(field) for field in encoded])))
        pairs = [[distinct.index(a), distinct.index(b)] for a, b in hasher.crosses]
        return cls(
            np.frombuffer(b"".join(encoded), np.uint8),
            starts.astype(np.int64),
            np.array(pairs, np.int64),
        )


def _doubled(size: int, least: int) -> int:
    while size < least:
        size *= 2
    return size


Grown = TypeVar("Grown", bound=np.generic)


def _grown(array: NDArray[Grown], size: int) -> NDArray[Grown]:
    """``array`` in a larger one (its tail uninitialised)."""
    grown = np.empty(size, array.dtype)
    grown[: len(array)] = array
    return grown


@inlined
def _at(data: U8, i: int) -> Any:
    """``data[i]`` for an ``i`` known to be in range: an unsigned index spares numba's
    negative-index wrap-around (measured: scanning a body of 1,000 Criteo rows ~12% faster
    with it in the string loops; ``_space`` was slower with it)."""
    return data[np.uint64(i)]


@helper
def _space(data: U8, i: int) -> int:
    """The first position at or after ``i`` that is not JSON whitespace."""
    n = len(data)
    while i < n and (data[i] == 32 or data[i] == 10 or data[i] == 13 or data[i] == 9):
        i += 1
    return i


@helper
def _string_end(data: U8, i: int) -> int:
    """For a string opening at ``i``: the position of its closing quote, or -1 if it is not
    a plain one (a byte outside printable ASCII, an escape, no end)."""
    n = len(data)
    if i >= n or data[i] != _QUOTE:
        return -1
    j = i + 1
    while j < n:
        c = _at(data, j)
        if c == _QUOTE:
            return j
        if c < 32 or c > 126 or c == _BACKSLASH:
            return -1
        j += 1
    return -1


@inlined
def _word(data: U8, i: int, n: int) -> np.uint64:
    """The ``n`` (at most 8) bytes at ``i`` as one little-endian integer."""
    w = np.uint64(0)
    start = np.uint64(i)  # unsigned, as in _at: the name look-up ran ~30% faster
    for j in range(n):
        w |= np.uint64(data[start + np.uint64(j)]) << np.uint64(8 * j)
    return w


@inlined
def _equal(a: U8, i: int, b: U8, j: int, length: int) -> bool:
    """Whether ``a[i:i + length]`` and ``b[j:j + length]`` hold the same bytes."""
    a_i, b_j = np.uint64(i), np.uint64(j)  # unsigned, as in _at
    for k in range(length):  # noqa: SIM110 - numba compiles no generator expression
        if a[a_i + np.uint64(k)] != b[b_j + np.uint64(k)]:
            return False
    return True


@helper
def _is(data: U8, i: int, token: U8) -> bool:
    """Whether ``token`` is at ``i``."""
    return i + len(token) <= len(data) and _equal(data, i, token, 0, len(token))


@helper
def _after(data: U8, i: int, byte: int) -> int:
    """Past ``byte`` at ``i`` and the whitespace after it; -1 if ``byte`` is not there."""
    if i < 0 or i >= len(data) or data[i] != byte:
        return -1
    return _space(data, i + 1)


@inlined
def _mix(data: U8, start: int, end: int, h: np.uint64) -> np.uint64:
    """``h`` with bytes ``start:end`` mixed in, 8 at a time, then the rest and its length."""
    k = start
    while k + 8 <= end:
        h = (h ^ _word(data, k, 8)) * _MIX
        h ^= h >> _S32
        k += 8
    h = (h ^ _word(data, k, end - k) ^ (np.uint64(end - k) << _S56)) * _MIX
    return h ^ (h >> _S32)


@inlined
def _name_hash(data: U8, field: int, field_end: int, value: int, value_end: int) -> np.uint64:
    """The hash of ``field=value`` (never 0)."""
    h = _mix(data, value, value_end, _mix(data, field, field_end, _MIX2))
    h = (h ^ (h >> _S30)) * _MIX2
    h = (h ^ (h >> _S27)) * _MIX3
    h ^= h >> _S31
    return h if h != 0 else np.uint64(1)


@helper
def _repeats_a_field(
    data: U8, spans: NDArray[np.int64], first: int, last: int, seen: NDArray[np.int64]
) -> bool:
    """Whether an example's features ``first:last`` name a field twice (JSON keeps the last
    value; the general path answers that).

    ``seen`` is an open-addressing table kept from example to example of one body: a slot is
    taken only if it holds this example's ``first``, so it is never cleared. (This check is
    about a third of a 1,000-row Criteo body's scan; a new table for each example made the
    scan ~10% slower than this one.)
    """
    size = len(seen)
    if size < 2 * (last - first):  # an example wider than the table: one of its own
        while size < 2 * (last - first):
            size *= 2
        seen = np.full((size, 2), -1, np.int64)
    mask = np.uint64(size - 1)
    for k in range(first, last):
        slot = hash_slot(_mix(data, spans[k, 0], spans[k, 1], _MIX2), mask)
        while seen[slot, 0] == first:
            other = seen[slot, 1]
            length = spans[k, 1] - spans[k, 0]
            if spans[other, 1] - spans[other, 0] == length and _equal(
                data, spans[k, 0], data, spans[other, 0], length
            ):
                return True
            slot = next_slot(slot, mask)
        seen[slot, 0], seen[slot, 1] = first, k
    return False


@helper
def _seen_slots(features: int) -> int:
    """The slots of a body's repeated-field table: twice its most features, at most 1,024."""
    size = 16
    while size < 2 * features and size < 1024:
        size *= 2
    return size


@helper
def _text(data: U8, i: int, shortest: int, longest: int) -> int:
    """The end quote of a plain string at ``i`` of ``shortest`` to ``longest`` bytes, else -1."""
    end = _string_end(data, i)
    return end if end >= 0 and shortest <= end - i - 1 <= longest else -1


@helper
def _features(
    data: U8,
    i: int,
    spans: NDArray[np.int64],
    k: int,
    max_name: int,
    max_value: int,
    seen: NDArray[np.int64],
) -> tuple[int, int]:
    """The object of ``field: "value"`` pairs at ``i`` into ``spans[k:]``: the position after
    it and the next free ``k``; -1 first if it is not a plain non-empty one."""
    first = k
    i = _after(data, i, 123)  # {
    while i >= 0:
        end = _text(data, i, 1, max_name)
        if end < 0:
            return -1, k
        for c in range(i + 1, end):
            if _at(data, c) == _EQUALS:
                return -1, k
        spans[k, 0], spans[k, 1] = i + 1, end
        i = _after(data, _space(data, end + 1), 58)  # :
        end = _text(data, i, 0, max_value) if i >= 0 else -1
        if end < 0:
            return -1, k
        spans[k, 2], spans[k, 3] = i + 1, end
        k += 1
        i = _space(data, end + 1)
        if i < len(data) and data[i] == 125:  # }
            return (-1 if _repeats_a_field(data, spans, first, k, seen) else i + 1), k
        i = _after(data, i, 44)  # ,
    return -1, k


@helper
def _label(data: U8, i: int) -> tuple[int, float]:
    """The integer 0 or 1 at ``i``, alone (not 10, 1.0 or 1e0): the position after it and the
    label; -1 first if it is not there."""
    n = len(data)
    if i < 0 or i >= n or (data[i] != 48 and data[i] != 49):
        return -1, 0.0
    if i + 1 < n and data[i + 1] != 44 and data[i + 1] != 125 and _space(data, i + 1) == i + 1:
        return -1, 0.0
    return i + 1, float(data[i] - 48)


@helper
def _example(
    data: U8,
    i: int,
    want_label: bool,
    spans: NDArray[np.int64],
    k: int,
    keys: Keys,
    seen: NDArray[np.int64],
) -> tuple[int, int, float]:
    """The example object at ``i``: the position after it, the next free ``k`` and its
    label; -1 first if it is not a plain one."""
    features_key, label_key, max_name, max_value = keys
    has_features, has_label, label = False, False, 0.0
    i = _after(data, i, 123)  # {
    while i >= 0:
        if _is(data, i, features_key) and not has_features:
            has_features = True
            i = _after(data, _space(data, i + len(features_key)), 58)
            i, k = _features(data, i, spans, k, max_name, max_value, seen) if i >= 0 else (-1, k)
        elif want_label and not has_label and _is(data, i, label_key):
            has_label = True
            i, label = _label(data, _after(data, _space(data, i + len(label_key)), 58))
        else:
            return -1, k, label
        i = _space(data, i) if i >= 0 else -1
        if i >= 0 and i < len(data) and data[i] == 125:  # }
            done = has_features and (has_label or not want_label)
            return (i + 1 if done else -1), k, label
        i = _after(data, i, 44)
    return -1, k, label


@compiled
def _scan(
    data: U8, want_label: bool, examples_key: U8, keys: Keys
) -> tuple[bool, int, int, int, bool, NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """A plain body (see the module): whether it is one, the examples, the features, the
    most features of one example, whether it is a single example, and the arrays of
    :class:`Scanned` (to cut to those lengths)."""
    n = len(data)
    # Every feature takes at least 6 bytes ("a":"") and every example 21 ({"features":{..}}).
    indptr = np.zeros(n // 21 + 2, np.int64)
    spans = np.empty((n // 6 + 1, 4), np.int64)
    labels = np.empty(n // 21 + 1, np.float64)
    seen = np.full((_seen_slots(n // 6 + 1), 2), -1, np.int64)  # see _repeats_a_field
    start = _space(data, 0)
    i = _after(data, start, 123)  # {
    if i < 0:
        return False, 0, 0, 0, False, indptr, spans, labels
    if not _is(data, i, examples_key):  # a single example: the body is its object
        end, k, labels[0] = _example(data, start, want_label, spans, 0, keys, seen)
        indptr[1] = k
        return end >= 0 and _space(data, end) == n, 1, k, k, True, indptr, spans, labels
    i = _after(data, _after(data, _space(data, i + len(examples_key)), 58), 91)  # : [
    examples, k, widest = 0, 0, 0
    while i >= 0:
        i, k, labels[examples] = _example(data, i, want_label, spans, k, keys, seen)
        widest = max(widest, k - indptr[examples])
        examples += 1
        indptr[examples] = k
        i = _space(data, i) if i >= 0 else -1
        if i >= 0 and i < n and data[i] == 93:  # ]
            i = _after(data, _space(data, i + 1), 125)  # }
            return i == n, examples, k, widest, False, indptr, spans, labels
        i = _after(data, i, 44)  # ,
    return False, 0, 0, 0, False, indptr, spans, labels


@compiled
def _look_up(
    data: U8,
    spans: NDArray[np.int64],
    slots: NDArray[np.int64],
    arena: U8,
) -> tuple[NDArray[np.int64], NDArray[np.intp], NDArray[np.uint64]]:
    """Each feature's id from the table (0 for a name not in it); and the features whose
    names are not in it, with their names' hashes."""
    count = len(spans)
    found = np.zeros(count, np.int64)
    missing = np.empty(count, np.intp)
    hashes = np.empty(count, np.uint64)
    unseen = 0
    mask = np.uint64(len(slots) - 1)
    for k in range(count):
        field, field_end, value, value_end = spans[k, 0], spans[k, 1], spans[k, 2], spans[k, 3]
        h = _name_hash(data, field, field_end, value, value_end)
        head, tail = _name_words(data, field, field_end, value, value_end)
        length = field_end - field + 1 + value_end - value
        slot = hash_slot(h, mask)
        hit = False
        while slots[slot, _NAME] != 0:
            if (
                slots[slot, _HEAD] == np.int64(head)
                and slots[slot, _TAIL] == np.int64(tail)
                and slots[slot, _NAME] & ((1 << _LENGTH_BITS) - 1) == length
                and (
                    length <= _INLINE  # the words and the length say it all
                    or _same_name(
                        arena, slots[slot, _NAME], data, field, field_end, value, value_end
                    )
                )
            ):
                found[k] = slots[slot, _ID]
                hit = True
                break
            slot = next_slot(slot, mask)
        if not hit:
            missing[unseen], hashes[unseen] = k, h
            unseen += 1
    return found, missing[:unseen], hashes[:unseen]


@compiled
def _with_bias(
    ids: NDArray[np.int64], indptr: NDArray[np.int64], bias: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """The examples' new ``indptr``, their ids with ``bias`` first in each, and the values
    (every one 1)."""
    examples = len(indptr) - 1
    out_indptr = np.zeros(examples + 1, np.int64)
    out = np.empty(len(ids) + examples, np.int64)
    k = 0
    for j in range(examples):
        out[k] = bias
        k += 1
        for i in range(indptr[j], indptr[j + 1]):
            out[k] = ids[i]
            k += 1
        out_indptr[j + 1] = k
    return out_indptr, out, np.ones(len(out))


@compiled
def _cross_names(
    data: U8,
    spans: NDArray[np.int64],
    indptr: NDArray[np.int64],
    fields: U8,
    starts: NDArray[np.int64],
    pairs: NDArray[np.int64],
) -> tuple[NDArray[np.int64], U8, NDArray[np.int64]]:
    """Each cross present in an example (both its fields scanned there): the example's row,
    and its name ``a=va&b=vb`` written into one buffer as a scanned name, ``a=va&b`` the
    field's span and ``vb`` the value's, in examples' order, then the pairs' order."""
    fields_count, examples = len(starts) - 1, len(indptr) - 1
    where = np.full(fields_count, -1, np.int64)
    rows = np.empty(examples * len(pairs), np.int64)
    out = np.empty((examples * len(pairs), 4), np.int64)
    names = np.empty(16, np.uint8)
    count, used = 0, 0
    for j in range(examples):
        where[:] = -1
        for k in range(indptr[j], indptr[j + 1]):
            length = spans[k, 1] - spans[k, 0]
            for f in range(fields_count):
                if starts[f + 1] - starts[f] == length and _equal(
                    data, spans[k, 0], fields, starts[f], length
                ):
                    where[f] = k
                    break
        for c in range(len(pairs)):
            a, b = where[pairs[c, 0]], where[pairs[c, 1]]
            if a < 0 or b < 0:
                continue
            size = spans[a, 3] - spans[a, 0] + 2 + spans[b, 3] - spans[b, 0]
            if used + size > len(names):
                names = _grown_bytes(names, 2 * (used + size))
            out[count, 0] = used
            used = _copied(names, used, data, spans[a, 0], spans[a, 1])
            names[used] = _EQUALS
            used = _copied(names, used + 1, data, spans[a, 2], spans[a, 3])
            names[used] = 38  # &
            used = _copied(names, used + 1, data, spans[b, 0], spans[b, 1])
            out[count, 1] = used
            out[count, 2] = used
            used = _copied(names, used, data, spans[b, 2], spans[b, 3])
            out[count, 3] = used
            rows[count] = j
            count += 1
    return rows[:count], names[:used], out[:count]


@helper
def _copied(to: U8, at: int, data: U8, start: int, end: int) -> int:
    """``data[start:end]`` written at ``to[at:]``; the position after it."""
    for i in range(start, end):
        to[at] = data[i]
        at += 1
    return at


@helper
def _grown_bytes(array: U8, size: int) -> U8:
    grown = np.empty(size, np.uint8)
    grown[: len(array)] = array
    return grown


@inlined
def _name_words(
    data: U8, field: int, field_end: int, value: int, value_end: int
) -> tuple[np.uint64, np.uint64]:
    """The first 16 bytes of ``field=value`` as two little-endian words, zero-padded."""
    # The field, the '=' and the value in three loops, each without a test per byte of
    # which part it is in: a test per byte made a 1,000-row body's look-up ~15% slower.
    head, tail = np.uint64(0), np.uint64(0)
    size = min(field_end - field, _INLINE)
    for p in range(size):
        head, tail = _packed(head, tail, p, np.uint64(data[np.uint64(field + p)]))
    if size < _INLINE:
        head, tail = _packed(head, tail, size, np.uint64(_EQUALS))
        size += 1
    for q in range(min(value_end - value, _INLINE - size)):
        head, tail = _packed(head, tail, size + q, np.uint64(data[np.uint64(value + q)]))
    return head, tail


@inlined
def _arena_words(arena: U8, start: int, length: int) -> tuple[np.uint64, np.uint64]:
    """:func:`_name_words` of the arena's name at ``start``."""
    head, tail = np.uint64(0), np.uint64(0)
    for p in range(min(_INLINE, length)):
        head, tail = _packed(head, tail, p, np.uint64(arena[np.uint64(start + p)]))
    return head, tail


@inlined
def _packed(
    head: np.uint64, tail: np.uint64, p: int, byte: np.uint64
) -> tuple[np.uint64, np.uint64]:
    """The two words with ``byte`` put at position ``p`` (below 16) of the name."""
    if p < 8:
        return head | (byte << np.uint64(8 * p)), tail
    return head, tail | (byte << np.uint64(8 * (p - 8)))


@inlined
def _same_name(
    arena: U8, name: int, data: U8, field: int, field_end: int, value: int, value_end: int
) -> bool:
    """Whether the arena's name at ``name`` (a slot's ``start << 16 | length``) is
    ``field=value`` of the body."""
    start, length = name >> _LENGTH_BITS, name & ((1 << _LENGTH_BITS) - 1)
    size = field_end - field
    return bool(
        length == size + 1 + value_end - value
        and _equal(arena, start, data, field, size)
        and arena[start + size] == _EQUALS
        and _equal(arena, start + size + 1, data, value, value_end - value)
    )


#: A names table's arrays: slots, hashes, ids, starts and arena (see NameIds).
Table = tuple[NDArray[np.int64], NDArray[np.uint64], NDArray[np.int64], NDArray[np.int64], U8]


@compiled
def _append(
    table: Table,
    first: int,
    placed: int,
    new_hashes: NDArray[np.uint64],
    new_ids: NDArray[np.int64],
    lengths: NDArray[np.int64],
    names: U8,
) -> None:
    """Write entries ``first:`` (names back to back in ``names``, of ``lengths``) into the
    table's arrays, which have room, and put entries ``placed:`` into their slots: one call
    where numpy took six and the placing another."""
    slots, hashes, ids, starts, arena = table
    used = starts[first]
    arena[used : used + len(names)] = names
    for e in range(len(lengths)):
        hashes[first + e] = new_hashes[e]
        ids[first + e] = new_ids[e]
        starts[first + e + 1] = starts[first + e] + lengths[e]
    _place(slots, hashes, ids, starts, arena, placed, first + len(lengths))


@helper
def _place(
    slots: NDArray[np.int64],
    hashes: NDArray[np.uint64],
    ids: NDArray[np.int64],
    starts: NDArray[np.int64],
    arena: U8,
    first: int,
    last: int,
) -> None:
    """Put entries ``first:last`` into their slots."""
    mask = np.uint64(len(slots) - 1)
    for e in range(first, last):
        slot = hash_slot(hashes[e], mask)
        while slots[slot, _NAME] != 0:
            slot = next_slot(slot, mask)
        name = (starts[e] << _LENGTH_BITS) | (starts[e + 1] - starts[e])
        slots[slot, _NAME], slots[slot, _ID] = name, ids[e]
        head, tail = _arena_words(arena, starts[e], starts[e + 1] - starts[e])
        slots[slot, _HEAD], slots[slot, _TAIL] = np.int64(head), np.int64(tail)
