"""The built documentation site's home page and the API's ``/docs`` (Swagger UI), opened in a
real headless Chromium: each renders its text, with no console error, offline (this machine
reaches no CDN; Swagger UI's files come from the API itself, the site's fonts are the
system's). The screenshots are left in ``build/screenshots/`` for a person to look at."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.docs.browser import browser, chromium, load
from tests.docs.conftest import ROOT, LocalServe, build_site

pytestmark = pytest.mark.processes

SHOTS = ROOT / "build" / "screenshots"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No line per request on the test's output."""


@pytest.fixture(scope="module")
def tab() -> Iterator[str]:
    executable = chromium()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; deploy/ci-install.sh installs it")
        pytest.skip("chromium is not installed; deploy/ci-install.sh installs it")
    with browser(executable) as url:
        yield url


@pytest.fixture
def site_url(tmp_path: Path) -> Iterator[str]:
    """The site, built now and served over HTTP as a host would (its search runs in a worker,
    which a file:// page may not start)."""
    done = build_site(tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    handler = functools.partial(_Quiet, directory=str(tmp_path / "site"))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}/"
        server.shutdown()


def save(name: str, png: bytes) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / name).write_bytes(png)


def test_the_site_home_page_renders(tab: str, site_url: str) -> None:
    page = load(tab, site_url, ready="What is in these pages")
    save("docs-home.png", page.png)
    for text in ("Real-time click-through-rate prediction", "Getting started", "Limits"):
        assert text in page.text
    assert page.errors == []
    assert len(page.png) > 20_000, "the screenshot is close to blank"


def test_the_api_docs_render_offline(tab: str, start_serve: Callable[[], LocalServe]) -> None:
    serve = start_serve()
    page = load(tab, f"{serve.api_url}/docs", ready="/predict")
    save("api-docs.png", page.png)
    for text in ("online-ctr", "/predict", "/learn", "/models/{name}", "Schemas"):
        assert text in page.text
    assert page.errors == []
    assert len(page.png) > 20_000, "the screenshot is close to blank"


def test_a_console_error_or_a_failed_load_is_seen(tab: str) -> None:
    # The check above means something only if errors reach it: a script error, a
    # console.error and a resource that cannot load (as a CDN unreachable offline).
    broken = (
        "data:text/html,<p>broken</p><script>console.error('boom'); missing()</script>"
        "<script src='http://127.0.0.1:9/swagger-ui-bundle.js'></script>"
    )
    page = load(tab, broken, ready="broken")
    assert page.text.strip() == "broken"
    assert any("boom" in e for e in page.errors), page.errors
    assert any("missing is not defined" in e for e in page.errors), page.errors
    assert any("Failed to load resource" in e for e in page.errors), page.errors
