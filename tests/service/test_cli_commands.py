"""``online-ctr`` imports only the module of the sub-command it runs: the table that says which
module adds which sub-command is what the modules really register, and ``replay`` runs without
importing the service."""

from __future__ import annotations

import argparse

import pytest

from online_ctr.cli.main import COMMANDS, build_parser, main
from tests.conftest import fresh_python


def sub_commands(parser: argparse.ArgumentParser) -> set[str]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices)


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_each_module_adds_the_commands_the_table_names(module: str) -> None:
    for name in COMMANDS[module]:
        assert sub_commands(build_parser(name)) == set(COMMANDS[module])


def test_the_full_parser_has_every_command_once() -> None:
    every = [name for names in COMMANDS.values() for name in names]
    assert len(every) == len(set(every))
    assert sub_commands(build_parser()) == set(every)
    assert sub_commands(build_parser("no-such-command")) == set(every)


def test_a_typo_is_answered_with_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["replya"])
    assert done.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'replya'" in error and "'serve'" in error and "'replay'" in error


def test_replay_imports_neither_the_service_nor_numba_to_parse_its_arguments() -> None:
    """Nor numba: ``replay`` starts parsing the file before it imports numba and the kernels
    (``online_ctr.cli.replay_file``), so that the two overlap."""
    probe = (
        "import sys; from online_ctr.cli.main import build_parser; "
        "build_parser('replay').parse_args(['replay', 'x.tsv']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('service', 'workers', 'fastapi', 'redis', 'pydantic_settings', 'numba') "
        "or m.startswith('online_ctr.store')))"
    )
    assert fresh_python(probe).strip() == "[]"
