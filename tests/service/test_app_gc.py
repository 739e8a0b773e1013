"""A serving API takes its start-up objects out of the garbage collector's sight once started
(full collections over them were its p99 latency) and collects its young generation less
often; an app built by a test leaves the collector alone. Each case runs in a fresh
interpreter: a freeze lasts for the process."""

from __future__ import annotations

import gc
import subprocess
import sys

from online_ctr.process import YOUNG_COLLECTION_EVERY

SCRIPT = """
import asyncio, gc, sys
from prometheus_client import CollectorRegistry
from online_ctr.config.settings import Settings
from service.app import create_app

async def main() -> None:
    settings = Settings(redis_url=sys.argv[1], auth="off")
    app = create_app(settings, CollectorRegistry(), freeze_gc=sys.argv[2] == "1")
    async with app.router.lifespan_context(app):
        print(gc.get_threshold()[0], gc.get_freeze_count())

asyncio.run(main())
"""


def collector_after_startup(redis_url: str, freeze: bool) -> tuple[int, int]:
    """The young generation's threshold and the objects frozen, once started up."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, redis_url, "1" if freeze else "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    threshold, frozen = done.stdout.split()[-2:]
    return int(threshold), int(frozen)


def test_a_serving_app_freezes_its_start_up_objects(redis_url: str) -> None:
    threshold, frozen = collector_after_startup(redis_url, freeze=True)
    # Tens of thousands: the modules, classes and functions of start-up.
    assert frozen > 10_000 and threshold == YOUNG_COLLECTION_EVERY


def test_an_app_built_by_a_test_leaves_the_collector_alone(redis_url: str) -> None:
    assert collector_after_startup(redis_url, freeze=False) == (gc.get_threshold()[0], 0)
