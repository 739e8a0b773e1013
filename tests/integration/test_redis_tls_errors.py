"""What TLS gets wrong, each said at once in one line that names the setting to change: the
real ``online-ctr api``, ``worker`` and ``models list`` against a real ``redis-server`` that
speaks only TLS (or none), with certificates the tests make.

``OCTR_REDIS_WAIT_S`` is 60 s in every case and each command must end well within it: these
are failures no wait mends, and a process that waited them out as a Redis restarting would
end with a line about Redis not answering, not about the certificate.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from online_ctr.cli.embedded import RedisServer
from testkit.ports import free_port
from testkit.tls import Certificates, TlsRedisServer

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
#: Well below OCTR_REDIS_WAIT_S: the command did not wait for Redis.
AT_ONCE_S = 30.0


def online_ctr(argv: list[str], tmp_path: Path, url: str, **env: str) -> tuple[int, str]:
    """Run ``online-ctr ARGV`` on the Redis of ``url`` to its end; its status and stderr."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    environment.update(
        PYTHONPATH=str(ROOT),
        OCTR_DATA_DIR=str(tmp_path / "data"),
        OCTR_AUTH="off",
        OCTR_PORT=str(free_port()),
        OCTR_WORKER_METRICS_PORT=str(free_port()),
        OCTR_REDIS_URL=url,
        OCTR_REDIS_WAIT_S="60",
        OCTR_REDIS_TIMEOUT_S="0.5",
    )
    environment.update(env)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=2 * AT_ONCE_S,
        cwd=tmp_path,
    )
    assert time.monotonic() - started < AT_ONCE_S, done.stderr
    return done.returncode, done.stderr


def assert_one_line(result: tuple[int, str], *parts: str) -> None:
    status, stderr = result
    assert status == 1, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("online-ctr: ") and "Traceback" not in stderr, stderr
    for part in parts:
        assert part in stderr, stderr


@pytest.fixture
def tls_redis(make_tls_redis: Callable[..., TlsRedisServer]) -> TlsRedisServer:
    return make_tls_redis()


@pytest.mark.parametrize("command", [["api"], ["worker"], ["models", "list"]])
def test_a_certificate_from_an_unknown_ca(
    tls_redis: TlsRedisServer, tls_certificates: Certificates, tmp_path: Path, command: list[str]
) -> None:
    ca = str(tls_certificates.stranger_ca)
    assert_one_line(
        online_ctr(command, tmp_path, tls_redis.url, OCTR_REDIS_TLS_CA_FILE=ca),
        f"Redis at 127.0.0.1:{tls_redis.port} (OCTR_REDIS_URL) has a certificate not signed by "
        f"a CA of OCTR_REDIS_TLS_CA_FILE ({ca}) (certificate verify failed: self-signed "
        "certificate in certificate chain): set OCTR_REDIS_TLS_CA_FILE to the CA certificate "
        "that signed it",
    )


def test_no_ca_file_and_a_ca_the_system_does_not_trust(
    tls_redis: TlsRedisServer, tmp_path: Path
) -> None:
    assert_one_line(
        online_ctr(["api"], tmp_path, tls_redis.url),
        "not signed by a CA this system trusts (OCTR_REDIS_TLS_CA_FILE is unset)",
        "set OCTR_REDIS_TLS_CA_FILE",
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_certificate_for_another_host(
    make_tls_redis: Callable[..., TlsRedisServer],
    tls_certificates: Certificates,
    tmp_path: Path,
    host: str,
) -> None:
    """A server whose certificate is for redis.example, reached as 127.0.0.1 or localhost;
    with the name check off it is let in (its CA still checked)."""
    server = make_tls_redis(server=tls_certificates.other_host)
    url = f"rediss://{host}:{server.port}/0"
    ca = {"OCTR_REDIS_TLS_CA_FILE": str(tls_certificates.ca)}
    assert_one_line(
        online_ctr(["worker"], tmp_path, url, **ca),
        f"has a certificate that is not for {host} (",
        "mismatch, certificate is not valid for",
        "connect by a name its certificate holds, or set OCTR_REDIS_TLS_CHECK_HOSTNAME=false",
    )
    unchecked = online_ctr(
        ["models", "list"], tmp_path, url, OCTR_REDIS_TLS_CHECK_HOSTNAME="false", **ca
    )
    assert unchecked[0] == 0, unchecked[1]


@pytest.mark.parametrize("command", [["api"], ["models", "list"]])
def test_a_plain_text_redis_at_a_rediss_url(
    make_redis_server: Callable[..., RedisServer],
    tls_certificates: Certificates,
    tmp_path: Path,
    command: list[str],
) -> None:
    plain = make_redis_server(persist=False)
    url = f"rediss://127.0.0.1:{plain.port}/0"
    assert_one_line(
        online_ctr(command, tmp_path, url, OCTR_REDIS_TLS_CA_FILE=str(tls_certificates.ca)),
        f"Redis at 127.0.0.1:{plain.port} (OCTR_REDIS_URL) speaks no TLS (it answers in plain "
        "text), but the URL is rediss://: write it redis://, or turn TLS on in the server",
    )


@pytest.mark.parametrize("command", [["worker"], ["models", "list"]])
def test_a_tls_redis_at_a_redis_url(
    tls_redis: TlsRedisServer, tmp_path: Path, command: list[str]
) -> None:
    url = f"redis://127.0.0.1:{tls_redis.port}/0"
    assert_one_line(
        online_ctr(command, tmp_path, url),
        f"Redis at 127.0.0.1:{tls_redis.port} (OCTR_REDIS_URL) speaks only TLS, but the URL is "
        "redis://: write it rediss://",
    )


@pytest.mark.parametrize("command", [["api"], ["models", "list"]])
def test_a_redis_that_requires_a_client_certificate(
    make_tls_redis: Callable[..., TlsRedisServer],
    tls_certificates: Certificates,
    tmp_path: Path,
    command: list[str],
) -> None:
    server = make_tls_redis(mutual=True)
    assert_one_line(
        online_ctr(command, tmp_path, server.url, **tls_certificates.settings()),
        "requires a client certificate (TLSV13_ALERT_CERTIFICATE_REQUIRED): set "
        "OCTR_REDIS_TLS_CERT_FILE and OCTR_REDIS_TLS_KEY_FILE",
    )
    stranger = tls_certificates.stranger_client
    assert_one_line(
        online_ctr(
            command,
            tmp_path,
            server.url,
            OCTR_REDIS_TLS_CA_FILE=str(tls_certificates.ca),
            OCTR_REDIS_TLS_CERT_FILE=str(stranger.cert),
            OCTR_REDIS_TLS_KEY_FILE=str(stranger.key),
        ),
        f"refused the client certificate of OCTR_REDIS_TLS_CERT_FILE ({stranger.cert}; "
        "TLSV1_ALERT_UNKNOWN_CA): use one signed by a CA the server trusts",
    )


def test_a_redis_that_is_not_there_is_still_waited_for(
    tls_certificates: Certificates, tmp_path: Path
) -> None:
    """No TLS trouble to find: the usual wait, then the usual line."""
    url = f"rediss://127.0.0.1:{free_port()}/0"
    result = online_ctr(
        ["worker"],
        tmp_path,
        url,
        OCTR_REDIS_TLS_CA_FILE=str(tls_certificates.ca),
        OCTR_REDIS_WAIT_S="1",
    )
    assert_one_line(result, "did not answer within 1s (OCTR_REDIS_WAIT_S; ConnectionError)")
