"""The admin commands (``models``, ``export``, ``import``) find the local ``online-ctr serve``
by themselves, from its data directory's ``serve.json`` and password file; given a URL without
the password it needs, they name the setting to set, in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.ports import free_port
from tests.service.test_commands import ROOT, assert_one_line
from tests.service.test_status import environment, wait_healthy

pytestmark = pytest.mark.processes


def cli(data: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``online-ctr ARGV`` with ``data`` as OCTR_DATA_DIR and no Redis URL unless given."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    environment.update(PYTHONPATH=str(ROOT), OCTR_DATA_DIR=str(data), **env)
    return subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=data.parent,
        stdin=subprocess.DEVNULL,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def one_line(done: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert_one_line((done.returncode, done.stderr), *parts)


def start_serve(tmp_path: Path, data: Path) -> subprocess.Popen[bytes]:
    argv = ["serve", "--port", str(free_port()), "--data-dir", str(data), "--workers", "1",
            "--log-level", "warning"]  # fmt: skip
    env = {**environment(), "OCTR_EMBEDDED_REDIS_PORT": str(free_port()),
           "OCTR_WORKER_METRICS_PORT": str(free_port())}  # fmt: skip
    with (tmp_path / "serve.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "online_ctr.cli.main", *argv],
            env=env, cwd=tmp_path, stderr=log, start_new_session=True,
        )  # fmt: skip


def test_admin_commands_find_the_local_serve_and_name_the_password_setting(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    serve = start_serve(tmp_path, data)
    try:
        wait_healthy(data, serve, tmp_path / "serve.log")
        # No URL, no password: both come from the data directory.
        ok(cli(data, "models", "create", "m", "--rule", "ftrl"))
        ok(cli(data, "export", "m", "m.octr"))
        assert "imported m.octr as model 'copy'" in ok(cli(data, "import", "m.octr", "copy"))
        listed = json.loads(ok(cli(data, "models", "list", "--json")))["models"]
        names = [row["name"] for row in listed]
        assert {"m", "copy"} <= set(names)
        # The URL serve.json and `online-ctr status` print, without its password.
        url = json.loads((data / "serve.json").read_text())["redis_url"]
        password_file = str(data / "redis-password")
        for argv in (("models", "list"), ("export", "m", "x.octr"), ("import", "m.octr", "y")):
            one_line(
                cli(data, *argv, OCTR_REDIS_URL=url),
                f"Redis at {url} (OCTR_REDIS_URL) wants a password",
                "set OCTR_REDIS_PASSWORD_FILE",
                password_file,
            )
        assert not (tmp_path / "x.octr").exists()
        # With the password file, the URL works; with a wrong one, it says so.
        given = {"OCTR_REDIS_URL": url, "OCTR_REDIS_PASSWORD_FILE": password_file}
        assert "\nm " in ok(cli(data, "models", "list", **given))
        wrong = tmp_path / "wrong"
        wrong.write_text("not-it\n")
        refused = cli(data, "export", "m", "x.octr", "--redis-url", url,
                      OCTR_REDIS_PASSWORD_FILE=str(wrong))  # fmt: skip
        one_line(
            refused,
            f"Redis at {url} (--redis-url) refused the password",
            "fix OCTR_REDIS_PASSWORD_FILE",
        )
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(30) == 0
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
    # Serve stopped: the recorded Redis does not answer, and the line says where it came from.
    one_line(cli(data, "models", "list"), f"Redis at {url} ({data / 'serve.json'})",
             "is its `online-ctr serve` running?")  # fmt: skip


def test_without_a_url_or_a_serve_the_commands_name_the_settings(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for argv in (("models", "list"), ("export", "m", "m.octr"), ("import", "m.octr", "m")):
        one_line(
            cli(data, *argv),
            "no Redis: set OCTR_REDIS_URL (and OCTR_REDIS_PASSWORD_FILE",
            "run `online-ctr serve`",
            str(data / "serve.json"),
        )
