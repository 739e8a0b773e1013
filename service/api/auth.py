"""API keys and their scopes: who may predict, learn and administer.

Keys come from ``OCTR_API_KEYS`` (a JSON object ``{"<key>": ["predict", "learn"]}``) and/or
``OCTR_API_KEYS_FILE`` (one ``<key> <scope>,<scope>`` per line, ``#`` comments). Only their
SHA-256 digests are kept in memory. A request presents its key as ``Authorization: Bearer
<key>`` or ``X-API-Key: <key>``; checking it is one digest and one dict look-up, done by
:class:`service.api.middleware.EdgeMiddleware` before any routing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from starlette.types import Message, Scope

from online_ctr.config.settings import Settings
from online_ctr.process import StartupError

SCOPES = ("predict", "learn", "admin", "metrics")
#: Scopes a scope includes: an administrator, who may list the models, may also read their
#: series on /metrics; ``metrics`` alone is for a scraper (Prometheus), which needs nothing else.
IMPLIED = {"admin": frozenset({"metrics"})}
#: Shortest key accepted: a short key can be guessed.
MIN_KEY_CHARS = 16
#: The scope each path needs. "" means any valid key; paths not listed are open.
PATH_SCOPES = {"/predict": "predict", "/learn": "learn", "/models": "admin"}
MODELS_PREFIX = "/models/"
GROUPS_PREFIX = "/groups/"
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")
#: Where Swagger UI's and ReDoc's JS and CSS are served from. Always open, even with
#: OCTR_PROTECT_DOCS: they are the same public files for every install and hold no data of
#: this service (the pages and /openapi.json that do are protected).
DOCS_ASSETS_URL = "/docs/assets"
_NO_KEYS = (
    "authentication is on (the default) but no API keys are configured: set OCTR_API_KEYS "
    "or OCTR_API_KEYS_FILE (see docs/operations/authentication.md), or OCTR_AUTH=off for "
    "local use only"
)


def digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def _scopes(names: Iterable[object], where: str) -> frozenset[str]:
    scopes = frozenset(str(name) for name in names)
    unknown = sorted(scopes - set(SCOPES))
    if unknown or not scopes:
        raise StartupError(
            f"{where}: scopes must be some of {', '.join(SCOPES)}, got {sorted(scopes)}"
        )
    return scopes.union(*(IMPLIED.get(scope, ()) for scope in scopes))


def _entry(key: str, scopes: Iterable[object], where: str) -> tuple[bytes, frozenset[str]]:
    if len(key) < MIN_KEY_CHARS or not key.isascii() or not key.isprintable() or " " in key:
        raise StartupError(
            f"{where}: API keys must be at least {MIN_KEY_CHARS} printable ASCII characters "
            "without spaces (e.g. `openssl rand -hex 32`)"
        )
    return digest(key.encode()), _scopes(scopes, where)


def parse_keys_json(text: str) -> dict[bytes, frozenset[str]]:
    """``{"<key>": ["predict", ...]}`` as digest -> scopes."""
    try:
        loaded = json.loads(text)
    except ValueError:
        loaded = None
    if not isinstance(loaded, dict) or not all(isinstance(v, list) for v in loaded.values()):
        raise StartupError('OCTR_API_KEYS must be a JSON object {"<key>": ["predict", ...]}')
    return dict(_entry(k, v, f"OCTR_API_KEYS key #{n}") for n, (k, v) in enumerate(loaded.items()))


def parse_keys_file(path: Path) -> dict[bytes, frozenset[str]]:
    """A keys file (``<key> <scope>,<scope>`` per line) as digest -> scopes."""
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise StartupError(f"OCTR_API_KEYS_FILE: cannot read {path}: {error.strerror}") from None
    keys = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"OCTR_API_KEYS_FILE {path} line {number}"
        if len(words) != 2:
            raise StartupError(f"{where}: write `<key> <scope>,<scope>`")
        found, scopes = _entry(words[0], words[1].split(","), where)
        keys[found] = scopes
    return keys


@dataclass(frozen=True)
class Authenticator:
    """The known keys (by digest) and the scope each protected path needs."""

    keys: Mapping[bytes, frozenset[str]]
    paths: Mapping[str, str] = field(default_factory=dict)
    models_scope: str = "admin"

    def template(self, path: str) -> str:
        """The route label of a refused request (the route is not matched yet)."""
        if path in self.paths:
            return path
        if path.startswith(GROUPS_PREFIX):
            return "/groups/{name}"
        return "/models/{name}/snapshot" if path.endswith("/snapshot") else "/models/{name}"

    def required(self, path: str) -> str | None:
        """The scope ``path`` needs ("" for any key), or None if it is open."""
        scope = self.paths.get(path)
        if scope is None and path.startswith((MODELS_PREFIX, GROUPS_PREFIX)):
            return self.models_scope
        return scope


def authenticator(settings: Settings) -> Authenticator | None:
    """The app's authenticator, or None when ``OCTR_AUTH=off``; fails on bad or no keys."""
    if settings.auth == "off":
        return None
    keys: dict[bytes, frozenset[str]] = {}
    if settings.api_keys is not None:
        keys.update(parse_keys_json(settings.api_keys.get_secret_value()))
    if settings.api_keys_file is not None:
        keys.update(parse_keys_file(settings.api_keys_file))
    if not keys:
        raise StartupError(_NO_KEYS)
    paths = dict(PATH_SCOPES)
    if settings.protect_metrics:
        paths["/metrics"] = "metrics"
    if settings.protect_docs:
        paths.update(dict.fromkeys(DOCS_PATHS, ""))
    return Authenticator(keys, paths)


def describe(settings: Settings) -> str:
    """One line saying how authentication is set, for the log of ``serve`` and ``api``."""
    if settings.auth == "off":
        return "auth: OFF (OCTR_AUTH=off): anyone who reaches the API may predict and learn"
    sources = [
        name
        for name, value in (
            ("OCTR_API_KEYS", settings.api_keys),
            (f"OCTR_API_KEYS_FILE={settings.api_keys_file}", settings.api_keys_file),
        )
        if value is not None
    ]
    protected = ["/predict", "/learn", "/models"]
    protected += ["/metrics"] * settings.protect_metrics
    protected += ["/docs", "/redoc", "/openapi.json"] * settings.protect_docs
    return (
        f"auth: on, API keys from {' and '.join(sources)}; keys needed for {', '.join(protected)}"
    )


def presented_key(scope: Scope) -> bytes | None:
    """The key of ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``, if any."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = bytes(value).partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip()
        elif name == b"x-api-key" and value:
            return bytes(value).strip()
    return None


class KeyShares:
    """Requests in progress per API key, at most ``most`` each (``OCTR_MAX_REQUESTS_PER_KEY``):
    one client, however many connections it opens, cannot take every turn of the event loop
    and of Redis from the others. Held by digest, for known keys only, so the table is bounded
    by the keys configured."""

    def __init__(self, auth: Authenticator, most: int) -> None:
        self.auth = auth
        self.most = most
        self._held: dict[bytes, int] = {}

    def take(self, scope: Scope) -> bytes | bool | None:
        """The request's key digest with its share taken (give it back with :meth:`release`),
        None for a request without a known key, False when that key has ``most`` in
        progress."""
        key = presented_key(scope)
        if key is None:
            return None
        found = digest(key)
        if found not in self.auth.keys:
            return None
        held = self._held.get(found, 0)
        if held >= self.most:
            return False
        self._held[found] = held + 1
        return found

    def release(self, found: bytes) -> None:
        held = self._held.pop(found) - 1
        if held:
            self._held[found] = held

    def refusal(self, retry_after_s: int) -> tuple[Message, Message]:
        """The 429 answer (start and body messages)."""
        detail = (
            f"this API key has {self.most} requests in progress (OCTR_MAX_REQUESTS_PER_KEY); "
            "wait for one to end, or retry after Retry-After seconds"
        )
        body = json.dumps({"detail": detail}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"retry-after", str(retry_after_s).encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        start: Message = {"type": "http.response.start", "status": 429, "headers": headers}
        return start, {"type": "http.response.body", "body": body}


def sees_model_names(auth: Authenticator | None, scope: Scope) -> bool:
    """Whether a request may read model names on /metrics: with auth off, or with a key of
    the ``metrics`` scope (an ``admin`` key has it), as model names are what ``GET /models``
    shows to administrators only."""
    if auth is None:
        return True
    key = presented_key(scope)
    return key is not None and "metrics" in auth.keys.get(digest(key), ())


def refusal(auth: Authenticator, scope: Scope) -> tuple[Message, Message] | None:
    """The 401 or 403 answer (start and body messages) for a request, or None to let it in."""
    needed = auth.required(scope["path"])
    if needed is None:
        return None
    key = presented_key(scope)
    scopes = None if key is None else auth.keys.get(digest(key))
    if scopes is not None and (not needed or needed in scopes):
        return None
    what = f"{scope['method']} {scope['path'][:100]}"
    needs = f"the {needed!r} scope" if needed else "an API key"
    if key is None:
        status, challenge = 401, b'Bearer realm="online-ctr"'
        detail = f"{what} needs {needs}: send 'Authorization: Bearer <key>' (or 'X-API-Key: <key>')"
    elif scopes is None:
        status, challenge = 401, b'Bearer realm="online-ctr", error="invalid_token"'
        detail = f"unknown API key; {what} needs a valid key with {needs}"
    else:
        status, challenge = 403, b""
        detail = (
            f"this API key lacks {needs} that {what} needs (it has: {', '.join(sorted(scopes))})"
        )
    headers = [(b"content-type", b"application/json")]
    headers += [(b"www-authenticate", challenge)] if challenge else []
    body = json.dumps({"detail": detail}).encode()
    headers.append((b"content-length", str(len(body)).encode()))
    start: Message = {"type": "http.response.start", "status": status, "headers": headers}
    return start, {"type": "http.response.body", "body": body}
