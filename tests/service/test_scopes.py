"""The scope strings of a key, alone: what each one reaches, and which are refused."""

from __future__ import annotations

import re

import pytest

from service.api.scopes import ALL, NOTHING, SCOPES, Grants


@pytest.mark.parametrize(
    ("texts", "scope", "name", "allowed"),
    [
        (["learn"], "learn", "anything", True),
        (["learn:*"], "learn", "anything", True),
        (["learn:ads-*"], "learn", "ads-1", True),
        (["learn:ads-*"], "learn", "ads", False),  # a prefix, not a name
        (["learn:ads-*"], "learn", "xads-1", False),
        (["learn:ads"], "learn", "ads", True),
        (["learn:ads"], "learn", "ads-1", False),  # a name, not a prefix
        (["learn:ads"], "predict", "ads", False),
        (["admin:ads-*"], "metrics", "ads-2", True),  # admin includes metrics
        (["admin:ads-*"], "metrics", "other", False),
        (["metrics"], "admin", "ads", False),
        (["learn:a", "learn:b*"], "learn", "bz", True),
    ],
)
def test_what_a_scope_reaches(texts: list[str], scope: str, name: str, allowed: bool) -> None:
    assert Grants.parse(texts).allows(scope, name) is allowed


def test_every_model_and_text_round_trip() -> None:
    grants = Grants.parse(["learn:b", "learn:a*", "predict:*", "learn:b"])
    assert grants.everywhere("predict") and not grants.everywhere("learn")
    assert grants.has("learn") and not grants.has("admin")
    assert grants.text() == ["learn:a*", "learn:b", "predict"]
    assert Grants.parse(grants.text()) == grants
    assert Grants.parse(["learn:a", "learn"]).everywhere("learn")  # the wider one wins


@pytest.mark.parametrize(
    "text", ["root", "learn:", "learn:a b", "learn:*a", "learn:-a", "learn:a**", "Learn", ""]
)
def test_a_bad_scope_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        Grants.parse([text])


def test_none_at_all_is_refused() -> None:
    with pytest.raises(ValueError, match="no scope given"):
        Grants.parse([])


def test_auth_off_reaches_all_and_no_key_nothing() -> None:
    assert all(ALL.everywhere(scope) for scope in SCOPES)
    assert not any(NOTHING.has(scope) for scope in SCOPES)
