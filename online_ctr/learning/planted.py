"""A planted sparse logistic model: synthetic click streams whose true weights are known.

Every example has one value in each of ``n_fields`` categorical fields (``f0``, ``f1``, ...),
drawn independently with Zipf-like frequencies: the value of rank ``r`` (named ``str(r - 1)``,
so ``"0"`` is the most frequent) has probability proportional to ``r ** -zipf_exponent``. Only a
few ``field=value`` features carry weight; the label is drawn from

    p = sigma(bias + sum over fields of w[field=value]),   y ~ Bernoulli(p)

Feature names follow :mod:`online_ctr.learning.features` (``field=value``, the bias is ``""``), so a
learner's weights can be compared with the planted ones by name.

Because each field takes exactly one value, adding ``c`` to all of a field's weights and
subtracting it from the bias leaves every ``p`` unchanged: the weights are not identifiable.
With fewer than half of each field's values in the support (``support_fraction < 0.5``), the
planted weights are the representation with the smallest L1 norm among the field-wise shifts,
which is the one an L1-regularized learner is pulled towards.

>>> stream = planted_stream(2000, n_fields=3, n_values=10, seed=7)
>>> len(stream.examples), sorted(stream.examples[0])
(2000, ['f0', 'f1', 'f2'])
>>> len(stream.weights), len(stream.support())
(31, 7)
>>> stream == planted_stream(2000, n_fields=3, n_values=10, seed=7)
True
>>> 0.0 < stream.log_loss() < stream.base_rate_log_loss() <= math.log(2)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import BIAS

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class PlantedStream:
    """A drawn stream: examples, labels, their true probabilities and the true weights."""

    examples: list[dict[str, str]]
    labels: FloatArray
    probabilities: FloatArray
    weights: dict[str, float]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlantedStream):
            return NotImplemented
        return (
            self.examples == other.examples
            and self.weights == other.weights
            and np.array_equal(self.labels, other.labels)
            and np.array_equal(self.probabilities, other.probabilities)
        )

    def support(self) -> set[str]:
        """The names of the features whose true weight is nonzero (the bias included)."""
        return {name for name, w in self.weights.items() if w != 0.0}

    def log_loss(self) -> float:
        """Mean log loss of the planted probabilities on the drawn labels: the Bayes rate."""
        return _mean_log_loss(self.probabilities, self.labels)

    def base_rate_log_loss(self) -> float:
        """Mean log loss of always predicting the stream's click rate: a learner's floor."""
        rate = float(np.mean(self.labels))
        return _mean_log_loss(np.full(self.labels.shape, rate), self.labels)


def _mean_log_loss(p: FloatArray, y: FloatArray) -> float:
    """``mean(-y log p - (1 - y) log(1 - p))``, with ``0 log 0 = 0``."""
    with np.errstate(divide="ignore"):
        terms = np.where(y > 0, -np.log(p), -np.log1p(-p))
    return float(np.mean(terms))


def zipf_frequencies(n_values: int, exponent: float) -> FloatArray:
    """Probabilities proportional to ``rank ** -exponent`` for ranks ``1..n_values``.

    >>> zipf_frequencies(3, 1.0).round(4)
    array([0.5455, 0.2727, 0.1818])
    """
    ranks = np.arange(1, n_values + 1, dtype=np.float64)
    mass = ranks**-exponent
    return np.asarray(mass / mass.sum(), dtype=np.float64)


def planted_stream(
    n_examples: int,
    *,
    n_fields: int = 6,
    n_values: int = 20,
    zipf_exponent: float = 1.0,
    support_fraction: float = 0.15,
    weight_range: tuple[float, float] = (1.0, 2.0),
    bias: float = -1.0,
    seed: int = 0,
) -> PlantedStream:
    """Draw ``n_examples`` examples and labels from a freshly planted sparse model.

    Parameters
    ----------
    n_examples
        Length of the stream.
    n_fields, n_values
        Number of categorical fields, and of values in each.
    zipf_exponent
        Skew of the value frequencies (0 is uniform).
    support_fraction
        Share of each field's values with a nonzero weight, rounded to a whole number of
        values (at least one). Must be below 0.5, see the module docstring.
    weight_range
        Nonzero weights have a magnitude uniform in this range and a random sign.
    bias
        The bias weight (feature ``""``).
    seed
        Seed of the random generator: the same arguments give the same stream.

    Returns
    -------
    PlantedStream
        ``weights`` names every feature of the model, zeros included.

    Examples
    --------
    >>> stream = planted_stream(5, n_fields=2, n_values=6, support_fraction=0.2, seed=3)
    >>> len(stream.support())  # round(0.2 * 6) = 1 value per field, and the bias
    3
    >>> stream.examples[0].keys() == {"f0", "f1"}
    True
    >>> stream.labels.shape, set(stream.labels.tolist()) <= {0.0, 1.0}
    ((5,), True)
    """
    _check(n_examples, n_fields, n_values, support_fraction, weight_range)
    rng = np.random.default_rng(seed)
    table = _plant_weights(rng, n_fields, n_values, support_fraction, weight_range)
    codes = rng.choice(
        n_values, size=(n_examples, n_fields), p=zipf_frequencies(n_values, zipf_exponent)
    )
    s = bias + table[np.arange(n_fields), codes].sum(axis=1)
    probabilities = np.asarray(1.0 / (1.0 + np.exp(-s)), dtype=np.float64)
    labels = (rng.random(n_examples) < probabilities).astype(np.float64)
    examples = [{f"f{j}": str(v) for j, v in enumerate(row)} for row in codes.tolist()]
    weights = {BIAS: float(bias)}
    for j in range(n_fields):
        weights.update({f"f{j}={v}": float(table[j, v]) for v in range(n_values)})
    return PlantedStream(examples, labels, probabilities, weights)


def _plant_weights(
    rng: np.random.Generator,
    n_fields: int,
    n_values: int,
    support_fraction: float,
    weight_range: tuple[float, float],
) -> FloatArray:
    """A ``(n_fields, n_values)`` table of weights, ``support_fraction`` of each row nonzero."""
    per_field = max(1, round(support_fraction * n_values))
    table = np.zeros((n_fields, n_values))
    low, high = weight_range
    for j in range(n_fields):
        chosen = rng.choice(n_values, size=per_field, replace=False)
        signs = rng.choice(np.array([-1.0, 1.0]), size=per_field)
        table[j, chosen] = signs * rng.uniform(low, high, size=per_field)
    return table


def _check(
    n_examples: int,
    n_fields: int,
    n_values: int,
    support_fraction: float,
    weight_range: tuple[float, float],
) -> None:
    """Refuse arguments that would make an empty or non-sparse model."""
    if n_examples < 0 or n_fields < 1 or n_values < 2:
        raise ValueError(
            f"need n_examples >= 0, n_fields >= 1, n_values >= 2; "
            f"got {n_examples}, {n_fields}, {n_values}"
        )
    per_field = max(1, round(support_fraction * n_values)) if support_fraction > 0 else 0
    if not 0.0 < support_fraction < 0.5 or 2 * per_field >= n_values:
        raise ValueError(
            f"support_fraction must leave most of each field's values at zero, "
            f"got {support_fraction} of {n_values}"
        )
    low, high = weight_range
    if not 0.0 < low <= high or not math.isfinite(high):
        raise ValueError(f"weight_range must satisfy 0 < low <= high < inf, got {weight_range}")
