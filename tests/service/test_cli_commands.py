"""``online-ctr`` imports only the module of the sub-command it runs: the table that says which
module adds which sub-command is what the modules really register, and ``replay`` runs without
importing the service."""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from online_ctr.cli.main import COMMANDS, build_parser, main
from testkit.paths import ROOT
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


def test_a_small_replay_loads_only_what_it_runs(data_dir: Path, tmp_path: Path) -> None:
    """A replay of one row, the whole command in a fresh interpreter, under numba's JIT (as
    where no precompiled kernels are built, tests/core/test_precompiled.py): none of the
    service's modules, no SciPy (numba's two probes of it are skipped), no pyarrow (a small
    file is read row by row), and of the compiled code only what the exact learner runs: not
    the table's compaction (features never expire here), nor the rule's array update (no
    --minibatch)."""
    one = tmp_path / "one.tsv"
    with (data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv").open() as head:
        one.write_text(head.readline())
    probe = (
        "import contextlib, io, sys\n"
        "from online_ctr.cli.main import main\n"
        "from online_ctr.learning import precompiled\n"
        "with contextlib.redirect_stdout(io.StringIO()), precompiled.disabled():\n"
        f"    assert main(['replay', {str(one)!r}]) == 0\n"
        "from online_ctr.learning import kernels, table\n"
        "from online_ctr.learning.rules import get_rule\n"
        "ftrl = kernels.row_math(get_rule('ftrl'))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'service', 'workers', "
        "'fastapi', 'starlette', 'uvicorn', 'redis', 'prometheus_client', 'pydantic', "
        "'pydantic_settings', 'httpx', 'scipy', 'pyarrow'}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('online_ctr.store')))\n"
        "learner = kernels.learner(get_rule('ftrl'))\n"
        "print(*(len(k.dispatcher().overloads) for k in (learner, ftrl.weights, ftrl.update)),"
        " len(table._compact.overloads))\n"
    )
    assert fresh_python(probe).split("\n") == ["[]", "[]", "1 1 0 0", ""]


@pytest.mark.parametrize(
    ("command", "finalized"),
    [(["replay", "ONE"], False), (["replay", "ONE", "--limit", "1"], False), (["--help"], True)],
)
def test_the_batch_commands_exit_without_finalization(
    data_dir: Path, tmp_path: Path, command: list[str], finalized: bool
) -> None:
    """``online-ctr replay`` and ``train-batch`` end the process at once, their output
    flushed (an exit handler, which Python's finalization would run, never runs); the other
    commands exit as Python does."""
    one = tmp_path / "one.tsv"
    with (data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv").open() as head:
        one.write_text(head.readline())
    argv = [str(one) if part == "ONE" else part for part in command]
    probe = (
        "import atexit, sys\n"
        "from online_ctr.cli.main import entry\n"
        "atexit.register(lambda: print('finalized'))\n"
        f"sys.argv = ['online-ctr', *{argv!r}]\n"
        "entry()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (lines[-1] == "finalized") is finalized
    if command[0] == "replay":
        assert json.loads(lines[-1])["examples"] == 1  # flushed whole before the exit


def test_a_replay_leaves_the_collector_on(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replay holds off cyclic collection while it starts up, never after, nor when the
    start-up fails."""
    criteo = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    assert main(["replay", str(criteo), "--limit", "10"]) == 0
    assert gc.isenabled()
    assert main(["replay", str(criteo), "--encoding", "compact", "--rule", "rda"]) == 2
    assert gc.isenabled()
    capsys.readouterr()
