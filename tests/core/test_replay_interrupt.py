"""Ctrl-C stops a long ``replay`` or ``train-batch`` with one line and status 130, wherever it
lands once the command runs: in its imports, in Python, or in the compiled loop (where numba
re-raises it as a ``SystemError``, and the user saw both tracebacks). Before, in the
interpreter's own start-up (its first ~50 ms), Python answers it itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from online_ctr.cli.main import interrupted

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
HEAD = "criteo/criteo_kaggle_train_head10k.tsv"


def wait_catching_sigint(pid: int) -> None:
    """Until the process's Python handles SIGINT (before, the signal would kill it, as any
    process that has not started yet): its bit in the caught signals of /proc/PID/status."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(
            next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16
        )
        if caught & (1 << (signal.SIGINT - 1)):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} never handled SIGINT")


@pytest.mark.parametrize(
    ("command", "after_s"),
    [
        (["replay", "--passes", "1000"], 1.0),
        (["replay", "--passes", "1000"], 3.0),  # learning, most of it in the compiled loop
        (["train-batch", "--l1", "1", "--max-iter", "100000", "--tol", "0"], 3.0),
    ],
)
def test_ctrl_c_is_one_line_and_status_130(
    data_dir: Path, command: list[str], after_s: float
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = subprocess.Popen(
        [sys.executable, "-m", "online_ctr.cli.main", *command, str(data_dir / HEAD)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_catching_sigint(started.pid)
    time.sleep(after_s)
    started.send_signal(signal.SIGINT)
    out, err = started.communicate(timeout=60)
    assert started.returncode == 130, err
    assert (
        err.strip()
        == f"online-ctr {command[0]}: error: stopped by Ctrl-C (SIGINT) before it finished"
    )
    assert out == ""


def test_a_system_error_caused_by_ctrl_c_is_an_interruption_and_no_other_is() -> None:
    def raised(cause: BaseException | None) -> SystemError:
        try:
            raise SystemError("returned a result with an exception set") from cause
        except SystemError as error:
            return error

    assert interrupted(KeyboardInterrupt())
    assert interrupted(raised(raised(KeyboardInterrupt())))
    assert not interrupted(raised(None))
    assert not interrupted(raised(ValueError("a bug")))


CALLBACK_SCRIPT = """
import ctypes, os, signal, sys
from online_ctr.cli.main import stop_at_once_on_ctrl_c
if sys.argv[1] == "1":
    stop_at_once_on_ctrl_c("replay")

@ctypes.CFUNCTYPE(None)
def inside() -> None:  # as numba's loading of compiled code calls back into Python
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(100_000):  # the handler runs here, between two instructions
        pass

inside()
print("went on")
"""


@pytest.mark.parametrize("at_once", [True, False])
def test_ctrl_c_inside_a_ctypes_callback_stops_a_batch_command(at_once: bool) -> None:
    """A KeyboardInterrupt raised in a ctypes callback is printed as ignored and lost; the
    batch commands' handler ends the process there instead. Without it (Python's own), the
    program went on: what a replay interrupted as numba loaded its kernels did."""
    done = subprocess.run(
        [sys.executable, "-c", CALLBACK_SCRIPT, "1" if at_once else "0"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    if at_once:
        assert done.returncode == 130 and done.stdout == ""
        assert done.stderr == (
            "online-ctr replay: error: stopped by Ctrl-C (SIGINT) before it finished\n"
        )
    else:
        assert done.returncode == 0 and done.stdout == "went on\n"
        assert "KeyboardInterrupt" in done.stderr
