"""Swagger UI (/docs) and ReDoc (/redoc) work offline: their pages reference only assets the app
serves itself, and OCTR_PROTECT_DOCS guards the pages and /openapi.json but not the assets."""

from __future__ import annotations

import warnings
from html.parser import HTMLParser

import pytest
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from service.api.auth import DOCS_ASSETS_URL
from service.app import create_app
from tests.service.keys import AUTH, PREDICT_KEY

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

#: The docs pages and the content types each referenced asset may have, by file extension.
PAGES = ("/docs", "/redoc")
CONTENT_TYPES = {
    ".js": ("text/javascript", "application/javascript"),
    ".css": ("text/css",),
    ".png": ("image/png",),
}
#: Smallest plausible size: the favicon is about 5 kB, the scripts and stylesheet 100 kB and more.
MIN_BYTES = {".js": 100_000, ".css": 100_000, ".png": 1_000}
NO_KEY = {"Authorization": ""}


class References(HTMLParser):
    """Every ``src`` and ``href`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def references(html: str) -> list[str]:
    parser = References()
    parser.feed(html)
    return parser.urls


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, **AUTH)


@pytest.mark.parametrize("page", PAGES)
def test_the_page_references_only_local_assets(client: TestClient, page: str) -> None:
    reply = client.get(page)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/html")
    urls = references(reply.text)
    assert any(url.endswith(".js") for url in urls), urls
    for url in urls:
        assert url.startswith(f"{DOCS_ASSETS_URL}/"), url
    assert "http://" not in reply.text
    assert "https://" not in reply.text


@pytest.mark.parametrize("page", PAGES)
def test_every_referenced_asset_is_served(client: TestClient, page: str) -> None:
    for url in references(client.get(page).text):
        reply = client.get(url, headers=NO_KEY)
        extension = url[url.rindex(".") :]
        assert reply.status_code == 200, url
        media_type = reply.headers["content-type"].split(";")[0]
        assert media_type in CONTENT_TYPES[extension], (url, media_type)
        assert len(reply.content) >= MIN_BYTES[extension], url


def test_the_assets_are_not_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith(("/docs", "/redoc"))]


def test_docs_are_open_by_default(client: TestClient) -> None:
    for path in (*PAGES, "/openapi.json", f"{DOCS_ASSETS_URL}/swagger-ui.css"):
        assert client.get(path, headers=NO_KEY).status_code == 200, path


def test_protected_docs_need_a_key_but_their_assets_do_not(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, protect_docs=True, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry())) as client:
        for path in (*PAGES, "/docs/oauth2-redirect", "/openapi.json"):
            assert client.get(path).status_code == 401, path
            reply = client.get(path, headers={"Authorization": f"Bearer {PREDICT_KEY}"})
            assert reply.status_code == 200, path
        # The assets are the same public files for every install and hold no data.
        for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
            assert client.get(f"{DOCS_ASSETS_URL}/{name}").status_code == 200, name
        assert client.get(f"{DOCS_ASSETS_URL}/missing.js").status_code == 404


def test_asset_requests_are_counted_under_the_mount(client: TestClient) -> None:
    client.get(f"{DOCS_ASSETS_URL}/swagger-ui.css")
    client.get(f"{DOCS_ASSETS_URL}/missing.js")
    metrics = client.get("/metrics").text
    series = 'online_ctr_http_requests_total{method="GET",route="/docs/assets",status_class="%s"}'
    assert f"{series % '2xx'} 1.0" in metrics
    assert f"{series % '4xx'} 1.0" in metrics
    assert "swagger-ui.css" not in metrics
