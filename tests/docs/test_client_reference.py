"""The Python client's reference page has a section for everything the client exports and
for every public method of both clients (the page itself is held current by test_site)."""

from __future__ import annotations

import re

import online_ctr.client
from online_ctr.client import AsyncClient, Client
from tools.client_reference import public_methods, signature
from tools.docs_reference import CLIENT_PAGE

#: Exported names that are type aliases, documented with the signatures that use them.
ALIASES = {"FeatureMap", "Features"}


def headings() -> set[str]:
    return set(re.findall(r"^#{2,3} (\S+)$", CLIENT_PAGE.read_text(), flags=re.MULTILINE))


def test_every_exported_name_has_its_section() -> None:
    missing = set(online_ctr.client.__all__) - ALIASES - headings()
    assert not missing, f"docs/reference/client.md has no section for {sorted(missing)}"


def test_every_method_is_there_with_its_signature() -> None:
    text = CLIENT_PAGE.read_text()
    for name in public_methods(Client):
        assert f"### Client.{name}" in text
        assert signature(name, getattr(Client, name)) in text
    # The asyncio twin has the same calls, as coroutines (aclose for close).
    twins = {"close" if name == "aclose" else name for name in public_methods(AsyncClient)}
    assert twins == set(public_methods(Client))
    assert "predict(features: FeatureMap, explain: bool = False, explain_top: int = 10, *, " in text
    assert "uncertainty: bool = False, model: str | None = None) -> Prediction" in text
