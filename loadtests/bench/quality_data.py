"""The quality section's runs kept as JSON beside its figures (``docs/img/quality-runs.json``),
so that the figures can be drawn again (``python -m loadtests.bench.replot``) without replaying the
117 runs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.bench.quality_runs import Job, Outcome

NAME = "quality-runs.json"


def dump(outcomes: Sequence[Outcome]) -> str:
    """The runs as JSON, a run a line (Python's JSON: a theta of inf is ``Infinity``)."""
    rows = []
    for outcome in outcomes:
        row = dataclasses.asdict(outcome)
        row["job"]["path"] = str(outcome.job.path)
        rows.append(row)
    return "[\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]\n"


def parse(text: str) -> list[Outcome]:
    """The runs from :func:`dump`'s JSON.

    >>> job = Job("criteo", "tg", {"theta": float("inf")}, Path("d.tsv"), "criteo", None)
    >>> one = Outcome(job, 3, 0.5, None, 1.0, 2, 4, (1, 3), (0.6, 0.5), (1, 2))
    >>> parse(dump([one])) == [one]
    True
    """
    return [_outcome(row) for row in json.loads(text)]


def _outcome(row: dict[str, Any]) -> Outcome:
    job = Job(**{**row["job"], "path": Path(row["job"]["path"])})
    curves = {key: tuple(row[key]) for key in ("checkpoints", "logloss_curve", "nonzero_curve")}
    return Outcome(**{**row, **curves, "job": job})


def save(outcomes: Sequence[Outcome], img_dir: Path) -> Path:
    path = img_dir / NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(outcomes))
    return path


def load(img_dir: Path) -> list[Outcome]:
    return parse((img_dir / NAME).read_text())
