"""Which API a client command (``feed``) talks to, and with which key.

``--url`` is used as given. Without it, the command finds the local service as ``status``
does: the API URL that ``online-ctr serve`` recorded in the data directory's ``serve.json``.
The key is the first one of ``--api-key-file`` (a keys file as the service reads it: a key,
then its scopes; ``#`` starts a comment), or else, for the local service, of the keys file
``serve`` generated there; none if neither exists (a service with ``OCTR_AUTH=off``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from online_ctr.cli.local import API_KEYS_FILE, RECORD_FILE, load_record
from online_ctr.process import StartupError


@dataclass(frozen=True)
class ApiTarget:
    """The API's base URL, the key to send (if any), and where the URL came from."""

    url: str
    api_key: str | None
    source: str

    def unreachable(self) -> str:
        """The one line for a service that does not answer."""
        hint = ""
        if self.source.endswith(RECORD_FILE):
            hint = "; is its `online-ctr serve` running? (`online-ctr status` tells)"
        return f"no answer from the API at {self.url} ({self.source}){hint}"


def first_key(path: Path) -> str:
    """The first key of a keys file; a StartupError naming the file if it has none."""
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise StartupError(f"cannot read the API key file {path}: {error.strerror}") from None
    for line in lines:
        words = line.split("#", 1)[0].split()
        if words:
            return words[0]
    raise StartupError(f"the API key file {path} holds no key")


def api_target(url: str | None, key_file: Path | None, data_dir: Path) -> ApiTarget:
    """The API of ``url`` (a ``--url``) or of the ``serve`` recorded in ``data_dir``, with the
    key of ``key_file`` or of that serve; a StartupError in one line if there is no API."""
    key = None if key_file is None else first_key(key_file)
    if url is not None:
        return ApiTarget(url.rstrip("/"), key, "--url")
    record_path = data_dir / RECORD_FILE
    record = load_record(data_dir)
    if record is None or "api_url" not in record:
        raise StartupError(
            f"no API to send to: pass --url, or run `online-ctr serve` (nothing recorded in "
            f"{record_path}; OCTR_DATA_DIR)"
        )
    local_keys = data_dir / API_KEYS_FILE
    if key is None and local_keys.is_file():
        key = first_key(local_keys)
    return ApiTarget(str(record["api_url"]), key, str(record_path))
