"""TLS for the tests: certificates made with the ``openssl`` command, and a Redis that speaks
only TLS (``--port 0 --tls-port P``), as a managed Redis does.

Every certificate is made afresh per test session, valid for a day, with elliptic-curve keys:
a CA, a server certificate it signed for ``localhost`` and ``127.0.0.1``, a client certificate
it signed (for mutual TLS), a server certificate for another host (``redis.example``), and a
second CA that signed nothing the servers trust, with a client certificate of its own.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from online_ctr.cli.embedded import RedisServer

#: The host names and addresses the servers' certificate is for.
SERVER_NAMES = "DNS:localhost,IP:127.0.0.1"


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    """What :func:`make_certificates` made."""

    ca: Path
    server: Pair
    client: Pair
    #: A server certificate the CA signed for ``redis.example`` only.
    other_host: Pair
    #: A CA no server trusts, and a client certificate it signed.
    stranger_ca: Path
    stranger_client: Pair

    def client_options(self) -> dict[str, Any]:
        """redis-py's arguments for a client that trusts the CA and shows the client
        certificate (so that a server requiring one lets the test's own checks in), whatever
        name the server's certificate is for."""
        return {
            "ssl": True,
            "ssl_ca_certs": str(self.ca),
            "ssl_check_hostname": False,
            "ssl_certfile": str(self.client.cert),
            "ssl_keyfile": str(self.client.key),
        }

    def settings(self, mutual: bool = False) -> dict[str, str]:
        """The ``OCTR_REDIS_TLS_*`` variables of a process that trusts the CA, and shows the
        client certificate if ``mutual``."""
        variables = {"OCTR_REDIS_TLS_CA_FILE": str(self.ca)}
        if mutual:
            variables["OCTR_REDIS_TLS_CERT_FILE"] = str(self.client.cert)
            variables["OCTR_REDIS_TLS_KEY_FILE"] = str(self.client.key)
        return variables


def _openssl(*args: str) -> None:
    found = shutil.which("openssl")
    if found is None:
        raise RuntimeError("no openssl on PATH: the TLS tests make their certificates with it")
    done = subprocess.run([found, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")


def _key(path: Path) -> Path:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )
    path.chmod(0o600)
    return path


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key = _key(directory / f"{name}.key")
    cert = directory / f"{name}.crt"
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", "1",
        "-subj", f"/CN=online-ctr test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], names: str | None) -> Pair:
    """A certificate for ``names`` (subject alternative names; None: a client's) signed by
    ``ca``."""
    key = _key(directory / f"{name}.key")
    request = directory / f"{name}.csr"
    _openssl("req", "-new", "-key", str(key), "-out", str(request), "-subj", f"/CN={name}")
    extensions = directory / f"{name}.ext"
    # A server's certificate is also the client's of a cluster node dialling another.
    usage = "serverAuth,clientAuth" if names else "clientAuth"
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
        "subjectKeyIdentifier=hash",
        "authorityKeyIdentifier=keyid,issuer",
        *([f"subjectAltName={names}"] if names else []),
    ]
    extensions.write_text("\n".join(lines) + "\n")
    cert = directory / f"{name}.crt"
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(extensions),
    )  # fmt: skip
    return Pair(cert, key)


def make_certificates(directory: Path) -> Certificates:
    """Make the CAs and certificates of :class:`Certificates` under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    stranger = _ca(directory, "stranger-ca")
    return Certificates(
        ca=ca[0],
        server=_signed(directory, "server", ca, SERVER_NAMES),
        client=_signed(directory, "client", ca, None),
        other_host=_signed(directory, "other-host", ca, "DNS:redis.example"),
        stranger_ca=stranger[0],
        stranger_client=_signed(directory, "stranger-client", stranger, None),
    )


class TlsRedisServer(RedisServer):
    """A :class:`RedisServer` that speaks only TLS on its port, with ``server`` as its
    certificate (the CA's server certificate unless told), requiring a client certificate
    signed by the CA when ``mutual``."""

    def __init__(
        self,
        data_dir: Path,
        certificates: Certificates,
        mutual: bool = False,
        server: Pair | None = None,
        **options: Any,
    ) -> None:
        super().__init__(data_dir, **options)
        self.certificates = certificates
        self.mutual = mutual
        self.server = server or certificates.server

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        command = super().command()
        command[command.index("--port") + 1] = "0"  # no plain-text port at all
        return [
            *command,
            "--tls-port", str(self.port),
            "--tls-cert-file", str(self.server.cert),
            "--tls-key-file", str(self.server.key),
            "--tls-ca-cert-file", str(self.certificates.ca),
            "--tls-auth-clients", "yes" if self.mutual else "no",
        ]  # fmt: skip

    def client(self, timeout_s: float) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=self.password,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            **self.certificates.client_options(),
        )
