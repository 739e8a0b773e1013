"""Vowpal Wabbit as an external reference for FTRL-Proximal: our examples in VW's text format,
VW's ``--ftrl`` driven example by example, and whole ``-d`` runs over a text file.

What makes VW compute the same thing as :mod:`online_ctr.learning.rules.ftrl` (checked in
``tests/core/test_vw_oracle.py``):

- one VW feature per feature of ours: ``field=value`` with x = 1, a numeric ``field`` with its
  x, repeats within an example summed into one feature (VW would otherwise update the same
  weight twice in a row, which is not one update with the summed gradient);
- VW's constant feature is our bias (so no ``--noconstant``);
- ``--loss_function logistic`` with labels -1/+1: VW 9 reads a 0 as the midpoint of
  ``--logistic_min``/``--logistic_max`` (-1, 1), i.e. half a positive;
- no ``--link logistic`` (it only squashes the reported prediction; we take the raw score and
  apply our own sigmoid), no ``--min_prediction``/``--max_prediction`` (VW clips scores to
  [-50, 50] by default, beyond our own +-35 and far beyond any score here);
- VW's ``--l1``/``--l2`` enter its FTRL update as given (``ftrl.cc``: ``l1_lambda``,
  ``l2_lambda`` in the closed form), and its learning-rate options (``-l``, ``--power_t``,
  ``--initial_t``) do not reach the FTRL reduction; ``--holdout_off`` only matters with several
  passes, and is set anyway.

Features by name go through VW's own 32-bit hash (``TextEncoder(by_index=False)``), which can
collide; features by index (``by_index=True``) give each distinct name its own integer, which
VW's ``--hash strings`` uses as the index itself: no collisions at all.

>>> encoder = TextEncoder()
>>> encoder.line({"site": "news", "price": 2.5, "tags": ["a", "a"]}, 1)
'1 | site=news price:2.5 tags=a:2.0'
>>> by_index = TextEncoder(by_index=True)
>>> by_index.line({"site": "news"}, 0), by_index.line({"site": "blog", "x": 0.0}, 1)
('-1 | 1', '1 | 2')
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

Value = str | float | int | Sequence[str]
Example = Mapping[str, Value]

#: VW's text label for our 0 and 1 (logistic loss wants -1/+1, see the module docstring).
LABEL_PREFIX = ("-1 | ", "1 | ")

#: The hash of VW's constant feature (``constant.h``): indexes must stay below it.
CONSTANT_INDEX = 11650396

#: Bits for features by index: the constant's index fits, and so does every index below it.
INDEX_BITS = 24

#: Bits for features by name: VW's hash is 32 bits, so this is the fewest collisions there are.
NAME_BITS = 32

#: Characters VW's text format gives a meaning to, which a feature name cannot contain.
_SPECIAL = re.compile(r"[\s|:]")


def ftrl_arguments(
    alpha: float, beta: float, l1: float, l2: float, bits: int = INDEX_BITS, quiet: bool = True
) -> list[str]:
    """VW options for Algorithm 1 with logistic loss, and nothing else that changes the math.

    Above 28 bits the weights are kept sparse: dense FTRL weights take 16 bytes per slot.
    ``quiet=False`` keeps VW's progress and summary output (see :func:`parse_summary`).

    >>> ftrl_arguments(0.1, 1.0, 1.0, 0.5)[:5]
    ['--ftrl', '--ftrl_alpha=0.1', '--ftrl_beta=1.0', '--l1=1.0', '--l2=0.5']
    """
    return [
        "--ftrl",
        f"--ftrl_alpha={alpha!r}",
        f"--ftrl_beta={beta!r}",
        f"--l1={l1!r}",
        f"--l2={l2!r}",
        "--loss_function=logistic",
        f"--bit_precision={bits}",
        "--holdout_off",
        *(["--quiet"] if quiet else []),
        *(["--sparse_weights"] if bits > 28 else []),
    ]


def named_features(example: Example) -> dict[str, float]:
    """Our features of one example by name, with their x (repeats summed, zeros dropped).

    >>> named_features({"site": "news", "n": 0, "tags": ["a", "b", "a"]})
    {'site=news': 1.0, 'tags=a': 2.0, 'tags=b': 1.0}
    """
    out: dict[str, float] = {}
    for name, value in example.items():
        if isinstance(value, str):
            out[f"{name}={value}"] = out.get(f"{name}={value}", 0.0) + 1.0
        elif isinstance(value, int | float):
            x = float(value)
            if not math.isfinite(x):
                raise ValueError(f"feature {name!r} has a non-finite value {value!r}")
            if x != 0.0:
                out[name] = out.get(name, 0.0) + x
        else:
            for item in value:
                out[f"{name}={item}"] = out.get(f"{name}={item}", 0.0) + 1.0
    return out


@dataclass
class TextEncoder:
    """Turns our examples into VW text lines, features by name or by dense integer index."""

    by_index: bool = False
    index: dict[str, int] = field(default_factory=dict, repr=False)

    def line(self, example: Example, label: int) -> str:
        """One VW text line (without newline); label 0 or 1."""
        if not self.by_index:
            try:
                # Fast path: all values are strings, so every feature is `field=value` with x = 1.
                text = " ".join(map("=".join, example.items()))  # type: ignore[arg-type]
            except TypeError:
                pass
            else:
                # A space inside a name or value shows as one space too many.
                if text.count(" ") == len(example) - 1 and not _has_reserved(text):
                    return LABEL_PREFIX[label] + text
        return LABEL_PREFIX[label] + " ".join(
            self._token(name, x) for name, x in named_features(example).items()
        )

    def _token(self, name: str, x: float) -> str:
        if self.by_index:
            name = str(self._index_of(name))
        elif _SPECIAL.search(name):
            raise ValueError(f"feature {name!r} has a character VW's text format reserves")
        return name if x == 1.0 else f"{name}:{x!r}"

    def _index_of(self, name: str) -> int:
        index = self.index.get(name)
        if index is None:
            index = len(self.index) + 1
            if index >= CONSTANT_INDEX:
                raise ValueError(f"more than {CONSTANT_INDEX - 1} distinct features")
            self.index[name] = index
        return index

    def lines(self, rows: Iterable[tuple[Example, int]]) -> list[str]:
        """The VW lines of many ``(example, label)`` rows."""
        return [self.line(example, label) for example, label in rows]


def _has_reserved(text: str) -> bool:
    """Whether ``text`` holds a character VW's text format reserves, the space aside."""
    return "|" in text or ":" in text or "\t" in text or "\n" in text or "\r" in text


def workspace(arguments: Sequence[str]) -> Any:
    """A VW workspace with these options (imported here: VW is a benchmark/test dependency)."""
    from vowpalwabbit import Workspace

    return Workspace(arg_list=list(arguments))


def predict_then_learn(vw: Any, lines: Iterable[str]) -> NDArray[np.float64]:
    """VW's raw scores, each from ``predict`` called before ``learn`` on the same example."""
    scores = []
    for line in lines:
        example = vw.parse(line)
        scores.append(vw.predict(example))
        vw.learn(example)
        vw.finish_example(example)
    return np.array(scores, dtype=np.float64)


def learn_scores(vw: Any, lines: Iterable[str]) -> NDArray[np.float64]:
    """VW's raw scores as its ``learn`` computed them, before updating (progressive)."""
    scores = []
    for line in lines:
        example = vw.parse(line)
        vw.learn(example)
        scores.append(example.get_simplelabel_prediction())
        vw.finish_example(example)
    return np.array(scores, dtype=np.float64)


def average_loss(vw: Any) -> float:
    """VW's own progressive average loss over what it has learned so far."""
    return float(vw.get_sum_loss() / vw.get_weighted_examples())


def colliding_names(names: Iterable[str], bits: int) -> int:
    """How many of ``names`` share VW's hashed index with another name (or with the constant)."""
    vw = workspace([f"--bit_precision={bits}", "--quiet", "--sparse_weights"])
    namespace = vw.hash_space(" ")
    indexes = [vw.hash_feature(name, namespace) for name in names]
    vw.finish()
    counts: dict[int, int] = {}
    for index in [*indexes, CONSTANT_INDEX & ((1 << bits) - 1)]:
        counts[index] = counts.get(index, 0) + 1
    return sum(1 for index in indexes if counts[index] > 1)


@dataclass(frozen=True)
class Summary:
    """What a VW command-line run reports at its end."""

    examples: int
    average_loss: float


_SUMMARY = {
    "examples": re.compile(r"^number of examples = (\d+)$", re.MULTILINE),
    "average_loss": re.compile(r"^average loss = (\S+)$", re.MULTILINE),
}


def parse_summary(text: str) -> Summary:
    """Read the ``finished run`` block of VW's console output.

    >>> parse_summary("finished run\\nnumber of examples = 3\\naverage loss = 0.470788\\n")
    Summary(examples=3, average_loss=0.470788)
    """
    found = {key: pattern.search(text) for key, pattern in _SUMMARY.items()}
    missing = [key for key, match in found.items() if match is None]
    if missing:
        raise ValueError(f"VW output has no {', '.join(missing)} line")
    examples, loss = (match.group(1) for match in found.values() if match is not None)
    return Summary(examples=int(examples), average_loss=float(loss))


def write_lines(path: str | os.PathLike[str], lines: Iterable[str]) -> None:
    """Write VW text lines to a data file."""
    with open(path, "w", encoding="utf-8") as stream:
        for line in lines:
            stream.write(line)
            stream.write("\n")
