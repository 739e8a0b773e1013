"""TLS to Redis (a ``rediss://`` URL): the client's TLS context from the ``OCTR_REDIS_TLS_*``
settings, each file checked when the settings are read, so that a missing or unreadable one
stops a process at once with a line naming its variable, not at its first connection.

The context is what redis-py builds from the same files (:func:`redis_options`): the system's
trusted CAs, or only those of ``OCTR_REDIS_TLS_CA_FILE``; the server's certificate always
verified, and its name checked against the URL's host unless ``OCTR_REDIS_TLS_CHECK_HOSTNAME``
is false; a client certificate (mutual TLS) when ``OCTR_REDIS_TLS_CERT_FILE`` is set.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CA_VARIABLE = "OCTR_REDIS_TLS_CA_FILE"
CERT_VARIABLE = "OCTR_REDIS_TLS_CERT_FILE"
KEY_VARIABLE = "OCTR_REDIS_TLS_KEY_FILE"
HOSTNAME_VARIABLE = "OCTR_REDIS_TLS_CHECK_HOSTNAME"


@dataclass(frozen=True)
class TlsFiles:
    """The TLS settings of a client of Redis."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    check_hostname: bool = True

    def given(self) -> list[str]:
        """The variables of the files that were set."""
        files = ((CA_VARIABLE, self.ca_file), (CERT_VARIABLE, self.cert_file))
        return [name for name, path in (*files, (KEY_VARIABLE, self.key_file)) if path]

    def context(self) -> ssl.SSLContext:
        """The client's TLS context; ValueError naming the variable of a file that is missing,
        unreadable or not what it should be."""
        for name, path in (
            (CA_VARIABLE, self.ca_file),
            (CERT_VARIABLE, self.cert_file),
            (KEY_VARIABLE, self.key_file),
        ):
            if path is not None:
                _readable(name, path)
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError(
                f"{CERT_VARIABLE} and {KEY_VARIABLE} go together (a client certificate and its "
                "private key): set both, or neither"
            )
        context = ssl.create_default_context()
        context.check_hostname = self.check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        if self.ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except ssl.SSLError as error:
                raise ValueError(
                    f"{CA_VARIABLE}: {self.ca_file} holds no PEM certificate ({error.reason})"
                ) from None
        if self.cert_file is not None and self.key_file is not None:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except ssl.SSLError as error:
                raise ValueError(
                    f"{CERT_VARIABLE}, {KEY_VARIABLE}: {self.cert_file} and {self.key_file} "
                    f"are not a PEM certificate and its private key ({error.reason})"
                ) from None
        return context

    def redis_options(self) -> dict[str, Any]:
        """redis-py's arguments for the same context, for a ``rediss://`` URL."""
        return {
            "ssl_cert_reqs": "required",
            "ssl_ca_certs": None if self.ca_file is None else str(self.ca_file),
            "ssl_certfile": None if self.cert_file is None else str(self.cert_file),
            "ssl_keyfile": None if self.key_file is None else str(self.key_file),
            "ssl_check_hostname": self.check_hostname,
        }


def _readable(variable: str, path: Path) -> None:
    try:
        with path.open("rb") as file:
            file.read(1)
    except OSError as error:
        raise ValueError(f"{variable}: cannot read {path}: {error.strerror}") from None
