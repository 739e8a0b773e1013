"""What ``OCTR_CALIBRATION=power`` does to calibration, on every click log in the shared data.

For each file: one progressive replay (each example predicted before it is learned) with the
calibration on, as the service's learner runs it; the raw predictions are the model's, the
calibrated ones are each example's raw prediction through the fit made before its batch
(refitted after every ``--batch-size`` examples, as the learner refits at every commit).
Calibration never changes what the model learns, so one run gives both columns. Printed per
file, before and after: the expected/observed click ratio (``sum p / sum y``), the expected
calibration error (ECE: predictions sorted and cut into 10 bins of equal count,
``sum_bins |sum p - sum y| / N``) and the progressive log loss; and the time one refit of the
final histogram takes (what the learner adds to each commit; wall clock, so noisy).

    .venv/bin/python -m loadtests.costs.calibration                 # FTRL at its defaults
    .venv/bin/python -m loadtests.costs.calibration --rule rda --batch-size 1000

Each Open Bandit Dataset row is read here as the example ``item_id, position,
user_feature_0..3`` (categories) with ``click`` as its label: the figures the README shows,
measured before ``replay``'s ``obd`` format, which adds the shown item's affinity. The iPinYou
dictionary and the Open Bandit item tables are not click logs and are skipped.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from loadtests.common.report import table
from online_ctr.learning.detect import detect_format
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import log_loss
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import Row, read_examples
from online_ctr.learning.rules import RULES, get_rule
from testkit.paths import DATA_DIR

Array = NDArray[np.float64]
#: The click logs, by path under the data folder; None: told from the file.
FILES: dict[str, str | None] = {
    "criteo/criteo_kaggle_train_head10k.tsv": None,
    "criteo/criteo_deepctr_sample200.csv": None,
    "avazu/avazu_train_head10k.csv": None,
    "ipinyou/ipinyou_train.fm.txt": None,
    "obd/obd_random_men.csv": "obd",
    "obd/obd_random_women.csv": "obd",
}
#: Refits of the final histogram timed (what the learner pays per commit), averaged.
REFITS_TIMED = 50
OBD_FIELDS = ("item_id", "position", "user_feature_0", "user_feature_1", "user_feature_2")
OBD_FIELDS += ("user_feature_3",)


def ece(p: Array, y: Array, bins: int = 10) -> float:
    """Expected calibration error over ``bins`` equal-count bins of sorted predictions.

    >>> round(ece(np.array([0.1, 0.1, 0.9, 0.9]), np.array([0.0, 0.0, 1.0, 1.0]), bins=2), 12)
    0.1
    """
    order = np.argsort(p, kind="stable")
    parts = np.array_split(order, bins)
    return float(sum(abs(p[part].sum() - y[part].sum()) for part in parts) / len(p))


@dataclass(frozen=True)
class Scores:
    """One set of progressive predictions' calibration figures."""

    ratio: float
    ece: float
    logloss: float

    @classmethod
    def of(cls, p: Array, y: Array) -> Scores:
        return cls(float(p.sum() / y.sum()), ece(p, y), float(log_loss(p, y).mean()))


@dataclass(frozen=True)
class Measured:
    """A file's examples, clicks, the scores before and after, and the final fit."""

    name: str
    examples: int
    clicks: int
    raw: Scores
    calibrated: Scores
    gamma: float
    kappa: float
    refit_ms: float


def obd_rows(path: Path) -> Iterator[Row]:
    """The Open Bandit Dataset's CSV as examples (see the module doc)."""
    with path.open(newline="") as stream:
        for record in csv.DictReader(stream):
            yield {name: record[name] for name in OBD_FIELDS}, int(record["click"])


def rows_of(path: Path, fmt: str | None) -> Iterator[Row]:
    if fmt == "obd":
        return obd_rows(path)
    return read_examples(path, detect_format(path))


def measure(path: Path, fmt: str | None, rule: str, batch_size: int) -> Measured:
    """Replay one file with the calibration on (see the module doc)."""
    model = InMemoryModel(get_rule(rule), calibration="power")
    calibration = model.calibration
    assert calibration is not None
    hasher = FeatureHasher(numeric="log_bucket")
    raw_p, served, labels = [], [], []
    rows = rows_of(path, fmt)
    while chunk := list(itertools.islice(rows, batch_size)):
        batch = hasher.batch([x for x, _ in chunk], [y for _, y in chunk])
        fit = calibration.fit  # what /predict would serve while this batch is learned
        raw_p.append(model.learn(batch).probabilities)
        served.append(fit.apply(raw_p[-1]))
        labels.append(batch.labels)
    p, q, y = np.concatenate(raw_p), np.concatenate(served), np.concatenate(labels)
    started = time.perf_counter()
    for _ in range(REFITS_TIMED):
        calibration.histogram.fit()
    refit_ms = (time.perf_counter() - started) / REFITS_TIMED * 1e3
    return Measured(
        name=path.name,
        examples=len(p),
        clicks=int(y.sum()),
        raw=Scores.of(p, y),
        calibrated=Scores.of(q, y),
        gamma=calibration.fit.gamma,
        kappa=calibration.fit.kappa,
        refit_ms=refit_ms,
    )


def report(results: list[Measured]) -> str:
    header = ["file", "examples", "clicks", "ratio raw", "ratio cal.", "ECE raw", "ECE cal."]
    header += ["log loss raw", "log loss cal.", "gamma", "kappa", "refit ms"]
    rows = [
        [
            m.name,
            m.examples,
            m.clicks,
            m.raw.ratio,
            m.calibrated.ratio,
            m.raw.ece,
            m.calibrated.ece,
            m.raw.logloss,
            m.calibrated.logloss,
            m.gamma,
            m.kappa,
            m.refit_ms,
        ]
        for m in results
    ]
    return table(header, rows, digits=4)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rule", default="ftrl", choices=sorted(RULES))
    parser.add_argument("--batch-size", type=int, default=100, help="examples per refit")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    results = [
        measure(args.data_dir / name, fmt, args.rule, args.batch_size)
        for name, fmt in FILES.items()
    ]
    print(report(results))


if __name__ == "__main__":
    main()
