"""From examples (``field -> value`` mappings) to sparse batches of hashed feature ids.

A string value is the categorical feature ``field=value`` (x = 1); a finite number is, with
``numeric="raw"``, the numeric feature ``field`` (x = value, and x = 0 is simply absent), and
with ``numeric="log_bucket"`` the categorical feature ``field=b`` with ``b`` its
:func:`~online_ctr.learning.numeric.log_bucket` (:mod:`online_ctr.learning.numeric`); a list of
strings is one
categorical feature per string. The bias feature, named ``""`` so that no field can produce
it, is in every example. A feature id is the first 8 bytes of BLAKE2b of the feature's UTF-8
name, read little-endian: the same on every machine and in every process (never ``hash()``),
optionally reduced to ``hash_bits`` bits (the hashing trick). Ids that repeat within one
example, through a repeated list item or a hash collision, have their values summed.

>>> hasher = FeatureHasher()
>>> batch = hasher.batch([{"site": "news", "price": 2.5}, {"tags": ["a", "b"]}])
>>> batch.indptr.tolist(), batch.values.tolist()
([0, 3, 6], [1.0, 1.0, 2.5, 1.0, 1.0, 1.0])
>>> hasher.batch([{"tags": ["a", "a"]}]).values.tolist()
[2.0, 1.0]
>>> bool(batch.ids[0] == hasher.id(BIAS) == batch.ids[3])
True
>>> bucketed = FeatureHasher(numeric="log_bucket").batch([{"hour": 14}])
>>> bucketed.values.tolist(), bool(bucketed.ids[1] == hasher.id("hour=6"))
([1.0, 1.0], True)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain

import numpy as np
from numpy.typing import ArrayLike, NDArray

from online_ctr.learning.budget import Budget
from online_ctr.learning.crosses import Crosses, example_crosses
from online_ctr.learning.new_names import NewNames
from online_ctr.learning.numeric import Numeric, check_numeric, log_bucket

#: The name of the bias feature: empty, so that no ``field`` or ``field=value`` can collide.
BIAS = ""

Value = str | float | int | Sequence[str]
Example = Mapping[str, Value]

#: Above this many cached names the cache is dropped: a bound on memory, not a tuning knob.
_CACHE_LIMIT = 1 << 20
#: What a cached name costs besides its two strings' characters: the dict entry, the key
#: tuple, the id and the two str headers (144 B measured with tracemalloc over 100,000 names,
#: plus 2 x 49 B of str header, rounded up).
_ENTRY_BYTES = 250


def feature_id(name: str) -> int:
    """The stable 64-bit id of a feature name.

    >>> feature_id("site=news")
    2373249705619041454
    """
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


#: The bias feature's id at the full 64 bits (a hasher of fewer bits reduces it).
BIAS_ID = feature_id(BIAS)


def bias_id(hash_bits: int | None) -> int:
    """The bias feature's id in a model of ``hash_bits`` (None: 64)."""
    return BIAS_ID if hash_bits is None or hash_bits >= 64 else BIAS_ID & ((1 << hash_bits) - 1)


@dataclass(frozen=True)
class Batch:
    """A mini-batch in CSR form: example ``j`` has ``ids[indptr[j]:indptr[j + 1]]``.

    ``weights`` are the examples' importance weights (McMahan et al. 2013, section 4.4: an
    example of weight ``w`` counts as ``w`` examples in the gradient and in the metrics);
    ``None`` means every weight is 1, the common case, which costs nothing."""

    indptr: NDArray[np.int64]
    ids: NDArray[np.uint64]
    values: NDArray[np.float64]
    labels: NDArray[np.float64]
    weights: NDArray[np.float64] | None = None

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def examples(self, start: int, stop: int) -> Batch:
        """Examples ``start`` to ``stop`` (exclusive) as a batch of their own."""
        first, last = int(self.indptr[start]), int(self.indptr[stop])
        return Batch(
            self.indptr[start : stop + 1] - first,
            self.ids[first:last],
            self.values[first:last],
            self.labels[start:stop],
            None if self.weights is None else self.weights[start:stop],
        )

    def with_weights(self, weights: Sequence[float] | None) -> Batch:
        """The batch with the examples' importance ``weights`` (None: every weight 1)."""
        if weights is None:
            return self
        return replace(self, weights=np.asarray(weights, np.float64))

    def weighted(self, per_example: NDArray[np.float64]) -> NDArray[np.float64]:
        """``per_example`` values (a loss, a residual) times the examples' weights: the
        values themselves, every bit, when the batch has none."""
        return per_example if self.weights is None else per_example * self.weights

    def example_weights(self) -> NDArray[np.float64]:
        """The examples' weights, 1 where none was given."""
        if self.weights is None:
            return np.ones(len(self))
        return self.weights

    def rows(self) -> NDArray[np.int64]:
        """The example index of every stored (id, value) pair."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.indptr))

    def occurrences(self) -> int:
        """How many (example, feature) pairs the batch holds."""
        return int(self.indptr[-1])

    @cached_property
    def distinct(self) -> tuple[NDArray[np.uint64], NDArray[np.intp]]:
        """The distinct ids in no particular order, and each occurrence's index in them
        (:func:`online_ctr.learning.grouping.distinct_inverse`), found once per batch: a
        replay's reader thread finds them while the learner learns the batch before."""
        from online_ctr.learning.grouping import distinct_inverse  # numba, only if asked

        return distinct_inverse(self.ids)

    def appended(self, rows: ArrayLike, ids: ArrayLike, values: ArrayLike) -> Batch:
        """The batch with the features ``ids`` (int64 holding the uint64 bits) of x
        ``values`` added at the end of the examples ``rows`` (ascending), in that order."""
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            return self
        own = np.diff(self.indptr)
        added = np.bincount(rows, minlength=len(self))
        indptr = np.concatenate(([0], np.cumsum(own + added))).astype(np.int64)
        # Each example's own features move by the features added before it; the added ones
        # go after its own, in the order given (positions computed, no sort).
        own_at = np.arange(len(self.ids)) + np.repeat(indptr[:-1] - self.indptr[:-1], own)
        first_added = np.cumsum(added) - added
        added_at = indptr[rows] + own[rows] + np.arange(len(rows)) - first_added[rows]
        out_ids = np.empty(int(indptr[-1]), np.uint64)
        out_values = np.empty(int(indptr[-1]), np.float64)
        out_ids[own_at], out_values[own_at] = self.ids, self.values
        out_ids[added_at] = np.asarray(ids, np.int64).view(np.uint64)
        out_values[added_at] = values
        return Batch(indptr, out_ids, out_values, self.labels, self.weights)


@dataclass
class FeatureHasher:
    """Turns examples into :class:`Batch` objects; ``hash_bits=None`` keeps the full 64 bits,
    ``numeric`` says how numbers are taken (:mod:`online_ctr.learning.numeric`).

    Each distinct name is hashed once and remembered (up to a bound), so a batch
    hashes each distinct string at most once, and a batch whose names were all seen before
    costs one dict look-up per feature, all in one pass that runs in C. With a ``budget``
    (:mod:`online_ctr.learning.budget`), the cache's bytes count against it too.
    """

    hash_bits: int | None = None
    numeric: Numeric = "raw"
    budget: Budget | None = field(default=None, repr=False, compare=False)
    #: Where names go when first hashed, for a model that records them (None: nowhere).
    new_names: NewNames | None = field(default=None, repr=False, compare=False)
    #: Pairs of fields crossed (:mod:`online_ctr.learning.crosses`): each example's cross
    #: features follow its own.
    crosses: Crosses = ()
    _known: dict[object, int] = field(default_factory=dict, repr=False)
    _known_bytes: int = field(default=0, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.hash_bits is not None and not 1 <= self.hash_bits <= 64:
            raise ValueError(f"hash_bits must be between 1 and 64, got {self.hash_bits}")
        check_numeric(self.numeric)
        self._bias = self._signed_id(BIAS)
        if self.budget is not None:
            self.budget.track(self)

    def held(self) -> int:
        """Bytes the cache of names holds (an estimate within a few percent)."""
        return self._known_bytes

    def forget(self) -> None:
        """Empty the cache of names (ids are computed again as needed)."""
        self._known.clear()
        self._known_bytes = 0

    def id(self, name: str) -> int:
        """The (possibly reduced) id of one feature name."""
        key = feature_id(name)
        if self.hash_bits is not None and self.hash_bits < 64:
            key &= (1 << self.hash_bits) - 1
        return key

    def _signed_id(self, name: str) -> int:
        # Kept signed in Python because numpy converts those much faster; batches view the
        # same 64 bits as unsigned.
        key = self.id(name)
        return key - (1 << 64) if key >= 1 << 63 else key

    def batch(self, examples: Iterable[Example], labels: Iterable[float] = ()) -> Batch:
        """Hash a sequence of examples into one :class:`Batch`."""
        examples = list(examples)
        labels_array = np.fromiter(labels, dtype=np.float64)
        held = self._known_bytes
        try:
            batch, repeats = self._known_batch(examples, labels_array)
        except (KeyError, TypeError):  # a new name, a number, or an unhashable list
            batch, repeats = self._slow_batch(examples, labels_array)
        if self.crosses:
            batch = self._crossed(batch, examples)
        if self.budget is not None and self._known_bytes > held:
            self.budget.fit()
        # Merged once, after the crosses: every path (scan.NameIds too) sorts the same rows.
        return _merge_repeats(batch) if repeats else batch

    def _crossed(self, batch: Batch, examples: list[Example]) -> Batch:
        """``batch`` with each example's cross features after its own. Two categories, the
        common case, are looked up by their four strings (whose hashes Python keeps), with
        no name made: a name per cross per example was most of crossing's cost."""
        rows: list[int] = []
        ids: list[int] = []
        values: list[float] = []
        known = self._known
        for row, example in enumerate(examples):
            for a, b in self.crosses:
                va, vb = example.get(a), example.get(b)
                if va is None or vb is None:
                    continue
                if type(va) is str and type(vb) is str:
                    key = known.get((a, va, b, vb))
                    if key is None:
                        full = f"{a}={va}&{b}={vb}"
                        key = self._new_id((a, va, b, vb), full, len(full))
                    rows.append(row)
                    ids.append(key)
                    values.append(1.0)
                    continue
                for name, x in example_crosses({a: va, b: vb}, ((a, b),), self.numeric):
                    rows.append(row)
                    ids.append(self._cached_id(name, None))
                    values.append(x)
        return batch.appended(rows, ids, values)

    def _known_batch(
        self, examples: list[Example], labels: NDArray[np.float64]
    ) -> tuple[Batch, bool]:
        """The common case, every (field, value) a categorical feature seen before: looked
        up for the whole batch in one pass that runs in C, without a Python loop."""
        pairs: Iterable[object] = chain.from_iterable(map(dict.items, examples))  # type: ignore[arg-type]
        found = np.array(list(map(self._known.__getitem__, pairs)), dtype=np.int64)
        sizes = np.fromiter(map(len, examples), dtype=np.int64, count=len(examples))
        starts = np.cumsum(sizes) - sizes
        ids = np.insert(found, starts, self._bias)  # the bias first in every example
        indptr = np.concatenate(([0], np.cumsum(sizes + 1)))
        batch = Batch(indptr, ids.view(np.uint64), np.ones(len(ids)), labels)
        return batch, self.hash_bits is not None

    def _slow_batch(
        self, examples: list[Example], labels: NDArray[np.float64]
    ) -> tuple[Batch, bool]:
        """Any examples: feature by feature, hashing and remembering new names; and whether
        an id may repeat in an example."""
        indptr = [0]
        ids: list[int] = []
        numeric: dict[int, float] = {}  # position in ids -> x, for the few x != 1
        repeats = self.hash_bits is not None
        for example in examples:
            ids.append(self._bias)
            repeats |= self._add_slowly(example, ids, numeric)
            indptr.append(len(ids))
        values = np.ones(len(ids))
        if numeric:
            values[np.fromiter(numeric.keys(), np.intp)] = np.fromiter(numeric.values(), float)
        batch = Batch(
            indptr=np.array(indptr, dtype=np.int64),
            ids=np.array(ids, dtype=np.int64).view(np.uint64),
            values=values,
            labels=labels,
        )
        return batch, repeats

    def _add_slowly(self, example: Example, ids: list[int], numeric: dict[int, float]) -> bool:
        """Add one example's ids feature by feature; say whether an id may repeat in it."""
        repeats = False
        for name, value in example.items():
            if isinstance(value, str):
                ids.append(self._cached_id(name, value))
            elif isinstance(value, int | float):
                x = _numeric(name, value)
                if self.numeric == "log_bucket":
                    ids.append(self._bucket_id(name, value, x))
                elif x != 0.0:
                    numeric[len(ids)] = x
                    ids.append(self._cached_id(name, None))
            else:
                repeats = True
                ids.extend(self._cached_id(name, item) for item in value)
        return repeats

    def field_ids(self, name: str, values: Sequence[str | None]) -> NDArray[np.int64]:
        """The ids of the features ``name=value`` (of ``name`` itself where a value is None),
        as int64 holding the bits of the uint64 ids, for readers that hash a column at once."""
        return np.array([self._cached_id(name, value) for value in values], dtype=np.int64)

    @property
    def bias_id(self) -> int:
        """The bias feature's id as batches hold it (int64 holding the uint64's bits)."""
        return self._bias

    def many_ids(self, names: Sequence[str]) -> NDArray[np.int64]:
        """The ids of many names at once, as int64 holding the bits of the uint64 ids, and
        not remembered: for callers that remember ids themselves. The digests are joined and
        read as little-endian words in one go, without an int per name.

        >>> hasher = FeatureHasher(hash_bits=12)
        >>> hasher.many_ids(["site=news", ""]).tolist() == [hasher.id("site=news"), hasher.id("")]
        True
        """
        return self.ids_of_bytes([name.encode() for name in names])

    def ids_of_bytes(self, names: Sequence[bytes]) -> NDArray[np.int64]:
        """:meth:`many_ids` of names given as their UTF-8 bytes."""
        blake2b = hashlib.blake2b
        digests = b"".join([blake2b(name, digest_size=8).digest() for name in names])
        ids = np.frombuffer(digests, dtype="<u8").astype(np.uint64)
        if self.hash_bits is not None and self.hash_bits < 64:
            ids &= np.uint64((1 << self.hash_bits) - 1)
        return ids.view(np.int64)

    def _cached_id(self, name: str, value: str | None) -> int:
        """The id of ``name=value`` (``name`` alone when ``value`` is None), hashed at most once."""
        key = self._known.get((name, value))
        if key is None:
            full = name if value is None else f"{name}={value}"
            key = self._new_id((name, value), full, len(name) + len(value or ""))
        return key

    def _new_id(self, pair: tuple[object, ...], full: str, characters: int) -> int:
        """Hash the name ``full``, remember its id under ``pair`` and record it if asked."""
        if len(self._known) >= _CACHE_LIMIT:
            self.forget()
        key = self._signed_id(full)
        self._remember(pair, key, characters)
        if self.new_names is not None:
            self.new_names.add(key, full)
        return key

    def _remember(self, pair: tuple[object, ...], key: int, characters: int) -> None:
        if pair not in self._known:
            self._known_bytes += _ENTRY_BYTES + characters
        self._known[pair] = key

    def _bucket_id(self, name: str, value: float, x: float) -> int:
        """The id of ``name=log_bucket(x)``, remembered under ``(name, value)`` so that the
        next batch with this number takes the fast path (its x is 1, as that path assumes)."""
        key = self._cached_id(name, str(log_bucket(value if isinstance(value, int) else x)))
        self._remember((name, value), key, len(name))
        return key


def _numeric(name: str, value: float) -> float:
    """A numeric feature's x, refusing NaN and infinities."""
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"feature {name!r} has a non-finite value {value!r}")
    return x


def _merge_repeats(batch: Batch) -> Batch:
    """Sum the values of ids that repeat within an example (list items, hash collisions)."""
    rows = batch.rows()
    order = np.lexsort((batch.ids, rows))
    ids, rows = batch.ids[order], rows[order]
    first = np.ones(len(ids), dtype=bool)
    first[1:] = (ids[1:] != ids[:-1]) | (rows[1:] != rows[:-1])
    if first.all():
        return batch
    group = np.cumsum(first) - 1
    values = np.asarray(
        np.bincount(group, weights=batch.values[order], minlength=int(first.sum())), np.float64
    )
    counts = np.bincount(rows[first], minlength=len(batch))
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return Batch(indptr, ids[first], values, batch.labels, batch.weights)


def concat(batches: Sequence[Batch]) -> Batch:
    """Batches as one, in order."""
    if len(batches) == 1:
        return batches[0]
    offsets = np.cumsum([0] + [batch.occurrences() for batch in batches[:-1]])
    indptr = [batches[0].indptr[:1]] + [
        batch.indptr[1:] + offset for batch, offset in zip(batches, offsets, strict=True)
    ]
    return Batch(
        indptr=np.concatenate(indptr),
        ids=np.concatenate([batch.ids for batch in batches]),
        values=np.concatenate([batch.values for batch in batches]),
        labels=np.concatenate([batch.labels for batch in batches]),
        weights=_concat_weights(batches),
    )


def _concat_weights(batches: Sequence[Batch]) -> NDArray[np.float64] | None:
    """The batches' weights end to end; None if none of them has any."""
    if all(batch.weights is None for batch in batches):
        return None
    return np.concatenate([batch.example_weights() for batch in batches])


#: For readers that build batches themselves (:mod:`online_ctr.learning.columnar`).
merge_repeats = _merge_repeats
