"""``online-ctr keys add|list|revoke``: the command-line twin of the ``/keys`` admin routes.

It talks to the Redis of ``OCTR_REDIS_URL`` directly, or without one to the local ``online-ctr
serve``'s (:mod:`online_ctr.cli.target`), and stores only a key's SHA-256 digest; ``add``
prints the new key once. Every API process applies a change within ``OCTR_API_KEYS_POLL_S``
and one Redis round trip. ``list`` shows this command's static keys too (``OCTR_API_KEYS``,
``OCTR_API_KEYS_FILE``), read-only. A refusal or an unreachable Redis is one line on stderr
and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import RedisError

from online_ctr.cli.admin_run import admin_redis
from online_ctr.process import StartupError
from online_ctr.store.api_keys import ApiKeyError, ApiKeyStore, digest, new_key
from online_ctr.wiring import redis_client
from service.api.auth import FROM_ENV, FROM_FILE, parse_keys_file, parse_keys_json
from service.api.key_schemas import KeyListResponse, checked_scopes, key_list

T = TypeVar("T")


def register(subparsers: Any) -> None:
    """Add ``keys add|list|revoke`` to the ``online-ctr`` command line."""
    text = "add, list and revoke API keys while the service runs (stored in Redis)"
    parser = subparsers.add_parser("keys", help=text, description=text)
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="make a new key and print it (this once)")
    add.add_argument(
        "--scope",
        action="append",
        required=True,
        metavar="SCOPE",
        help="predict, learn, admin or metrics, alone (every model) or as SCOPE:NAME or "
        "SCOPE:PREFIX* (e.g. learn:ads-*); repeat for more",
    )
    add.add_argument("--label", default="", help="who or what the key is for")
    add.set_defaults(func=add_key)
    listing = actions.add_parser("list", help="list the keys: never a key, only its id")
    listing.add_argument("--json", action="store_true", help="print what GET /keys answers")
    listing.set_defaults(func=list_keys)
    revoke = actions.add_parser("revoke", help="revoke a stored key, by its id")
    revoke.add_argument("id", help="the key's id, as `keys list` shows it")
    revoke.set_defaults(func=revoke_key)


def run_keys(action: Callable[[ApiKeyStore], Awaitable[T]]) -> T:
    """Run ``action`` on the stored keys; one line and exit status 1 if refused."""
    target = admin_redis()

    async def run() -> T:
        client = redis_client(target.settings)
        try:
            return await action(ApiKeyStore(client, target.settings.max_api_keys))
        finally:
            await client.aclose()

    try:
        return asyncio.run(run())
    except ApiKeyError as error:
        raise StartupError(str(error)) from None
    except (RedisError, OSError) as error:
        raise target.failure(error) from None


def add_key(args: argparse.Namespace) -> int:
    """Store a new key's digest; print the key once (alone on stdout, so that
    ``KEY=$(online-ctr keys add ...)`` holds it), and its id on stderr."""
    try:
        scopes = checked_scopes(args.scope)
    except ValueError as error:
        raise StartupError(f"--scope: {error}") from None
    key = new_key()
    added = run_keys(lambda store: store.add(digest(key), scopes, args.label, int(time.time())))
    print(key)
    notice = f"added key {added} with scopes {','.join(scopes)}: it is shown only this once"
    print(notice, file=sys.stderr)
    return 0


def listing() -> KeyListResponse:
    """The keys: this command's static ones, and the stored ones."""
    settings = admin_redis().settings
    static: dict[bytes, Any] = {}
    if settings.api_keys is not None:
        found = parse_keys_json(settings.api_keys.get_secret_value())
        static.update({k: (FROM_ENV, grants) for k, grants in found.items()})
    if settings.api_keys_file is not None:
        found = parse_keys_file(settings.api_keys_file)
        static.update({k: (FROM_FILE, grants) for k, grants in found.items()})

    async def read(store: ApiKeyStore) -> KeyListResponse:
        stored, used = await store.records(), await store.last_used()
        return key_list(static, stored, used, store.max_keys)

    return run_keys(read)


def list_keys(args: argparse.Namespace) -> int:
    """Print the keys, as a table or as JSON."""
    found = listing()
    if args.json:
        print(found.model_dump_json(indent=2))
        return 0
    print("\t".join(["id", "source", "created", "last used", "label", "scopes"]))
    for key in found.keys:
        row = [key.id, key.source, key.created_at or "-", key.last_used_at or "never"]
        print("\t".join([*row, key.label or "-", ",".join(key.scopes)]))
    print(f"{found.stored} stored of at most {found.max_stored} (OCTR_MAX_API_KEYS)")
    return 0


def revoke_key(args: argparse.Namespace) -> int:
    """Revoke the stored key ``args.id``."""
    static = [key for key in listing().keys if key.source != "stored" and key.id == args.id]
    if static:
        raise StartupError(
            f"key {args.id} comes from {static[0].source}: it is read-only here; remove it "
            "there and restart the API processes"
        )
    run_keys(lambda store: store.revoke(args.id))
    print(f"revoked key {args.id}: every API process refuses it within OCTR_API_KEYS_POLL_S")
    return 0
