"""Why a Redis cannot be spoken to over TLS, or without it, in one line naming the setting to
change: asked of the server itself when a connection fails, since redis-py's errors do not
tell (a plain-text Redis at a ``rediss://`` URL is a timeout, a TLS one at ``redis://`` a
reset connection, and a refused client certificate is an EOF on a later write).

:func:`tls_trouble` connects once, as the client would, and reads what the server does:

- a certificate that does not verify: an unknown CA (``OCTR_REDIS_TLS_CA_FILE``), a name
  that is not the URL's host (``OCTR_REDIS_TLS_CHECK_HOSTNAME``), or another reason;
- an alert after the handshake: the server wants a client certificate, or refused ours
  (``OCTR_REDIS_TLS_CERT_FILE``);
- no TLS at a ``rediss://`` URL: the handshake fails, and the server answers a plain PING;
- TLS at a ``redis://`` URL: a handshake (verifying nothing) gets through.

Anything else (a refused connection, a timeout, an end of file mid-handshake, as a Redis
restarting gives) is no TLS trouble: None, and the caller waits for Redis as it would.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from urllib.parse import urlsplit

from online_ctr.config.tls import CA_VARIABLE, CERT_VARIABLE, HOSTNAME_VARIABLE, TlsFiles

#: OpenSSL's verify codes of a certificate whose issuer is not trusted, and of one that is not
#: for the name or address connected to.
_UNKNOWN_ISSUER = frozenset({2, 18, 19, 20, 21})
_WRONG_NAME = frozenset({62, 63, 64})
#: Alerts a server sends when it wants a client certificate, and when it refuses ours.
_CERTIFICATE_REQUIRED = frozenset({"TLSV13_ALERT_CERTIFICATE_REQUIRED"})
_CERTIFICATE_REFUSED = frozenset(
    {
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)
#: What OpenSSL says of bytes that are not TLS records: a server speaking something else.
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE", "HTTP_REQUEST"}
)


def tls_trouble(
    url: str | None, files: TlsFiles, timeout_s: float, source: str = "OCTR_REDIS_URL"
) -> str | None:
    """What is wrong at the TLS level between this client and the Redis of ``url`` (set by
    ``source``), as one line saying which setting to change; None if nothing is found."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("redis", "rediss"):
        return None
    host, port = parts.hostname or "localhost", parts.port or 6379
    where = f"Redis at {host}:{port} ({source})"
    if parts.scheme == "redis":
        if not _speaks_tls(host, port, timeout_s):
            return None
        return (
            f"{where} speaks only TLS, but the URL is redis://: write it rediss:// (and set "
            f"{CA_VARIABLE} to the CA of its certificate unless the system trusts it)"
        )
    try:
        raw = socket.create_connection((host, port), timeout_s)
    except OSError:
        return None  # away: the caller waits
    with raw:
        try:
            with files.context().wrap_socket(raw, server_hostname=host) as conversation:
                return _after_handshake(where, files, conversation)
        except ssl.SSLCertVerificationError as error:
            return _unverified(where, host, files, error)
        except ssl.SSLError as error:
            if error.reason in _NOT_TLS and _answers_plain(host, port, timeout_s):
                return _plain(where)
            return _alert(where, files, error)
        except TimeoutError:  # no answer to the handshake: a plain Redis waits for a newline
            return _plain(where) if _answers_plain(host, port, timeout_s) else None
        except OSError:
            return None


def _after_handshake(where: str, files: TlsFiles, conversation: ssl.SSLSocket) -> str | None:
    """Send a PING: in TLS 1.3 a server refuses a client's certificate (or its lack) only
    after the handshake, with an alert read on the next receive."""
    # Already closed after its alert, the write fails; the alert is still there to read.
    with contextlib.suppress(ssl.SSLError):
        conversation.sendall(b"PING\r\n")
    try:
        conversation.recv(64)
    except ssl.SSLError as error:
        return _alert(where, files, error)
    except OSError:
        return None
    return None


def _unverified(where: str, host: str, files: TlsFiles, error: ssl.SSLCertVerificationError) -> str:
    reason = error.verify_message
    if error.verify_code in _WRONG_NAME:
        return (
            f"{where} has a certificate that is not for {host} ({reason}): connect by a name "
            f"its certificate holds, or set {HOSTNAME_VARIABLE}=false to skip the name check"
        )
    trusted = (
        f"a CA of {CA_VARIABLE} ({files.ca_file})"
        if files.ca_file
        else f"a CA this system trusts ({CA_VARIABLE} is unset)"
    )
    if error.verify_code in _UNKNOWN_ISSUER:
        return (
            f"{where} has a certificate not signed by {trusted} (certificate verify failed: "
            f"{reason}): set {CA_VARIABLE} to the CA certificate that signed it"
        )
    return (
        f"{where} has a certificate that does not verify against {trusted} (certificate "
        f"verify failed: {reason}): give the server a valid certificate"
    )


def _alert(where: str, files: TlsFiles, error: ssl.SSLError) -> str | None:
    reason = str(error.reason)
    if reason in _CERTIFICATE_REQUIRED or (
        files.cert_file is None and reason in _CERTIFICATE_REFUSED
    ):
        return (
            f"{where} requires a client certificate ({reason}): set {CERT_VARIABLE} and "
            "OCTR_REDIS_TLS_KEY_FILE to one signed by a CA the server trusts"
        )
    if reason in _CERTIFICATE_REFUSED:
        return (
            f"{where} refused the client certificate of {CERT_VARIABLE} ({files.cert_file}; "
            f"{reason}): use one signed by a CA the server trusts (its tls-ca-cert-file)"
        )
    return None  # an end of file mid-handshake, as a restarting server gives: wait


def _plain(where: str) -> str:
    return (
        f"{where} speaks no TLS (it answers in plain text), but the URL is rediss://: write "
        "it redis://, or turn TLS on in the server (tls-port)"
    )


def _answers_plain(host: str, port: int, timeout_s: float) -> bool:
    """Whether the server answers a plain-text PING as Redis does (+PONG, or -NOAUTH)."""
    try:
        with socket.create_connection((host, port), timeout_s) as plain:
            plain.sendall(b"PING\r\n")
            return plain.recv(1)[:1] in (b"+", b"-")
    except OSError:
        return False


def _speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether the server takes a TLS handshake (nothing verified: only whether it speaks it)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except ssl.SSLError as error:
        return "ALERT" in str(error.reason)  # it answered in TLS, refusing something
    except OSError:
        return False
