"""The explanations of a scoring pass's examples, from what the pass read already.

The weights come from the pass's one Redis read (:meth:`service.api.served.ServedModel._score`),
so explaining costs no Redis command; the math is :mod:`online_ctr.learning.explain`.

An example's row of the batch is its bias, then its features in the order sent (as
:class:`~online_ctr.learning.features.FeatureHasher` makes it), unless ids repeated in the
request (a list item twice, or a collision of reduced ``hash_bits``) and were merged: then
every row of the request's hashing is sorted by id, and each feature's weight is found by
hashing its name again. (A request is hashed with others only when it has no lists and full
64-bit ids, which never merge: service.api.served.ServedModel._hash.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.explain import Explanation, Sent, explain, sent_features
from online_ctr.learning.features import BIAS, Batch, Example, FeatureHasher
from online_ctr.learning.learner import Features


def explanations(
    examples: Sequence[Example],
    batch: Batch,
    first: int,
    features: Features,
    weights: NDArray[np.float64],
    hasher: FeatureHasher,
    top: int,
    base_rate: float = 0.0,
) -> list[Explanation]:
    """Explain ``examples``, rows ``first``, ``first + 1``, ... of ``batch``, whose distinct
    ids ``features`` are and ``weights`` their weights (as the pass scored them), and
    ``base_rate`` the prior's offset the pass added."""
    bounds = batch.indptr[first : first + len(examples) + 1]
    lo, hi = int(bounds[0]), int(bounds[-1])
    occurring = weights[features.inverse[lo:hi]].tolist()  # each stored pair's weight
    starts = (bounds - lo).tolist()
    sent = [sent_features(example, hasher.numeric, hasher.crosses) for example in examples]
    # Nothing merged: every row is the bias, then the features as sent.
    in_order = hi - lo == sum(len(row) + 1 for row in sent)
    answers = []
    for j, row in enumerate(sent):
        a, b = starts[j], starts[j + 1]
        if in_order:
            bias, found = occurring[a], occurring[a + 1 : b]
        else:
            ids = batch.ids[lo + a : lo + b].tolist()
            bias, found = _by_name(row, dict(zip(ids, occurring[a:b], strict=True)), hasher)
        answers.append(explain(row, found, bias, top, base_rate))
    return answers


def _by_name(
    sent: list[Sent], weight_of: dict[int, float], hasher: FeatureHasher
) -> tuple[float, list[float]]:
    """The bias's weight and each feature's, found by the ids of their names."""
    ids = hasher.many_ids([BIAS, *(s.name for s in sent)]).view(np.uint64).tolist()
    found = [weight_of[i] for i in ids]
    return found[0], found[1:]
