"""Readers of the public CTR click logs: each line becomes ``(example, label)``.

An example maps ``field -> value`` as :class:`online_ctr.learning.features.FeatureHasher` expects: a
string is the categorical feature ``field=value``, a float the numeric feature ``field``.
Empty fields are absent. Labels are the ints 0 and 1. Formats:

- ``criteo``: the Kaggle TSV (no header, ``label, I1..I13, C1..C26``) or the same columns as
  CSV with that header (DeepCTR's sample, counts written as ``260.0``), told apart by the first
  line. A count ``x`` becomes the categorical ``I{j}=b`` with ``b = floor(ln(x)^2)`` for
  ``x > 2`` and ``b = x`` for -2 to 2, as in the challenge's winning solution (team "3 Idiots",
  Juan et al.): counts are heavy-tailed, and the buckets grow ever wider. It is
  :func:`online_ctr.learning.numeric.log_bucket`, which the service applies to numeric values too.
- ``avazu``: the Kaggle CSV with its header; every column but ``id`` and ``click`` is
  categorical, with ``hour`` (``YYMMDDHH``) reduced to the hour of day.
- ``libfm``: ``label idx:val ...``, each token the numeric feature ``idx`` with ``x = val``.
- ``obd``: the Open Bandit Dataset's CSVs (a row an impression of ``item_id`` at ``position``,
  ``click`` its label); see :func:`_obd` for the features and the columns left out.

Readers are plain ``str.split`` and dict look-ups (a per-file cache of parsed values) because
they feed the throughput benchmark. A malformed line raises :class:`ReaderError` naming the
file, the 1-based line number and what is wrong.

>>> import tempfile
>>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
...     _ = f.write("1 3:1 17:0.5\\n")
>>> list(read_examples(f.name, "libfm"))
[({'3': 1.0, '17': 0.5}, 1)]
>>> os.remove(f.name)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from operator import itemgetter
from pathlib import Path
from typing import Generic, TypeVar

from online_ctr.learning.numeric import log_bucket

Value = str | float
Row = tuple[dict[str, Value], int]
LineParser = Callable[[str], Row]

FORMATS = ("criteo", "avazu", "libfm", "obd")

_LABELS = {"0": 0, "1": 1}
_CRITEO_INTEGERS = tuple(f"I{j}" for j in range(1, 14))
_CRITEO_CATEGORIES = tuple(f"C{j}" for j in range(1, 27))
CRITEO_COLUMNS = ("label", *_CRITEO_INTEGERS, *_CRITEO_CATEGORIES)
#: The Open Bandit Dataset's categorical columns kept as features, and its affinity columns'
#: prefix (one column per item: ``user-item_affinity_{item_id}``).
OBD_CATEGORIES = ("item_id", "position", *(f"user_feature_{j}" for j in range(4)))
OBD_AFFINITY = "user-item_affinity"

#: Value caches are dropped past this size: a bound on memory for files with endless distinct
#: values (Criteo's I5 is a count into the millions), not a tuning knob.
_CACHE_LIMIT = 1 << 16


class ReaderError(ValueError):
    """A line that does not fit its format, with where it is and what is wrong."""

    def __init__(self, path: str | os.PathLike[str], line: int, reason: str) -> None:
        super().__init__(f"{os.fspath(path)}, line {line}: {reason}")
        self.path = os.fspath(path)
        self.line = line
        self.reason = reason


class _Bad(ValueError):
    """What is wrong with one line; :func:`read_examples` adds the file and line number."""


def criteo_bucket(text: str) -> str:
    """The categorical value of a Criteo count: :func:`~online_ctr.learning.numeric.log_bucket`,
    which
    is ``floor(ln(x)^2)`` if ``x > 2`` and ``x`` itself for the counts -2 to 2.

    >>> [criteo_bucket(t) for t in ("-1", "2", "3", "1382", "260.0")]
    ['-1', '2', '1', '52', '30']
    """
    try:
        x = int(text)
    except ValueError:
        x = _integral_float(text)
    return str(log_bucket(x))


def _integral_float(text: str) -> int:
    """``int`` of a count written as a float (``260.0``), refusing anything fractional."""
    try:
        number = float(text)
    except ValueError:
        raise _Bad(f"count {text!r} is not an integer") from None
    if not number.is_integer():  # also refuses nan and inf
        raise _Bad(f"count {text!r} is not an integer")
    return int(number)


def avazu_hour(text: str) -> str:
    """The hour of day of an Avazu ``YYMMDDHH`` timestamp.

    >>> avazu_hour("14102107")
    '7'
    """
    if len(text) != 8 or not text.isdecimal() or int(text[6:]) > 23:
        raise _Bad(f"hour {text!r} is not YYMMDDHH")
    return str(int(text[6:]))


def libfm_value(text: str) -> float:
    """The finite number ``val`` of a libFM ``idx:val`` token.

    >>> libfm_value("1"), libfm_value("0.25")
    (1.0, 0.25)
    """
    try:
        x = float(text)
    except ValueError:
        raise _Bad(f"value {text!r} is not a number") from None
    if not math.isfinite(x):
        raise _Bad(f"value {text!r} is not finite")
    return x


_Parsed = TypeVar("_Parsed", str, float)


class _Cache(dict[str, _Parsed], Generic[_Parsed]):
    """``cache[text]`` is ``parse(text)``, computed once per distinct text (up to a bound)."""

    def __init__(self, parse: Callable[[str], _Parsed]) -> None:
        super().__init__()
        self._parse: Callable[[str], _Parsed] = parse

    def __missing__(self, text: str) -> _Parsed:
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        value = self._parse(text)
        self[text] = value
        return value


def _label(text: str) -> int:
    label = _LABELS.get(text)
    if label is None:
        raise _Bad(f"label must be 0 or 1, got {text!r}")
    return label


def _columns(fields: list[str], expected: int) -> None:
    if len(fields) != expected:
        raise _Bad(f"expected {expected} columns, got {len(fields)}")


def _criteo(first: str) -> tuple[LineParser, bool]:
    """The Criteo parser for a file starting with ``first``, and whether that is a header."""
    separator = "\t" if "\t" in first else ","
    header = first.split(separator, 1)[0] == "label"
    if header and tuple(first.split(separator)) != CRITEO_COLUMNS:
        raise _Bad("header is not label, I1..I13, C1..C26")
    buckets = _Cache(criteo_bucket)
    integers, categories = _CRITEO_INTEGERS, _CRITEO_CATEGORIES

    def parse(line: str) -> Row:
        fields = line.split(separator)
        _columns(fields, 40)
        example: dict[str, Value] = {
            name: buckets[raw] for name, raw in zip(integers, fields[1:14], strict=True) if raw
        }
        example.update(
            {name: raw for name, raw in zip(categories, fields[14:], strict=True) if raw}
        )
        return example, _label(fields[0])

    return parse, header


def _picker(kept: list[int]) -> Callable[[list[str]], tuple[str, ...]]:
    """``fields -> tuple(fields[j] for j in kept)``, fast when ``kept`` has 2 or more items."""
    if len(kept) > 1:
        return itemgetter(*kept)
    return lambda fields: tuple(fields[j] for j in kept)


def _avazu(first: str) -> tuple[LineParser, bool]:
    """The Avazu parser for a file whose header is ``first``."""
    header = first.split(",")
    if "click" not in header:
        raise _Bad("the header has no 'click' column")
    if "propensity_score" in header or not header[0]:  # the Open Bandit Dataset's CSVs
        raise _Bad("an Open Bandit Dataset CSV (propensity scores, a row index) is not Avazu")
    click, width = header.index("click"), len(header)
    kept = [j for j, name in enumerate(header) if name not in ("id", "click")]
    names = [header[j] for j in kept]
    pick = _picker(kept)
    hours = _Cache(avazu_hour)

    def parse(line: str) -> Row:
        fields = line.split(",")
        _columns(fields, width)
        label = _label(fields[click])
        example: dict[str, Value] = {
            name: v for name, v in zip(names, pick(fields), strict=True) if v
        }
        if "hour" in example:
            example["hour"] = hours[str(example["hour"])]
        return example, label

    return parse, True


def _libfm(first: str) -> tuple[LineParser, bool]:
    """The libFM parser (there is no header)."""
    values = _Cache(libfm_value)

    def parse(line: str) -> Row:
        tokens = line.split()
        if not tokens:
            raise _Bad("empty line")
        example: dict[str, Value] = {}
        for token in tokens[1:]:
            index, colon, text = token.partition(":")
            if not colon or not index.isdecimal():
                raise _Bad(f"token {token!r} is not idx:val")
            x = values[text]
            if index in example:  # a repeated index sums, as libFM reads it
                x += float(example[index])
            example[index] = x
        return example, _label(tokens[0])

    return parse, False


def _obd(first: str) -> tuple[LineParser, bool]:
    """The Open Bandit Dataset parser for a file whose header is ``first``.

    A row is an impression of ``item_id`` at ``position``, labelled by ``click``. Its
    features: ``item_id``, ``position`` and ``user_feature_0..3`` as categories, and the
    shown item's own affinity (the column ``user-item_affinity_{item_id}``) as the number
    ``user-item_affinity``, taken as every numeric value is (bucketed by default). Left out:
    the unnamed row index and the ``timestamp``, distinct on every row (a feature seen once
    learns nothing and only costs state), and ``propensity_score``, the logging policy's
    chance of showing the item: a property of the logger, not of the user or the item, which
    a served impression does not have (and a constant under the uniform random policy).
    """
    header = first.split(",")
    missing = [n for n in ("click", *OBD_CATEGORIES) if n not in header]
    if missing:
        raise _Bad(f"an Open Bandit Dataset header needs {', '.join(missing)}")
    click, item, width = header.index("click"), header.index("item_id"), len(header)
    kept = [header.index(name) for name in OBD_CATEGORIES]
    pick = _picker(kept)
    prefix = f"{OBD_AFFINITY}_"
    affinity = {n.removeprefix(prefix): j for j, n in enumerate(header) if n.startswith(prefix)}
    values = _Cache(libfm_value)

    def parse(line: str) -> Row:
        fields = line.split(",")
        _columns(fields, width)
        label = _label(fields[click])
        example: dict[str, Value] = {
            name: v for name, v in zip(OBD_CATEGORIES, pick(fields), strict=True) if v
        }
        column = affinity.get(fields[item])
        if column is None:
            raise _Bad(f"item_id {fields[item]!r} has no {prefix}{fields[item]} column")
        if fields[column]:
            example[OBD_AFFINITY] = values[fields[column]]
        return example, label

    return parse, True


_STARTS: dict[str, Callable[[str], tuple[LineParser, bool]]] = {
    "criteo": _criteo,
    "avazu": _avazu,
    "libfm": _libfm,
    "obd": _obd,
}


def read_examples(
    path: str | os.PathLike[str], fmt: str, limit: int | None = None
) -> Iterator[Row]:
    """Stream ``(example, label)`` from the file ``path`` in format ``fmt``, at most ``limit``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return _read(Path(path), _STARTS[fmt], limit)


def _read(
    path: Path, start: Callable[[str], tuple[LineParser, bool]], limit: int | None
) -> Iterator[Row]:
    """The generator behind :func:`read_examples` (its arguments are checked eagerly)."""
    remaining = -1 if limit is None else limit
    if remaining == 0:
        return
    parse: LineParser | None = None
    with path.open("rb") as stream:
        # Bytes decoded line by line, so an encoding error has an exact line number.
        for line, raw in enumerate(stream, start=1):
            try:
                text = raw.decode().rstrip("\r\n")
                if parse is None:
                    parse, header = start(text)
                    if header:
                        continue
                row = parse(text)
            except _Bad as bad:
                raise ReaderError(path, line, str(bad)) from None
            except UnicodeDecodeError as bad:
                raise ReaderError(path, line, f"not UTF-8 ({bad.reason})") from None
            yield row
            remaining -= 1
            if remaining == 0:
                return
