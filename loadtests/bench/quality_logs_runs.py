"""The runs behind the ``quality_logs`` section (:mod:`loadtests.bench.quality_logs`): on one click
log, the running mean, ``online-ctr replay FILE`` at its defaults, the sweep of the documented
grid (its best configuration in hindsight replayed alone, and what its group served), and
Vowpal Wabbit ``--ftrl`` and default on the default model's features.

The default, the best and the sweep run as the command itself (``python -m
online_ctr.cli.main replay``, from this checkout), so their rows follow the code's defaults;
the group's predictions are its configurations', learned with the command's own parser, model
and batches, and its log loss is checked against the sweep's JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.bench import _vw, baseline
from online_ctr.learning.learner import sigmoid
from online_ctr.learning.numeric import log_bucket
from online_ctr.learning.readers import Row, read_examples
from online_ctr.learning.stream_metrics import StreamMetrics, log_loss
from testkit.paths import ROOT

#: Every click log in the shared data folder, by the name the tables give it.
LOGS = {
    "criteo head10k": "criteo/criteo_kaggle_train_head10k.tsv",
    "criteo sample200": "criteo/criteo_deepctr_sample200.csv",
    "avazu head10k": "avazu/avazu_train_head10k.csv",
    "ipinyou": "ipinyou/ipinyou_train.fm.txt",
    "obd men": "obd/obd_random_men.csv",
    "obd women": "obd/obd_random_women.csv",
}

#: The sweep grid ``docs/concepts/replay.md`` documents (``--sweep
#: 'alpha=0.1,0.01,0.02,0.05;l1=1,0.1,3'``); :func:`grid_text` lists the default's values first.
GRID = {"alpha": (0.01, 0.02, 0.05, 0.1), "l1": (0.1, 1.0, 3.0)}

#: VW's default learner (adaptive, normalized, invariant SGD) with logistic loss, nothing else.
VW_DEFAULT = ["--loss_function=logistic", f"--bit_precision={_vw.INDEX_BITS}", "--holdout_off"]

#: The systems each log is measured with, in the tables' order.
MEAN, DEFAULT, BEST, GROUP, VW_FTRL, VW = "mean", "default", "best", "group", "vw-ftrl", "vw"


@dataclass(frozen=True)
class Scored:
    """One row: a system's progressive figures on one log (AUC and calibration may be
    undefined), and what it ran with."""

    system: str
    settings: str
    logloss: float
    auc: float | None
    calibration: float | None
    nonzeros: int | None = None


@dataclass(frozen=True)
class Measured:
    """One click log's rows, with what the group did."""

    name: str
    examples: int
    clicks: int
    rows: tuple[Scored, ...]
    timeline: str

    def by(self, system: str) -> Scored:
        return next(row for row in self.rows if row.system == system)


def replay_json(path: Path, *flags: str) -> dict[str, Any]:
    """The JSON of ``online-ctr replay PATH FLAGS...`` (stdout's last line), run from this
    checkout."""
    command = [sys.executable, "-m", "online_ctr.cli.main", "replay", str(path), *flags]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def grid_text(defaults: Mapping[str, float]) -> str:
    """:data:`GRID` as ``--sweep`` takes it, each hyper-parameter's default first (added if
    the grid lacks it), so that the group starts at the default.

    >>> grid_text({"alpha": 0.1, "l1": 2.0, "beta": 1.0})
    'alpha=0.1,0.01,0.02,0.05;l1=2,0.1,1,3'
    """
    parts = []
    for name, values in GRID.items():
        first = defaults[name]
        ordered = [first, *(value for value in values if value != first)]
        parts.append(f"{name}=" + ",".join(f"{value:g}" for value in ordered))
    return ";".join(parts)


def settings(params: Mapping[str, Any]) -> str:
    """Hyper-parameters as ``name=value`` words, in the JSON's order.

    >>> settings({"alpha": 0.1, "l1": 1.0})
    'alpha=0.1 l1=1'
    """
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def scored(system: str, p: np.ndarray, y: np.ndarray, text: str) -> Scored:
    """A row from progressive probabilities ``p`` and labels ``y``."""
    metrics = StreamMetrics()
    metrics.add(p, y, log_loss(p, y))
    report = metrics.report()
    return Scored(system, text, metrics.logloss, report.auc, report.calibration)


def from_json(system: str, answer: Mapping[str, Any]) -> Scored:
    """A row from a replay's JSON."""
    return Scored(
        system,
        settings(answer["params"]),
        float(answer["logloss"]),
        answer["auc"],
        answer["calibration"],
        int(answer["nonzero_weights"]),
    )


def same_features(rows: Sequence[Row], numeric: str) -> list[Row]:
    """The examples as the default model's hasher sees them: each number as the category of
    its bucket under ``log_bucket``, as is under ``raw``."""
    if numeric == "raw":
        return list(rows)
    return [
        ({k: v if isinstance(v, str) else str(log_bucket(v)) for k, v in x.items()}, label)
        for x, label in rows
    ]


def vw_probabilities(rows: Sequence[Row], arguments: Sequence[str]) -> np.ndarray:
    """VW's progressive predictions with ``arguments``, one index per feature name."""
    vw = _vw.workspace([*arguments, "--quiet"] if "--quiet" not in arguments else arguments)
    scores = _vw.learn_scores(vw, _vw.TextEncoder(by_index=True).lines(rows))
    vw.finish()
    return np.asarray(sigmoid(scores), dtype=np.float64)


def configuration_probabilities(path: Path, params: Mapping[str, Any], limit: int | None) -> Any:
    """One configuration's progressive predictions, learned as ``online-ctr replay`` learns it:
    the command's own parser (so its defaults), model and batches."""
    from online_ctr.cli import replay, replay_file
    from online_ctr.cli.args import resolve_format
    from online_ctr.cli.main import build_parser
    from online_ctr.learning.features import FeatureHasher
    from online_ctr.learning.rules import get_rule

    argv = ["replay", str(path), *([] if limit is None else ["--limit", str(limit)])]
    args = build_parser("replay").parse_args(argv)
    resolve_format(args)
    rule = get_rule(args.rule)
    model = replay_file.model(args, rule, replay.rule_params(rule, dict(params)))
    hasher = FeatureHasher(hash_bits=args.hash_bits, numeric=args.numeric)
    batches = replay_file.batches(args, hasher, None, replay.batch_size(args))
    return np.concatenate([model.learn(batch).probabilities for batch in batches])


def group_row(path: Path, sweep: Mapping[str, Any], limit: int | None) -> tuple[Scored, str]:
    """The group's row: what it served, each example predicted by the configuration serving
    then (its log loss checked against the sweep's own), and its timeline in words."""
    params = {c["name"]: c["params"] for c in sweep["configurations"]}
    timeline = sweep["timeline"]
    p = {e["name"]: configuration_probabilities(path, params[e["name"]], limit) for e in timeline}
    served = np.concatenate(
        [p[e["name"]][e["example"] : e["example"] + e["examples"]] for e in timeline]
    )
    y = labels(path, limit)
    row = scored(GROUP, served, y, f"served by {timeline[-1]['name']} at the end")
    if not np.isclose(row.logloss, sweep["served_logloss"], rtol=1e-9, atol=0.0):
        raise RuntimeError(f"{path}: served log loss {row.logloss} != {sweep['served_logloss']}")
    promotions = [f"`{e['name']}` from example {e['example']:,}" for e in timeline[1:]]
    return row, "; ".join(promotions) or f"no promotion (`{timeline[0]['name']}` throughout)"


def labels(path: Path, limit: int | None) -> np.ndarray:
    return np.array([y for _, y in read_examples(path, _format(path), limit)], dtype=np.float64)


def _format(path: Path) -> str:
    from online_ctr.learning.detect import detect_format

    return detect_format(path)


def measure(name: str, path: Path, limit: int | None) -> Measured:
    """Every row of one click log (run in a worker process)."""
    extra = [] if limit is None else ["--limit", str(limit)]
    default = replay_json(path, *extra)
    params, numeric = default["params"], default["numeric"]
    sweep = replay_json(path, "--sweep", grid_text(params), *extra)
    best_params = next(c for c in sweep["configurations"] if c["name"] == sweep["best"]["name"])
    chosen = [f"--{k}={best_params['params'][k]!r}" for k in GRID]
    best = from_json(BEST, replay_json(path, *chosen, *extra))
    if not np.isclose(best.logloss, sweep["best"]["logloss"], rtol=1e-9, atol=0.0):
        raise RuntimeError(f"{path}: the best replayed alone differs from the sweep's")
    group, timeline = group_row(path, sweep, limit)
    rows = list(read_examples(path, default["format"], limit))
    y = np.array([label for _, label in rows], dtype=np.float64)
    features = same_features(rows, numeric)
    alpha, beta, l1, l2 = (float(params[k]) for k in ("alpha", "beta", "l1", "l2"))
    ftrl = _vw.ftrl_arguments(alpha, beta, l1, l2)
    out = (
        scored(MEAN, baseline.running_mean_probabilities(y), y, "none"),
        from_json(DEFAULT, default),
        best,
        group,
        scored(VW_FTRL, vw_probabilities(features, ftrl), y, settings(params)),
        scored(VW, vw_probabilities(features, VW_DEFAULT), y, "adaptive normalized SGD"),
    )
    return Measured(name, len(y), int(y.sum()), out, timeline)
