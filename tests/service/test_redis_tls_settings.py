"""The ``OCTR_REDIS_TLS_*`` settings: each file read when the settings are, a bad one named,
and what redis-py is given for a ``rediss://`` URL (and for no other)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from online_ctr.config.settings import Settings
from testkit.ports import free_port
from testkit.tls import Certificates

ROOT = Path(__file__).resolve().parents[2]
URL = "rediss://redis.internal:6380/0"


def test_a_rediss_url_gets_the_files_and_the_name_check(tls_certificates: Certificates) -> None:
    certs = tls_certificates
    settings = Settings(
        redis_url=URL,
        redis_tls_ca_file=certs.ca,
        redis_tls_cert_file=certs.client.cert,
        redis_tls_key_file=certs.client.key,
    )
    assert settings.redis_tls_options() == {
        "ssl_cert_reqs": "required",
        "ssl_ca_certs": str(certs.ca),
        "ssl_certfile": str(certs.client.cert),
        "ssl_keyfile": str(certs.client.key),
        "ssl_check_hostname": True,
    }
    bare = Settings(redis_url=URL, redis_tls_check_hostname=False).redis_tls_options()
    assert bare["ssl_ca_certs"] is None and bare["ssl_check_hostname"] is False
    # A plain URL's connections take no TLS arguments (redis-py would refuse them).
    assert Settings(redis_url="redis://redis:6379/0").redis_tls_options() == {}
    assert Settings().redis_tls_options() == {}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"redis_tls_ca_file": "missing.pem"}, "OCTR_REDIS_TLS_CA_FILE: cannot read .*missing"),
        ({"redis_tls_ca_file": "."}, "OCTR_REDIS_TLS_CA_FILE: cannot read .*: Is a directory"),
        ({"redis_tls_ca_file": "garbage.pem"}, "OCTR_REDIS_TLS_CA_FILE: .* holds no PEM"),
        ({"redis_tls_cert_file": "client.crt"}, "go together"),
        ({"redis_tls_key_file": "client.key"}, "go together"),
        (
            {"redis_tls_cert_file": "missing.crt", "redis_tls_key_file": "client.key"},
            "OCTR_REDIS_TLS_CERT_FILE: cannot read .*missing.crt",
        ),
        (
            {"redis_tls_cert_file": "client.crt", "redis_tls_key_file": "stranger.key"},
            "OCTR_REDIS_TLS_CERT_FILE, OCTR_REDIS_TLS_KEY_FILE: .* are not a PEM certificate "
            "and its private key",
        ),
    ],
)
def test_a_bad_file_is_named_by_its_variable(
    tls_certificates: Certificates, tmp_path: Path, files: dict[str, str], message: str
) -> None:
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    for name, path in (
        ("client.crt", tls_certificates.client.cert),
        ("client.key", tls_certificates.client.key),
        ("stranger.key", tls_certificates.stranger_client.key),
    ):
        (tmp_path / name).write_bytes(path.read_bytes())
    paths = {field: tmp_path / name for field, name in files.items()}
    with pytest.raises(ValueError, match=message):
        Settings(redis_url=URL, **paths)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["redis://redis:6379/0", "unix:///run/redis.sock"])
def test_tls_settings_with_a_url_without_tls_are_refused(
    tls_certificates: Certificates, url: str
) -> None:
    expected = re.escape("OCTR_REDIS_TLS_CA_FILE set, but OCTR_REDIS_URL is ") + ".*rediss://"
    with pytest.raises(ValueError, match=expected):
        Settings(redis_url=url, redis_tls_ca_file=tls_certificates.ca)
    with pytest.raises(ValueError, match="OCTR_REDIS_TLS_CHECK_HOSTNAME set"):
        Settings(redis_url=url, redis_tls_check_hostname=False)


@pytest.mark.processes
def test_a_command_names_a_missing_file_in_one_line(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    environment.update(
        PYTHONPATH=str(ROOT),
        OCTR_REDIS_URL=URL,
        OCTR_REDIS_TLS_CA_FILE=str(tmp_path / "ca.pem"),
    )
    for command in (["api"], ["worker"], ["models", "list"]):
        done = subprocess.run(
            [sys.executable, "-m", "online_ctr.cli.main", *command],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("online-ctr: invalid configuration: "), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert f"OCTR_REDIS_TLS_CA_FILE: cannot read {tmp_path / 'ca.pem'}" in done.stderr


@pytest.mark.processes
def test_serve_refuses_tls_settings_for_its_embedded_redis(
    tls_certificates: Certificates, tmp_path: Path
) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    environment.update(
        PYTHONPATH=str(ROOT),
        OCTR_DATA_DIR=str(tmp_path / "data"),
        OCTR_PORT=str(free_port()),
        OCTR_WORKER_METRICS_PORT=str(free_port()),
        OCTR_EMBEDDED_REDIS_PORT=str(free_port()),
        OCTR_REDIS_TLS_CA_FILE=str(tls_certificates.ca),
    )
    done = subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", "serve"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "online-ctr: OCTR_REDIS_TLS_CA_FILE set, but the embedded Redis speaks no TLS: set "
        "OCTR_REDIS_URL to a rediss:// Redis, or unset them\n"
    )
