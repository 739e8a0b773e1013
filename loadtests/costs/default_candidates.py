"""What could replace the default model, on every shared click log, against issue 50's targets.

Each candidate learns each click log once in file order, every example predicted before it is
learned (progressive log loss, and ``sum(p) / sum(y)``). Candidates of two kinds:

- options the code has: ``online-ctr replay FILE`` with the flags shown (run in this process,
  the command's own ``main``), ``--calibration power`` scored on its calibrated predictions;
- changes to the learner it does not have, learned by the literal FTRL of
  :mod:`loadtests.costs.default_candidates_learner` (checked first to equal ``replay``'s log
  loss at the defaults on every log, to 1e-12 relative).

Beside them, per log: the running mean (``(clicks + 1/2) / (examples + 1)``) and Vowpal
Wabbit's default learner on the default's features (as ``make bench``'s quality section runs
it). The last column names the targets a candidate misses: below the mean on every log;
``sum(p) / sum(y)`` in [0.95, 1.05] on every log; at or below VW's default on each (it beats
FTRL only on the Avazu head); on the Criteo and Avazu heads within +0.05% of today's default.
Then the mechanism alone (:func:`~loadtests.costs.default_candidates_learner.one_feature`).

    .venv/bin/python -m loadtests.costs.default_candidates      # about 30 s
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.bench import baseline
from loadtests.bench.quality_logs_runs import LOGS, VW_DEFAULT, same_features, vw_probabilities
from loadtests.common.report import Cell, table
from loadtests.costs.default_candidates_learner import Variant, one_feature, progressive
from online_ctr.cli.main import main as online_ctr
from online_ctr.learning.detect import detect_format
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules.ftrl import FTRLParams
from online_ctr.learning.stream_metrics import StreamMetrics, log_loss
from testkit.paths import DATA_DIR

#: Each candidate: its name, and either ``replay``'s flags or a learner variant.
CANDIDATES: list[tuple[str, list[str] | Variant]] = [
    ("today's default (prior `mean`, alpha 0.1, beta 1, l1 1, l2 1)", []),
    ("`--base-rate off`", ["--base-rate", "off"]),
    ("`--base-rate decay:2000`", ["--base-rate", "decay:2000"]),
    ("`--beta 3`", ["--beta", "3"]),
    ("`--beta 10`", ["--beta", "10"]),
    ("`--l2 10`", ["--l2", "10"]),
    ("`--l1 0`", ["--l1", "0"]),
    ("`--alpha 0.01 --l1 3` (best of the grid on Open Bandit)", ["--alpha", "0.01", "--l1", "3"]),
    ("`--alpha 0.05 --beta 0.1 --l1 0`", ["--alpha", "0.05", "--beta", "0.1", "--l1", "0"]),
    ("`--calibration power --batch-size 512`, calibrated", ["--calibration", "power"]),
    ("bias never L1-truncated", Variant(bias_l1=0.0)),
    ("no bias feature: the prior is the intercept", Variant(no_bias=True)),
    ("residual-calibration offset, k = 1", Variant(residual=1.0)),
    ("L1 threshold + 1 x sqrt(n)", Variant(l1_per_root_n=1.0)),
]
#: The targets' bounds: sum(p) / sum(y), and the heads' allowed excess over today.
RATIO = (0.95, 1.05)
HEADS, EXCESS = ("criteo head10k", "avazu head10k"), 0.0005


def replay(path: Path, flags: Sequence[str]) -> dict[str, Any]:
    """The JSON ``online-ctr replay PATH FLAGS`` prints (its calibrated figures with
    ``--calibration``, refitted every 512 examples)."""
    if "--calibration" in flags:
        flags = [*flags, "--batch-size", "512"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = online_ctr(["replay", str(path), *flags])
    if status != 0:
        raise RuntimeError(f"online-ctr replay {path} {' '.join(flags)} exited {status}")
    answer: dict[str, Any] = json.loads(printed.getvalue().splitlines()[-1])
    return answer["calibrated"] if "--calibration" in flags else answer


def scores(p: Any, y: Any) -> tuple[float, float]:
    metrics = StreamMetrics()
    metrics.add(p, y, log_loss(p, y))
    return metrics.logloss, metrics.calibration


def measure(path: Path) -> tuple[tuple[float, float], float, list[tuple[float, float]]]:
    """The running mean's figures, VW default's log loss and every candidate's figures."""
    fmt = detect_format(path)
    rows = list(read_examples(path, fmt))
    hasher = FeatureHasher(numeric="log_bucket")
    batch = hasher.batch([x for x, _ in rows], [y for _, y in rows])
    y = batch.labels
    mean = scores(baseline.running_mean_probabilities(y), y)
    vw = scores(vw_probabilities(same_features(rows, "log_bucket"), VW_DEFAULT), y)[0]
    bias, params = hasher.bias_id % (1 << 64), FTRLParams()
    literal = scores(progressive(batch, bias, params, Variant()), y)[0]
    if abs(literal / replay(path, [])["logloss"] - 1.0) > 1e-12:
        raise RuntimeError(f"{path}: the literal learner is not the default model")
    out = []
    for _, how in CANDIDATES:
        if isinstance(how, Variant):
            out.append(scores(progressive(batch, bias, params, how), y))
        else:
            answer = replay(path, how)
            out.append((float(answer["logloss"]), float(answer["calibration"])))
    return mean, vw, out


def missed(figures: dict[str, tuple[float, float]], means: dict[str, float], vws: dict[str, float],
           today: dict[str, float]) -> str:  # fmt: skip
    """The targets a candidate's ``figures`` (log loss, ratio by log) miss, by log."""
    above = [name for name, (loss, _) in figures.items() if loss >= means[name]]
    off = [name for name, (_, ratio) in figures.items() if not RATIO[0] <= ratio <= RATIO[1]]
    vw = [name for name, (loss, _) in figures.items() if loss > vws[name] * (1 + 1e-6)]
    worse = [name for name in HEADS if figures[name][0] > today[name] * (1 + EXCESS)]
    parts = [("not below the mean", above), ("ratio outside [0.95, 1.05]", off)]
    parts += [("above VW default", vw), ("worse than today on", worse)]
    return "; ".join(f"{what}: {', '.join(names)}" for what, names in parts if names) or "none"


def report(measured: dict[str, Any]) -> str:
    means = {name: m[0][0] for name, m in measured.items()}
    vws = {name: m[1] for name, m in measured.items()}
    today = {name: m[2][0][0] for name, m in measured.items()}
    header = ["candidate", *measured, "targets missed"]
    cells: list[list[Any]] = [
        ["running mean", *(f"{m[0][0]:.6f} ({m[0][1]:.3f})" for m in measured.values()), ""],
        ["VW default learner", *(f"{vw:.6f}" for vw in vws.values()), ""],
    ]
    for c, (name, _) in enumerate(CANDIDATES):
        figures = {log: m[2][c] for log, m in measured.items()}
        cells.append([name, *(f"{ll:.6f} ({r:.3f})" for ll, r in figures.values())])
        cells[-1].append(missed(figures, means, vws, today))
    alone: list[list[Cell]] = [[f"{beta:g}", one_feature(beta)] for beta in (0.1, 1.0, 3.0, 10.0)]
    return "\n\n".join([table(header, cells), table(["beta", "sum(p) / sum(y)"], alone, 3)])


def main() -> None:
    print(report({name: measure(DATA_DIR / relative) for name, relative in LOGS.items()}))


if __name__ == "__main__":
    main()
