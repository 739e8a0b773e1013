"""``online-ctr export NAME FILE`` and ``online-ctr import FILE NAME``: the command-line twins of
``GET`` and ``PUT /models/{name}/snapshot``.

They run :class:`online_ctr.admin.ModelsAdmin`'s operations, the routes' own. Like
``models delete``, they talk to the Redis of ``--redis-url`` or ``OCTR_REDIS_URL`` (without
either, the local ``online-ctr serve``'s: :mod:`online_ctr.cli.target`) directly: an admin
on the machine needs no API key, and no API needs to run. Both stream
(one chunk of rows in memory). An export is written to ``FILE.partial`` and renamed when
complete, so ``FILE`` is never a truncated snapshot; ``-`` is stdout (export) or stdin (import).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from redis.exceptions import RedisError

from online_ctr.admin import ModelsAdmin
from online_ctr.cli.target import Target, admin_target
from online_ctr.config.settings import Settings
from online_ctr.learning.snapshot import SnapshotError
from online_ctr.process import StartupError, configure_logging
from online_ctr.store.keys import valid_model_name
from online_ctr.store.registry import RegistryError
from online_ctr.store.snapshot_export import ExportFailedError, ModelNotFoundError
from online_ctr.store.snapshot_import import Imported, ModelExistsError
from online_ctr.wiring import redis_client

#: Bytes read from the file per piece when importing.
READ_BYTES = 1 << 20
#: Errors that end a command with one line.
FAILURES = (
    ModelNotFoundError,
    ModelExistsError,
    SnapshotError,
    ExportFailedError,
    RegistryError,
    OSError,
)


def register(subparsers: Any) -> None:
    """Add ``export`` and ``import`` to the ``online-ctr`` command line."""
    url_help = "the model's Redis; overrides OCTR_REDIS_URL"
    export = subparsers.add_parser(
        "export",
        help="export a model to a snapshot file (OCTR_REDIS_URL, or the local serve's Redis)",
        description="Write model NAME (rule, hyper-parameters, state, step, counters) to FILE, "
        "exact at one step even while it learns.",
    )
    export.add_argument("name", help="the model's name")
    export.add_argument("file", help="the snapshot file to write ('-': stdout)")
    export.add_argument("--redis-url", metavar="REDIS_URL", help=url_help)
    export.set_defaults(func=export_model)
    load = subparsers.add_parser(
        "import",
        help="import a snapshot file as a model (OCTR_REDIS_URL, or the local serve's Redis)",
        description="Create model NAME from FILE: the file's rule, hyper-parameters, state, "
        "step and counters, laid out by OCTR_STATE_BUCKETS and OCTR_STATE_SHARDS.",
    )
    load.add_argument("file", help="the snapshot file ('-': stdin)")
    load.add_argument("name", help="the name of the model to create")
    load.add_argument("--replace", action="store_true", help="replace a model of that name")
    load.add_argument("--redis-url", metavar="REDIS_URL", help=url_help)
    load.set_defaults(func=import_model)


def _target(args: argparse.Namespace) -> Target:
    configure_logging("warning")
    if not valid_model_name(args.name):
        raise StartupError(f"invalid model name {args.name!r}: use 1-64 of [A-Za-z0-9_.-]")
    return admin_target(args.redis_url)


def export_model(args: argparse.Namespace) -> int:
    """Export model ``args.name`` to ``args.file``."""
    target = _target(args)
    size = _run(target, _export(target.settings, args.name, args.file))
    print(f"exported model {args.name!r} to {args.file}: {size} bytes", file=sys.stderr)
    return 0


def import_model(args: argparse.Namespace) -> int:
    """Import ``args.file`` as model ``args.name``."""
    target = _target(args)
    imported = _run(target, _import(target.settings, args.file, args.name, args.replace))
    print(
        f"imported {args.file} as model {imported.name!r}: rule {imported.rule}, step "
        f"{imported.t}, {imported.features_tracked} features, {imported.nonzero_weights} "
        "nonzero weights"
    )
    return 0


def _run(target: Target, work: Any) -> Any:
    try:
        return asyncio.run(work)
    except FAILURES as error:
        raise StartupError(str(error)) from None
    except RedisError as error:
        raise target.failure(error) from None


async def _export(settings: Settings, name: str, file: str) -> int:
    client = redis_client(settings)
    try:
        export = await ModelsAdmin(client, settings).export(name)
        if file == "-":
            return await _write(export.chunks(), sys.stdout.buffer)
        partial = Path(f"{file}.partial")
        try:
            with partial.open("wb") as out:
                rows = await _write(export.chunks(), out)
            os.replace(partial, file)
        finally:
            partial.unlink(missing_ok=True)
        return rows
    finally:
        await client.aclose()


async def _write(chunks: AsyncIterator[bytes], out: IO[bytes]) -> int:
    """Write the pieces; the number of bytes written."""
    written = 0
    async for piece in chunks:
        out.write(piece)
        written += len(piece)
    out.flush()
    return written


async def _pieces(stream: IO[bytes]) -> AsyncIterator[bytes]:
    while piece := stream.read(READ_BYTES):
        yield piece


async def _import(settings: Settings, file: str, name: str, replace: bool) -> Imported:
    client = redis_client(settings)
    admin = ModelsAdmin(client, settings)
    try:
        # The name is checked (a group's, a full registry) before a byte of the file is read.
        if file == "-":
            return await admin.import_snapshot(name, _pieces(sys.stdin.buffer), replace)
        with open(file, "rb") as stream:
            return await admin.import_snapshot(name, _pieces(stream), replace)
    finally:
        await client.aclose()
