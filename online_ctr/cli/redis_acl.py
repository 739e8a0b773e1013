"""``online-ctr redis-acl``: the Redis ACL users of the API and of the learning workers.

It prints one rule per user (:mod:`online_ctr.store.acl` says what each may do), with the
password given as its SHA-256 so that the output holds no password: as lines of an ACL file
(also valid in redis.conf), or as ``ACL SETUSER`` commands to pipe into ``redis-cli``. Each
process then connects as its user: ``OCTR_REDIS_URL=redis://octr-api@host:6379/0`` and the
password in ``OCTR_REDIS_PASSWORD_FILE``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from online_ctr.process import StartupError
from online_ctr.store.acl import ROLES, user_rules

FORMATS = ("aclfile", "commands")


def register(subparsers: Any) -> None:
    """Add ``redis-acl`` to the ``online-ctr`` command line."""
    text = "print the Redis ACL users of the API and the workers (least privilege)"
    parser = subparsers.add_parser("redis-acl", help=text, description=text)
    for role, default in (("api", "octr-api"), ("worker", "octr-worker")):
        parser.add_argument(
            f"--{role}-user", default=default, help=f"the {role}'s Redis user (default {default})"
        )
        parser.add_argument(
            f"--{role}-password-file",
            type=Path,
            required=True,
            help=f"a file holding the {role} user's password (printed only as its SHA-256)",
        )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="aclfile",
        help="aclfile: `user` lines for an ACL file or redis.conf (default); commands: "
        "ACL SETUSER lines to pipe into redis-cli",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="add what a Redis Cluster client sends (CLUSTER SLOTS, COMMAND)",
    )
    parser.set_defaults(func=redis_acl)


def _password(path: Path, flag: str) -> str:
    try:
        password = path.read_text().strip()
    except OSError as error:
        raise StartupError(f"{flag}: cannot read {path}: {error.strerror}") from None
    if not password:
        raise StartupError(f"{flag}: {path} is empty; write the user's password in it")
    return password


def rules(args: argparse.Namespace) -> list[str]:
    """The lines to print, one per user."""
    lines = []
    prefix = "ACL SETUSER" if args.format == "commands" else "user"
    for role in ROLES.values():
        user = getattr(args, f"{role.name}_user")
        flag = f"--{role.name}-password-file"
        password = _password(getattr(args, f"{role.name}_password_file"), flag)
        lines.append(" ".join([prefix, user, *user_rules(role, password, args.cluster)]))
    return lines


def redis_acl(args: argparse.Namespace) -> int:
    """Print the users' rules."""
    if args.api_user == args.worker_user:
        raise StartupError("--api-user and --worker-user must differ: each has its own rules")
    for line in rules(args):
        print(line)
    return 0
