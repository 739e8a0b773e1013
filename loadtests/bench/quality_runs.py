"""The runs behind the quality section: every rule on each data file, VW and River beside.

Every run replays one file in order at batch size 1 (each rule's exact sequential definition)
and scores each example before learning it (progressive validation). FTRL, VW ``--ftrl`` and
River's ``FTRLProximal`` share alpha 0.1, beta 1, l1 1, l2 1; beside them, per file, the
baseline that always predicts the running mean click rate (:mod:`loadtests.bench.baseline`). Each
rule's sparsity knob is swept over :data:`SWEEPS` (the other hyper-parameters fixed); the
``default`` of each sweep is the run the quality table shows. The sweep feeds the frontier
plot and :mod:`loadtests.bench.frontier`'s verdict on the seeds' claim. Runs are independent, so
they go to a small process pool.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.bench import _river, _vw, baseline
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import log_loss, sigmoid
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import BatchProgress, replay
from online_ctr.learning.rules import get_rule
from online_ctr.learning.stream_metrics import StreamMetrics

#: Dataset -> (file under the data folder, reader format).
DATASETS = {
    "criteo": ("criteo/criteo_kaggle_train_head10k.tsv", "criteo"),
    "avazu": ("avazu/avazu_train_head10k.csv", "avazu"),
    "ipinyou": ("ipinyou/ipinyou_train.fm.txt", "libfm"),
}

#: Rows per dataset with --quick (a full run reads each file whole).
QUICK_ROWS = 2000

#: Points recorded along the stream for the curves.
CURVE_POINTS = 100

FTRL_SETTINGS = {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}


@dataclass(frozen=True)
class Sweep:
    """A rule's sparsity knob, the values swept, the default shown in tables, the rest fixed."""

    knob: str
    values: tuple[float, ...]
    default: float
    fixed: dict[str, float] = field(default_factory=dict)

    def settings(self, value: float) -> dict[str, float]:
        return {**self.fixed, self.knob: value}

    def quick(self) -> tuple[float, ...]:
        """The ends of the range and the default: three runs instead of six."""
        return tuple(sorted({self.values[0], self.default, self.values[-1]}))


_RATE = {"alpha": 0.1, "beta": 1.0}
_GRAVITY = (3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2)

#: Per rule: the knob, its values and default, and the fixed hyper-parameters.
SWEEPS = {
    "ftrl": Sweep("l1", (0.1, 0.3, 1.0, 3.0, 10.0, 30.0), 1.0, {**_RATE, "l2": 1.0}),
    "rda": Sweep("l1", (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3), 1e-4, {"gamma": 1.0}),
    "fobos": Sweep("l1", _GRAVITY, 1e-4, dict(_RATE)),
    "tg": Sweep("l1", _GRAVITY, 1e-4, {**_RATE, "theta": math.inf, "k": 10}),
    "truncation": Sweep("theta", (1e-3, 3e-3, 1e-2, 2e-2, 4e-2, 8e-2), 1e-2, {**_RATE, "k": 10}),
    "l1sgd": Sweep("l1", (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3), 1e-3, dict(_RATE)),
}

#: The reference systems, run at :data:`FTRL_SETTINGS`.
REFERENCES = ("vw", "river")

#: The baseline every model must beat (:mod:`loadtests.bench.baseline`): it has no settings.
MEAN = "mean"

#: Every system by the name the report gives it.
NAMES = {
    "ftrl": "online-ctr FTRL-Proximal",
    "rda": "online-ctr L1-RDA",
    "fobos": "online-ctr L1-FOBOS",
    "tg": "online-ctr truncated gradient",
    "truncation": "online-ctr simple truncation",
    "l1sgd": "online-ctr L1-SGD",
    "vw": "Vowpal Wabbit --ftrl",
    "river": "River FTRLProximal",
    MEAN: "always predict the running mean CTR",
}


@dataclass(frozen=True)
class Job:
    """One replay to run: a dataset, a system (a rule, ``vw`` or ``river``), its settings."""

    dataset: str
    system: str
    settings: dict[str, float]
    path: Path
    fmt: str
    rows: int | None


@dataclass(frozen=True)
class Outcome:
    """One replay's progressive metrics, final sparsity, and curves along the stream."""

    job: Job
    examples: int
    logloss: float
    auc: float | None
    calibration: float | None
    nonzeros: int
    tracked: int
    checkpoints: tuple[int, ...]
    logloss_curve: tuple[float, ...]
    nonzero_curve: tuple[int, ...]


def jobs_for(data_dir: Path, quick: bool) -> list[Job]:
    """Every run of the section: the sweeps of every rule, then the references, per dataset."""
    rows = QUICK_ROWS if quick else None
    out = []
    for dataset, (relative, fmt) in DATASETS.items():
        path = data_dir / relative
        for rule, sweep in SWEEPS.items():
            for value in sweep.quick() if quick else sweep.values:
                out.append(Job(dataset, rule, sweep.settings(value), path, fmt, rows))
        out += [Job(dataset, name, FTRL_SETTINGS, path, fmt, rows) for name in REFERENCES]
        out.append(Job(dataset, MEAN, {}, path, fmt, rows))
    return out


@cache
def load(path: Path, fmt: str, rows: int | None) -> list[tuple[dict[str, str | float], int]]:
    """The first ``rows`` examples of a file (all with ``None``), parsed once per process."""
    return list(islice(read_examples(path, fmt), rows))


def checkpoint_every(examples: int) -> int:
    """Spacing of the curve points: about :data:`CURVE_POINTS` of them.

    >>> checkpoint_every(10_000), checkpoint_every(50)
    (100, 1)
    """
    return max(1, examples // CURVE_POINTS)


def run_job(job: Job) -> Outcome:
    """Run one job (in a worker process)."""
    rows = load(job.path, job.fmt, job.rows)
    if job.system == "vw":
        return _run_vw(job, rows)
    if job.system == "river":
        return _run_river(job, rows)
    if job.system == MEAN:
        labels = _labels(rows)
        # One number, the rate, plays the part of the weights.
        return _outcome(job, baseline.running_mean_probabilities(labels), labels, 1, 1)
    return _run_rule(job, rows)


def _run_rule(job: Job, rows: Sequence[tuple[dict[str, str | float], int]]) -> Outcome:
    rule = get_rule(job.system)
    model = InMemoryModel(rule, rule.params(**job.settings))
    every = checkpoint_every(len(rows))
    points: list[tuple[int, float, int]] = []

    def record(progress: BatchProgress) -> None:
        if progress.examples % every == 0:
            nonzeros = progress.model.nonzero_weights()
            points.append((progress.examples, progress.logloss, nonzeros))

    result = replay(rows, model, FeatureHasher(), batch_size=1, on_batch=record)
    checkpoints, losses, nonzeros = zip(*points, strict=True)
    return Outcome(
        job,
        result.examples,
        float(result.logloss or math.nan),
        result.auc,
        result.calibration,
        result.nonzero_weights,
        result.features_tracked,
        checkpoints,
        losses,
        nonzeros,
    )


def _outcome(job: Job, p: np.ndarray, labels: np.ndarray, nonzeros: int, tracked: int) -> Outcome:
    """An outcome from progressive probabilities (the references' curves have no sparsity)."""
    losses = log_loss(p, labels)
    metrics = StreamMetrics()
    metrics.add(p, labels, losses)
    report = metrics.report()
    every = checkpoint_every(len(p))
    checkpoints = np.arange(every, len(p) + 1, every)
    curve = np.cumsum(losses)[checkpoints - 1] / checkpoints
    return Outcome(
        job,
        len(p),
        metrics.logloss,
        report.auc,
        report.calibration,
        nonzeros,
        tracked,
        tuple(checkpoints.tolist()),
        tuple(curve.tolist()),
        (),
    )


def _labels(rows: Sequence[tuple[object, int]]) -> np.ndarray:
    return np.array([label for _, label in rows], dtype=np.float64)


def _run_vw(job: Job, rows: Sequence[tuple[dict[str, str | float], int]]) -> Outcome:
    """VW ``--ftrl`` with every feature name its own index (no hash collisions)."""
    s = job.settings
    encoder = _vw.TextEncoder(by_index=True)
    lines = encoder.lines(rows)
    vw = _vw.workspace(_vw.ftrl_arguments(s["alpha"], s["beta"], s["l1"], s["l2"]))
    scores = _vw.learn_scores(vw, lines)
    nonzeros, tracked = vw_nonzeros(vw, encoder.index.values())
    vw.finish()
    return _outcome(job, sigmoid(scores), _labels(rows), nonzeros, tracked)


def vw_nonzeros(vw: Any, indexes: Iterable[int]) -> tuple[int, int]:
    """VW's nonzero weights over our features' indexes and its constant, and how many slots."""
    namespace = vw.hash_space(" ")
    slots = [vw.hash_feature(str(i), namespace) for i in indexes]
    weights = [vw.get_weight(slot) for slot in [*slots, _vw.CONSTANT_INDEX]]
    return int(np.count_nonzero(weights)), len(weights)


def _run_river(job: Job, rows: Sequence[tuple[dict[str, str | float], int]]) -> Outcome:
    s = job.settings
    model = _river.ftrl_model(s["alpha"], s["beta"], s["l1"], s["l2"])
    p = _river.progressive_probabilities(model, rows)
    weights = model.weights
    nonzeros = sum(1 for w in weights.values() if w != 0)
    return _outcome(job, p, _labels(rows), nonzeros, len(weights))


def run_all(jobs: Sequence[Job], workers: int) -> list[Outcome]:
    """Run the jobs on ``workers`` processes, in order, telling stderr as each one ends."""
    out = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for done, outcome in enumerate(pool.map(run_job, jobs), start=1):
            j = outcome.job
            print(
                f"quality {done}/{len(jobs)}: {j.dataset} {j.system} {describe(j.settings)}: "
                f"log loss {outcome.logloss:.5f}, {outcome.nonzeros:,} nonzero",
                file=sys.stderr,
                flush=True,
            )
            out.append(outcome)
    return out


def describe(settings: dict[str, float]) -> str:
    """Hyper-parameters as ``name=value`` words.

    >>> describe({"alpha": 0.1, "l1": 1e-4, "theta": math.inf, "k": 10})
    'alpha=0.1 l1=0.0001 theta=inf k=10'
    """
    return " ".join(f"{name}={value:g}" for name, value in settings.items())
