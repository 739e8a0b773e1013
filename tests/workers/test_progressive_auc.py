"""The AUC gauge is set at most once per interval, absent while undefined, dropped on forget."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from online_ctr.metrics import Metrics
from workers.auc import ProgressiveAuc


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def progressive_auc(clock: Clock) -> tuple[ProgressiveAuc, Metrics]:
    metrics = Metrics(CollectorRegistry())
    return ProgressiveAuc(metrics.progressive_auc, "m", 100, 1.0, clock), metrics


def value(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("online_ctr_progressive_auc", {"model": "m"})


def test_sets_the_gauge_at_most_once_per_interval() -> None:
    clock = Clock()
    auc, metrics = progressive_auc(clock)
    auc.add([0.9, 0.1], [1, 0])
    assert value(metrics) == 1.0  # the first AUC is published at once
    clock.now += 0.5
    auc.add([0.8, 0.2], [0, 1])
    assert value(metrics) == 1.0  # within the interval: not recomputed
    auc.publish()
    assert value(metrics) == 1.0
    clock.now += 0.5
    auc.publish()  # due, with pairs not published yet (an idle worker's call)
    assert value(metrics) == 0.75


def test_force_publishes_within_the_interval() -> None:
    clock = Clock()
    auc, metrics = progressive_auc(clock)
    auc.add([0.9, 0.1], [1, 0])
    auc.add([0.8, 0.2], [0, 1])
    auc.publish(force=True)
    assert value(metrics) == 0.75


def test_absent_while_one_class_only_and_after_forget() -> None:
    clock = Clock()
    auc, metrics = progressive_auc(clock)
    auc.add([0.3, 0.4], [0, 0])
    assert value(metrics) is None
    auc.add([0.9], [1])
    auc.publish(force=True)
    assert value(metrics) == 1.0
    auc.forget()
    assert value(metrics) is None
    assert len(auc.window) == 0
    auc.forget()  # twice: the series is already gone
    auc.publish(force=True)  # nothing new: nothing published
    assert value(metrics) is None
