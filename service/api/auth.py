"""API keys and their scopes: who may predict, learn and administer, and which models.

Keys come from ``OCTR_API_KEYS`` (a JSON object ``{"<key>": ["predict", "learn:ads-*"]}``)
and/or ``OCTR_API_KEYS_FILE`` (one ``<key> <scope>,<scope>`` per line, ``#`` comments), and
from Redis, where ``online-ctr keys add`` and ``POST /keys`` store them while the service runs
(:mod:`service.api.key_watch` follows them). Only their SHA-256 digests are kept. A request
presents its key as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``; checking it is
one digest and one dict look-up, done by :class:`service.api.middleware.EdgeMiddleware`
before any routing, which then puts the key's grants in the request for the routes to check
the model they name (:mod:`service.api.access`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from starlette.types import Message, Scope

from online_ctr.config.settings import Settings
from online_ctr.process import StartupError
from service.api.access import GRANTS
from service.api.scopes import ALL, NOTHING, SCOPES, Grants

#: Shortest key accepted: a short key can be guessed.
MIN_KEY_CHARS = 16
#: The scope each path needs. "" means any valid key; paths not listed are open.
PATH_SCOPES = {"/predict": "predict", "/learn": "learn", "/models": "admin", "/keys": "admin"}
MODELS_PREFIX = "/models/"
GROUPS_PREFIX = "/groups/"
KEYS_PREFIX = "/keys/"
#: Where each key came from, as ``keys list`` shows it: these two are read-only.
FROM_ENV = "OCTR_API_KEYS"
FROM_FILE = "OCTR_API_KEYS_FILE"
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


def _scopes(names: Iterable[object], where: str) -> Grants:
    texts = [str(name) for name in names]
    try:
        return Grants.parse(texts)
    except ValueError as error:
        raise StartupError(
            f"{where}: scopes must be some of {', '.join(SCOPES)}, each alone or as "
            f"<scope>:<model, group or prefix*>, got {sorted(texts)} ({error})"
        ) from None


def _entry(key: str, scopes: Iterable[object], where: str) -> tuple[bytes, Grants]:
    if len(key) < MIN_KEY_CHARS or not key.isascii() or not key.isprintable() or " " in key:
        raise StartupError(
            f"{where}: API keys must be at least {MIN_KEY_CHARS} printable ASCII characters "
            "without spaces (e.g. `openssl rand -hex 32`)"
        )
    return digest(key.encode()), _scopes(scopes, where)


def parse_keys_json(text: str) -> dict[bytes, Grants]:
    """``{"<key>": ["predict", ...]}`` as digest -> scopes."""
    try:
        loaded = json.loads(text)
    except ValueError:
        loaded = None
    if not isinstance(loaded, dict) or not all(isinstance(v, list) for v in loaded.values()):
        raise StartupError('OCTR_API_KEYS must be a JSON object {"<key>": ["predict", ...]}')
    return dict(_entry(k, v, f"OCTR_API_KEYS key #{n}") for n, (k, v) in enumerate(loaded.items()))


def parse_keys_file(path: Path) -> dict[bytes, Grants]:
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


class Authenticator:
    """The known keys (by digest) with their grants, and the scope each protected path needs.

    ``static`` are the keys of the environment and the file, fixed at start; :meth:`update`
    adds the keys stored in Redis, as :mod:`service.api.key_watch` finds them. ``used`` holds
    the digests of the keys used since the watch last wrote when keys were last used.
    """

    def __init__(
        self,
        static: Mapping[bytes, Grants],
        paths: Mapping[str, str] | None = None,
        sources: Mapping[bytes, str] | None = None,
    ) -> None:
        self.static = dict(static)
        self.sources = dict(sources or {})
        self.paths = dict(paths or {})
        self.keys: dict[bytes, Grants] = dict(static)
        self.used: set[bytes] = set()

    def update(self, stored: Mapping[bytes, Grants]) -> None:
        """Serve the keys ``stored`` in Redis besides the static ones, which win a clash."""
        self.keys = {**stored, **self.static}

    def template(self, path: str) -> str:
        """The route label of a refused request (the route is not matched yet)."""
        if path in self.paths:
            return path
        if path.startswith(GROUPS_PREFIX):
            return "/groups/{name}"
        if path.startswith(KEYS_PREFIX):
            return "/keys/{key_id}"
        return "/models/{name}/snapshot" if path.endswith("/snapshot") else "/models/{name}"

    def required(self, path: str) -> str | None:
        """The scope ``path`` needs ("" for any key), or None if it is open."""
        scope = self.paths.get(path)
        if scope is None and path.startswith((MODELS_PREFIX, GROUPS_PREFIX, KEYS_PREFIX)):
            return "admin"
        return scope


def authenticator(settings: Settings) -> Authenticator | None:
    """The app's authenticator, or None when ``OCTR_AUTH=off``; fails on bad or no keys."""
    if settings.auth == "off":
        return None
    keys: dict[bytes, Grants] = {}
    sources: dict[bytes, str] = {}
    if settings.api_keys is not None:
        found = parse_keys_json(settings.api_keys.get_secret_value())
        keys.update(found)
        sources.update(dict.fromkeys(found, FROM_ENV))
    if settings.api_keys_file is not None:
        found = parse_keys_file(settings.api_keys_file)
        keys.update(found)
        sources.update(dict.fromkeys(found, FROM_FILE))
    if not keys:
        raise StartupError(_NO_KEYS)
    paths = dict(PATH_SCOPES)
    if settings.protect_metrics:
        paths["/metrics"] = "metrics"
    if settings.protect_docs:
        paths.update(dict.fromkeys(DOCS_PATHS, ""))
    return Authenticator(keys, paths, sources)


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
    protected = ["/predict", "/learn", "/models", "/keys"]
    protected += ["/metrics"] * settings.protect_metrics
    protected += ["/docs", "/redoc", "/openapi.json"] * settings.protect_docs
    return (
        f"auth: on, API keys from {' and '.join(sources)} and Redis (online-ctr keys); keys "
        f"needed for {', '.join(protected)}"
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


def request_grants(auth: Authenticator | None, scope: Scope) -> Grants:
    """The grants of a request's key on an open path (/metrics): every one with auth off,
    none without a known key."""
    if auth is None:
        return ALL
    key = presented_key(scope)
    found = b"" if key is None else digest(key)
    grants = auth.keys.get(found)
    if grants is None:
        return NOTHING
    auth.used.add(found)
    return grants


def route_path(scope: Scope) -> str:
    """The request's path as the routes match it: without the app's ``root_path`` (behind a
    proxy's prefix, ``/ctr/predict`` is ``/predict``), as Starlette's router takes it off.

    >>> route_path({"path": "/ctr/predict", "root_path": "/ctr"}), route_path({"path": "/learn"})
    ('/predict', '/learn')
    """
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] == "/":
        return path[len(root) :]
    return path


def refusal(auth: Authenticator, scope: Scope) -> tuple[Message, Message] | None:
    """The 401 or 403 answer (start and body messages) for a request, or None to let it in."""
    # The route's path, not the raw one: behind a root path the raw one matched no protected
    # path, and every route was open to anyone.
    needed = auth.required(route_path(scope))
    if needed is None:
        return None
    key = presented_key(scope)
    found = b"" if key is None else digest(key)
    grants = auth.keys.get(found)
    if grants is not None and (not needed or grants.has(needed)):
        scope[GRANTS] = grants
        auth.used.add(found)
        return None
    what = f"{scope['method']} {scope['path'][:100]}"
    needs = f"the {needed!r} scope" if needed else "an API key"
    if key is None:
        status, challenge = 401, b'Bearer realm="online-ctr"'
        detail = f"{what} needs {needs}: send 'Authorization: Bearer <key>' (or 'X-API-Key: <key>')"
    elif grants is None:
        status, challenge = 401, b'Bearer realm="online-ctr", error="invalid_token"'
        detail = f"unknown API key; {what} needs a valid key with {needs}"
    else:
        status, challenge = 403, b""
        detail = (
            f"this API key lacks {needs} that {what} needs (it has: {', '.join(grants.text())})"
        )
    headers = [(b"content-type", b"application/json")]
    headers += [(b"www-authenticate", challenge)] if challenge else []
    body = json.dumps({"detail": detail}).encode()
    headers.append((b"content-length", str(len(body)).encode()))
    start: Message = {"type": "http.response.start", "status": status, "headers": headers}
    return start, {"type": "http.response.body", "body": body}
