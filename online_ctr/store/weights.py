"""A model's weights by feature: the largest ``|w|`` with their recorded names, or one
feature looked up by name (``GET /models/{name}/weights``, ``online-ctr models weights``).

The largest weights come from a scan of every stored feature (the snapshot export's,
:func:`~online_ctr.store.snapshot_scan.scan_state`: a chunk in memory at a time, and the
``top`` kept between chunks), each weight computed from its state by the rule's own weight
function at the model's step read before the scan: the weights as the shards hold them then
(updates applied during the scan may or may not be seen, as with any read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import BIAS, FeatureHasher
from online_ctr.learning.numeric import Numeric, log_bucket
from online_ctr.store import snapshot_scan
from online_ctr.store.feature_names import FeatureNames
from online_ctr.store.registry import RegistryError, UnknownNameError
from online_ctr.store.state import ModelStore

#: Most features one listing returns.
MAX_TOP = 1000
#: A value that JSON would read as a number (no nan, inf or 1_000, as the API refuses those).
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


class FeatureNamesOffError(RegistryError):
    """The model records no feature names, so its weights cannot be listed by name."""


class UnknownFeatureError(UnknownNameError):
    """The model holds no state for the feature asked for."""


@dataclass(frozen=True)
class FeatureWeight:
    """A feature: its id (unsigned), recorded name (None if not recorded), weight and state
    as the rule keeps it (field -> value); looked up by a number (``hour=20``), ``number`` is
    that number and ``name`` the feature it became (``hour=8``, its bucket, or ``hour``)."""

    id: int
    name: str | None
    weight: float
    state: dict[str, float]
    number: float | None = None


def readings(sent: str, numeric: Numeric) -> list[tuple[str, float | None]]:
    """The features ``field=value`` may name, as the API hashes an example: the category
    ``value``, and, when ``value`` is a number, the feature that number becomes (its bucket in
    ``log_bucket`` mode, ``field`` itself in ``raw`` mode); each with the number (or None).

    >>> readings("hour=20", "log_bucket")
    [('hour=20', None), ('hour=8', 20)]
    >>> readings("hour=20", "raw"), readings("site=news", "log_bucket")
    ([('hour=20', None), ('hour', 20)], [('site=news', None)])
    >>> readings("hour=1", "log_bucket")  # the number 1 is in bucket 1: one feature
    [('hour=1', 1)]
    """
    field, equals, value = sent.partition("=")
    if not equals or _NUMBER.fullmatch(value) is None:
        return [(sent, None)]
    number: float = int(value) if value.lstrip("-").isdigit() else float(value)
    became = field if numeric == "raw" else f"{field}={log_bucket(number)}"
    if became == sent:
        return [(sent, number)]
    return [(sent, None), (became, number)]


@dataclass(frozen=True)
class Weights:
    """Features of a model at step ``t``, with how many names its record holds (None:
    the model records none) and at most."""

    model: str
    t: int
    features: list[FeatureWeight]
    names_recorded: int | None
    names_max: int | None


def names_off(model: str, own: bool) -> FeatureNamesOffError:
    """The refusal, saying how to turn the record on."""
    how = (
        "set OCTR_FEATURE_NAMES=true for the service's own model and restart the API"
        if own
        else f"create the model with feature names on (`online-ctr models create {model} "
        f'--feature-names ...`, or PUT /models/{model} with "feature_names": true)'
    )
    return FeatureNamesOffError(
        f"model {model!r} does not record feature names, so its weights cannot be listed by "
        f"name: {how}; one feature can still be looked up with ?feature=FIELD=VALUE"
    )


class WeightsReader:
    """Reads the weights of the model of ``store``; ``names``: its record (None: off)."""

    def __init__(self, store: ModelStore, names: FeatureNames | None) -> None:
        self.store = store
        self.names = names
        self.spec = store.spec

    async def top(self, count: int) -> Weights:
        """The ``count`` features of largest ``|w|`` (ties: smaller id first), largest first."""
        spec = self.spec
        t, _ = await self.store.version()
        cut_all = await self.store.cut_all()
        best_ids = np.zeros(0, np.uint64)
        best_w = np.zeros(0)
        best_state = np.zeros((0, spec.width))
        scan = snapshot_scan.scan_state(
            self.store.redis, self.store.keys, spec.layout, self.store.scripts
        )
        async for ids, state in scan:
            w = spec.weights(state, t, cut_all)
            best_ids = np.concatenate([best_ids, ids])
            best_w = np.concatenate([best_w, w])
            best_state = np.concatenate([best_state, state])
            keep = _largest(best_w, best_ids, count)
            best_ids, best_w, best_state = best_ids[keep], best_w[keep], best_state[keep]
        keep = _largest(best_w, best_ids, count)
        ids = best_ids[keep].tolist()
        names = await self.names.names_of(ids) if self.names is not None else [None] * len(ids)
        bias = FeatureHasher(spec.hash_bits).id(BIAS)
        names = [BIAS if i == bias else name for i, name in zip(ids, names, strict=True)]
        features = [
            self._feature(i, name, float(w), row)
            for i, name, w, row in zip(ids, names, best_w[keep], best_state[keep], strict=True)
        ]
        return await self._weights(t, features)

    async def lookup(self, name: str) -> Weights:
        """The features ``name`` (``field=value`` as sent) may be: the category, and the
        feature its number became (:func:`readings`), those stored; or UnknownFeatureError."""
        spec = self.spec
        hasher = FeatureHasher(spec.hash_bits)
        candidates = readings(name, spec.numeric)
        ids = np.array([hasher.id(hashed) for hashed, _ in candidates], np.uint64)
        rows = await self.store.shards.read(ids)
        if not rows.stored.any():
            named = zip(candidates, ids.tolist(), strict=True)
            tried = " or ".join(f"{hashed!r} (id {i})" for (hashed, _), i in named)
            raise UnknownFeatureError(
                f"model {spec.name!r} has no weight for feature {tried}: it was never "
                "learned, or its state was dropped; a name is field=value as sent (a number "
                f"is looked up as the feature it becomes, numeric mode {spec.numeric})"
            )
        w = spec.weights(rows.state, rows.t, rows.cut_all)
        found = [
            self._feature(int(ids[n]), hashed, float(w[n]), rows.state[n], number)
            for n, (hashed, number) in enumerate(candidates)
            if rows.stored[n]
        ]
        return await self._weights(rows.t, found)

    def _feature(
        self,
        feature_id: int,
        name: str | None,
        w: float,
        row: NDArray[np.float64],
        number: float | None = None,
    ) -> FeatureWeight:
        names = self.spec.rule.fields + (("last_step",) if self.spec.stepped else ())
        state = dict(zip(names, map(float, row), strict=True))
        return FeatureWeight(int(feature_id), name, w, state, number)

    async def _weights(self, t: int, features: list[FeatureWeight]) -> Weights:
        held = await self.names.held() if self.names is not None else None
        most = self.names.most if self.names is not None else None
        return Weights(self.spec.name, int(t), features, held, most)


def _largest(w: NDArray[np.float64], ids: NDArray[np.uint64], count: int) -> NDArray[np.intp]:
    """Indexes of the ``count`` largest ``|w|``, largest first (ties: smaller id first);
    zero weights are never listed (a feature tracked but with no weight)."""
    order = np.lexsort((ids, -np.abs(w)))
    order = order[np.abs(w[order]) > 0]
    return order[:count]
