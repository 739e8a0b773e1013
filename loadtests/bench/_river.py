"""River's FTRL-Proximal logistic regression, set up as close to ours as River allows.

River's ``LogisticRegression`` learns its intercept apart from the optimizer (plain SGD at
``intercept_lr``), so the intercept is switched off and a constant feature named ``""`` (our
:data:`online_ctr.learning.features.BIAS`) goes through FTRL like every other feature, as our bias
does.
``l2=0`` keeps River's own L2 term out: FTRL's ``l2`` is the only one. River's FTRL is still not
Algorithm 1 exactly (``docs/algorithms.md``): it predicts with the weights from before each
feature's previous update, one step behind ours (which gives 0.5, 0.5156, 0.5291 here):

>>> model = ftrl_model(alpha=0.1, beta=1.0, l1=0.0, l2=1.0)
>>> progressive_probabilities(model, [({"site": "news"}, 1)] * 3).round(4).tolist()
[0.5, 0.5, 0.5156]
>>> features({"site": "news", "price": 2.5})
{'site=news': 1.0, 'price': 2.5, '': 1.0}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import BIAS

Value = str | float | int | Sequence[str]
Example = Mapping[str, Value]


def ftrl_model(alpha: float, beta: float, l1: float, l2: float) -> Any:
    """``LogisticRegression(optimizer=FTRLProximal(...))`` with the intercept left to FTRL."""
    from river import linear_model, optim

    return linear_model.LogisticRegression(
        optimizer=optim.FTRLProximal(alpha=alpha, beta=beta, l1=l1, l2=l2),
        l2=0.0,
        intercept_lr=0.0,
    )


def features(example: Example) -> dict[str, float]:
    """River's input for one example: ``{"field=value": 1.0, ...}`` plus the bias feature."""
    try:
        # Fast path: all values are strings, each the feature `field=value` with x = 1.
        x = dict.fromkeys(map("=".join, example.items()), 1.0)  # type: ignore[arg-type]
    except TypeError:
        x = _features_slowly(example)
    x[BIAS] = 1.0
    return x


def _features_slowly(example: Example) -> dict[str, float]:
    """Numbers as the feature ``field`` with x = value, lists one ``field=item`` each (summed)."""
    x: dict[str, float] = {}
    for name, value in example.items():
        if isinstance(value, str):
            x[f"{name}={value}"] = x.get(f"{name}={value}", 0.0) + 1.0
        elif isinstance(value, int | float):
            if value != 0:
                x[name] = x.get(name, 0.0) + float(value)
        else:
            for item in value:
                x[f"{name}={item}"] = x.get(f"{name}={item}", 0.0) + 1.0
    return x


def progressive_probabilities(
    model: Any, rows: Iterable[tuple[Example, int]]
) -> NDArray[np.float64]:
    """``predict_proba_one`` then ``learn_one`` on each row: River's progressive validation."""
    out = []
    for example, label in rows:
        x = features(example)
        out.append(model.predict_proba_one(x)[True])
        model.learn_one(x, bool(label))
    return np.array(out, dtype=np.float64)
