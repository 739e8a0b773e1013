"""The command-line reference has a section for every command and sub-command the parsers
define: found here from each parser's own ``--help`` (its ``{a,b,...}`` of sub-commands), not
from the generator's list, so a command the generator missed fails this test."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from online_ctr.cli.main import build_parser
from tools.docs_reference import CLI_PAGE, commands

#: A parser's sub-commands, as its help lists them under "positional arguments".
CHOICES = re.compile(r"positional arguments:\n\s+\{([^}]+)\}")


def from_help(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every command under ``parser`` (prefixed by ``path``), depth first."""
    found = CHOICES.search(parser.format_help())
    if found is None:
        return
    for name in found.group(1).split(","):
        yield (*path, name)
        yield from from_help(_child(parser, name), (*path, name))


def _child(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            child: argparse.ArgumentParser = action.choices[name]
            return child
    raise AssertionError(f"{name} is in the help but has no parser")


def sections() -> dict[str, str]:
    """The page's sections by title (``online-ctr models weights``)."""
    text = CLI_PAGE.read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_command_and_sub_command_has_its_section() -> None:
    expected = list(from_help(build_parser()))
    assert ("models", "weights") in expected and ("models", "sweep") in expected
    assert ("models", "promotion") in expected
    page = sections()
    for path in expected:
        title = " ".join(("online-ctr", *path))
        assert title in page, f"docs/reference/cli.md has no section for `{title}`"
        assert f"usage: {title}" in page[title]


def test_the_generator_walks_the_same_commands() -> None:
    assert sorted(command for command, _ in commands(build_parser())) == sorted(
        from_help(build_parser())
    )
