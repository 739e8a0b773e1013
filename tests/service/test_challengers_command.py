"""``online-ctr models sweep|promotion``, run as commands against a real Redis: the same
operations as ``/groups/{name}/sweep|promotion``, one line and status 2 for a mistake in the
command line, 1 for a refusal."""

from __future__ import annotations

import pytest

from tests.service.test_models_command import listing, models, ok, refused

GRID = ("--alpha", "0.05,0.1", "--l1", "0.1,1")


def test_a_sweep_creates_the_grid_and_its_policy(redis_url: str) -> None:
    out = ok(models(redis_url, "sweep", "ctr", *GRID, "--promote", "--margin", "0.002"))
    names = [
        "ctr-alpha_0.05-l1_0.1",
        "ctr-alpha_0.05-l1_1",
        "ctr-alpha_0.1-l1_0.1",
        "ctr-alpha_0.1-l1_1",
    ]
    assert out.splitlines()[:4] == [f"created {n}" for n in names]
    assert "group 'ctr' promotes by itself: margin 0.002, confidence 0.95" in out
    [group] = listing(redis_url)["groups"]
    assert group["models"] == names and group["promotion"]["margin"] == 0.002
    again = ok(models(redis_url, "sweep", "ctr", *GRID))
    assert again.splitlines() == [f"exists  {n}" for n in names]


def test_promotion_shows_sets_and_removes_the_policy(redis_url: str) -> None:
    ok(models(redis_url, "sweep", "ctr", "--alpha", "0.05,0.1"))
    assert "promotion: off" in ok(models(redis_url, "promotion", "ctr"))
    out = ok(models(redis_url, "promotion", "ctr", "--confidence", "0.99"))
    assert "promotion: margin 0.001, confidence 0.99" in out
    assert "challenger\tpaired examples" in out
    assert "promotion: off" in ok(models(redis_url, "promotion", "ctr", "--off"))


@pytest.mark.parametrize(
    ("argv", "parts"),
    [
        (("sweep", "ctr"), ("give the values to sweep",)),
        (("sweep", "ctr", "--alpha", "0.1,x"), ("--alpha", "numbers separated by commas")),
        (("sweep", "ctr", "--alpha", "0.1,nan"), ("--alpha", "finite")),
        (("sweep", "ctr", "--alpha", "-1"), ("alpha=-1 is invalid", "alpha must be > 0")),
        (("promotion", "ctr", "--confidence", "2"), ("--confidence", "less than 1")),
        (("promotion", "ctr", "--off", "--margin", "0.1"), ("--off", "no policy options")),
    ],
)
def test_a_mistake_is_one_line_and_status_2(
    redis_url: str, argv: tuple[str, ...], parts: tuple[str, ...]
) -> None:
    refused(models(redis_url, *argv), 2, *parts)
    assert listing(redis_url)["groups"] == []


def test_a_refusal_is_one_line_and_status_1(redis_url: str) -> None:
    refused(models(redis_url, "promotion", "nothing"), 1, "no group 'nothing'")
    ok(models(redis_url, "create", "solo", "--rule", "ftrl"))
    refused(models(redis_url, "promotion", "solo", "--margin", "0.1"), 1, "is a model, not a group")
    many = ",".join(str(v) for v in range(1, 66))
    refused(models(redis_url, "sweep", "ctr", "--alpha", many), 2, "at most 64")
