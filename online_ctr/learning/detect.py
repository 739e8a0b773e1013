"""Which click-log format a file is in, told from its first line (see
:mod:`online_ctr.learning.readers`).

- ``criteo``: 40 tab-separated columns starting with a 0/1 label (the Kaggle TSV), or the CSV
  header ``label,I1..I13,C1..C26``;
- ``avazu``: a CSV header starting ``id,click,``;
- ``libfm``: a 0/1 label followed by ``idx:val`` tokens;
- ``obd``: the Open Bandit Dataset's CSV header, an unnamed row index first, then
  ``timestamp,item_id,position,click,propensity_score,...``.

Anything else is refused with a :class:`FormatError` saying why, in particular the Open
Bandit Dataset's item tables (``*_item_context.csv``: one row per item, no clicks).

>>> detect_first_line("0 3:1 17:0.5")
'libfm'
>>> detect_first_line("id,click,hour,C1")
'avazu'
>>> detect_first_line(",timestamp,item_id,position,click,propensity_score,user_feature_0")
'obd'
"""

from __future__ import annotations

import os
import re

#: A libFM line: a 0/1 label, then one or more ``idx:val`` tokens.
_LIBFM = re.compile(r"[01](?:\s+\d+:\S+)+\s*")
_CRITEO_HEADER = ",".join(
    ("label", *(f"I{j}" for j in range(1, 14)), *(f"C{j}" for j in range(1, 27)))
)


class FormatError(ValueError):
    """A file whose format cannot be told, with what it looks like."""


def detect_first_line(first: str) -> str:
    """The format of a file whose first line is ``first``; :class:`FormatError` if none fits."""
    if first.split("\t")[0] in ("0", "1") and len(first.split("\t")) == 40:
        return "criteo"
    if first == _CRITEO_HEADER:
        return "criteo"
    header = first.split(",")
    if not header[0] and {"item_id", "click", "position"} <= set(header):
        return "obd"
    if not header[0] and "item_id" in header:
        raise FormatError(
            "this is an Open Bandit Dataset item table (features of each item, no clicks), not "
            "a click log; replay the impressions file beside it (obd_random_men.csv, ...)"
        )
    if header[:2] == ["id", "click"]:
        return "avazu"
    if _LIBFM.fullmatch(first):
        return "libfm"
    shown = first if len(first) <= 60 else first[:57] + "..."
    raise FormatError(
        f"the first line ({shown!r}) matches no known format (criteo TSV or CSV with its "
        "header, avazu CSV with its header, libfm 'label idx:val ...', the Open Bandit "
        "Dataset's CSV with its header); pass --format to force one"
    )


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of the file at ``path``, from its first line."""
    with open(path, "rb") as stream:
        first = stream.readline().decode(errors="replace").rstrip("\r\n")
    try:
        return detect_first_line(first)
    except FormatError as error:
        raise FormatError(f"{os.fspath(path)}: {error}") from None
