"""The HTTP API reference is generated with API keys on: every operation that needs a key
names its scope and lists its 401 and 403 answers, as the API's authenticator decides them."""

from __future__ import annotations

import re

from service.api.auth import authenticator
from tools.docs_reference import API_PAGE, openapi_schema, reference_settings


def sections() -> dict[str, str]:
    """The page's operations by title (``POST `/predict```)."""
    parts = re.split(r"^### (.+)$", API_PAGE.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_operation_shows_the_scope_it_needs_and_its_refusals() -> None:
    auth = authenticator(reference_settings())
    assert auth is not None
    page, text = sections(), API_PAGE.read_text()
    protected = 0
    for path, operations in openapi_schema()["paths"].items():
        scope = auth.required(path)
        for method in operations:
            title = f"{method.upper()} `{path}`"
            statuses = set(re.findall(r"^\| (\d{3}) \|", page[title], flags=re.MULTILINE))
            if scope is None:
                assert f"| {title} | no key |" in text
                assert not {"401", "403"} & statuses, title
                continue
            protected += 1
            needs = f"the `{scope}` scope" if scope else "any API key"
            assert f"| {title} | {needs} |" in text, title
            assert {"401", "403"} <= statuses, title
    assert protected >= 10, "predict, learn and the models' operations need keys"
