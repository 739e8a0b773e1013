"""The documentation site builds with no broken link, its generated reference pages are what
the code generates today, and README.md's relative links lead to files that exist."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.docs.conftest import build_site
from tools.docs_reference import API_PAGE, CLI_PAGE, CLIENT_PAGE, pages

ROOT = Path(__file__).resolve().parents[2]
#: A Markdown link or image: [text](target) or ![alt](target).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    # --strict fails on a link to a missing page or anchor and on a page left out of the nav.
    done = build_site(tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "getting-started" / "index.html").is_file()


@pytest.fixture(scope="module")
def generated() -> dict[Path, str]:
    """Each reference page as the code generates it now."""
    return pages()


@pytest.mark.parametrize("path", [API_PAGE, CLI_PAGE, CLIENT_PAGE], ids=lambda p: p.name)
def test_the_reference_pages_are_current(path: Path, generated: dict[Path, str]) -> None:
    assert path.read_text() == generated[path], (
        f"{path.relative_to(ROOT)} is stale: run `python -m tools.docs_reference`"
    )


def test_the_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    targets = [t for t in LINK.findall(text) if not urlsplit(t).scheme]
    assert targets, "the README links to the documentation"
    missing = [t for t in targets if not (ROOT / unquote(urlsplit(t).path)).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_readme_is_a_landing_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    assert [n for n, line in enumerate(lines, 1) if len(line) > 100] == []
