"""Every runnable command block of the documentation runs as written, in order, against a
real ``online-ctr serve`` freshly started in a new directory, and prints what the page shows.

Two readers are followed, each from a fresh start: one who reads README.md's quickstart, and
one who reads the documentation site from its first page on (the pages in ``mkdocs.yml``'s
order). The only change to a command is its ports (8000, 9101, 6380), which are free ones
here. A shell variable a block sets (``KEY=...``) is set for every later command, as in the
reader's terminal.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.docs.blocks import MARK, Step, matches, page_steps
from tests.docs.conftest import ROOT, LocalServe

#: A command that only sets a variable (``KEY=$(...)``): its value is set for every later one.
_ASSIGNMENT = re.compile(r"^(export )?([A-Za-z_][A-Za-z0-9_]*)=")


def site_pages() -> list[Path]:
    """The site's pages in the order of its navigation."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def walk(items: list[object]) -> list[str]:
        pages: list[str] = []
        for item in items:
            for value in item.values() if isinstance(item, dict) else [item]:
                pages += walk(value) if isinstance(value, list) else [str(value)]
        return pages

    return [ROOT / "docs" / page for page in walk(config["nav"])]


def run_steps(serve: LocalServe, steps: list[Step], timeline: list[str]) -> None:
    """Run ``steps`` in ``serve``'s directory as a user's shell would, checking each output."""
    prelude: list[str] = []
    variables = serve.directory / ".variables"
    for step in steps:
        code = serve.on_these_ports(step.code)
        if step.language == "python":
            command = [str(serve.directory / ".venv" / "bin" / "python"), "-c", code]
        else:
            assigned = _ASSIGNMENT.match(code)
            # The value an assignment got, kept as the reader's shell keeps it (not run again).
            keep = f"\ndeclare -p {assigned.group(2)} >{variables}" if assigned else ""
            command = ["bash", "-c", "\n".join([*prelude, code]) + keep]
        began = time.monotonic()
        done = subprocess.run(
            command,
            cwd=serve.directory,
            env=serve.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        timeline.append(
            f"{began - serve.started:7.2f}s +{time.monotonic() - began:5.2f}s  "
            f"{step.code.splitlines()[0][:90]}\n"
            + "".join(f"{'':18}{line}\n" for line in done.stdout.splitlines()[:8])
        )
        where = f"`{step.code}`\nprinted:\n{done.stdout}\nserve's log:\n{serve.log()}"
        assert done.returncode == 0, f"exit status {done.returncode}: {where}"
        if step.expected:
            shown = [serve.on_these_ports(line) for line in step.expected]
            assert matches(shown, done.stdout), "shown:\n" + "\n".join(shown) + f"\n{where}"
        if step.language == "sh" and _ASSIGNMENT.match(code):
            prelude.append(variables.read_text())


@pytest.fixture
def curl() -> None:
    """The documentation's commands use curl, as its reader does."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed; the documentation's commands use it")


def runnable(pages: list[Path]) -> list[Step]:
    return [step for page in pages for step in page_steps(page)]


def test_the_readme_and_getting_started_mark_their_commands_runnable() -> None:
    readme = page_steps(ROOT / "README.md")
    assert any("/learn" in s.code for s in readme) and any("/predict" in s.code for s in readme)
    assert all(s.expected for s in readme if s.code.startswith("curl"))
    assert len(page_steps(ROOT / "docs" / "getting-started.md")) >= 20
    # Only pages of the site can be followed "in order"; a marked page off the nav never runs.
    marked = {p for p in (ROOT / "docs").rglob("*.md") if MARK in p.read_text()}
    assert marked <= set(site_pages())


@pytest.mark.usefixtures("curl")
def test_the_readme_quickstart_runs_as_written(
    start_serve: Callable[[], LocalServe], capsys: pytest.CaptureFixture[str]
) -> None:
    serve = start_serve()
    timeline = [f"{serve.ready_s:7.2f}s  /readyz answers 200\n"]
    run_steps(serve, page_steps(ROOT / "README.md"), timeline)
    with capsys.disabled():
        print("\nREADME quickstart, from a fresh serve:\n" + "".join(timeline))


@pytest.mark.usefixtures("curl")
def test_the_documentation_site_runs_as_written_in_order(
    start_serve: Callable[[], LocalServe], capsys: pytest.CaptureFixture[str]
) -> None:
    serve = start_serve()
    timeline = [f"{serve.ready_s:7.2f}s  /readyz answers 200\n"]
    run_steps(serve, runnable(site_pages()), timeline)
    with capsys.disabled():
        print("\nThe site's pages in order, from a fresh serve:\n" + "".join(timeline))
