"""``online-ctr models delete NAME``: the command-line twin of ``DELETE /models/{name}``.

It talks to the Redis of ``OCTR_REDIS_URL`` directly (an admin on the machine needs no API
key), deleting the model's keys wherever they are, on one Redis or a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from octr.process import StartupError, configure_logging, settings_or_exit
from octr.settings import Settings
from octr.store.keys import valid_model_name
from octr.store.state import ModelStore
from octr.wiring import model_spec, redis_client


def register(subparsers: Any) -> None:
    """Add ``models delete`` to the ``online-ctr`` command line."""
    text = "administer models (needs OCTR_REDIS_URL)"
    parser = subparsers.add_parser("models", help=text, description=text)
    actions = parser.add_subparsers(dest="action", required=True)
    delete = actions.add_parser(
        "delete", help="delete a model and all its keys (state, unlearned feedback, dead letters)"
    )
    delete.add_argument("name", help="the model's name (OCTR_MODEL of its service)")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(func=delete_model)


def delete_model(args: argparse.Namespace) -> int:
    """Delete the model ``args.name``; prints what was deleted."""
    configure_logging()
    settings = settings_or_exit()
    if settings.redis_url is None:
        raise StartupError("set OCTR_REDIS_URL to the model's Redis (or call DELETE /models/NAME)")
    if not valid_model_name(args.name):
        raise StartupError(f"invalid model name {args.name!r}: use 1-64 of [A-Za-z0-9_.-]")
    if not args.yes and not _confirmed(f"delete model {args.name!r} and all its data? [y/N] "):
        print("nothing deleted (pass --yes to skip the question)")
        return 1
    deleted = asyncio.run(_delete(settings, args.name))
    print(f"deleted model {args.name!r}: {deleted} keys")
    return 0


def _confirmed(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:  # no terminal to answer: never delete by default
        return False


async def _delete(settings: Settings, name: str) -> int:
    client = redis_client(settings)
    try:
        # Only the name and key layout matter for deleting: the spec's rule is not checked.
        spec = model_spec(settings.model_copy(update={"model": name}))
        return await ModelStore(client, spec).delete()
    finally:
        await client.aclose()
