"""A serving API takes its start-up objects out of the garbage collector's sight once started
(full collections over them were its p99 latency); an app built by a test leaves the
collector alone. Each case runs in a fresh interpreter: a freeze lasts for the process."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import asyncio, gc, sys
from prometheus_client import CollectorRegistry
from online_ctr.config.settings import Settings
from service.app import create_app

async def main() -> None:
    settings = Settings(redis_url=sys.argv[1], auth="off")
    app = create_app(settings, CollectorRegistry(), freeze_gc=sys.argv[2] == "1")
    async with app.router.lifespan_context(app):
        print(gc.get_freeze_count())

asyncio.run(main())
"""


def frozen_after_startup(redis_url: str, freeze: bool) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, redis_url, "1" if freeze else "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(done.stdout.split()[-1])


def test_a_serving_app_freezes_its_start_up_objects(redis_url: str) -> None:
    # Tens of thousands: the modules, classes and functions of start-up.
    assert frozen_after_startup(redis_url, freeze=True) > 10_000


def test_an_app_built_by_a_test_leaves_the_collector_alone(redis_url: str) -> None:
    assert frozen_after_startup(redis_url, freeze=False) == 0
