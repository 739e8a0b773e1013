"""``online-ctr models list|create|delete|promote|weights`` (and ``sweep|promotion``, in
:mod:`online_ctr.cli.challengers`): the command-line twin of the admin API's ``/models`` and
``/groups`` routes.

It talks to the Redis of ``OCTR_REDIS_URL`` directly, or without one to the Redis of the
local ``online-ctr serve`` (:mod:`online_ctr.cli.target`; an admin on the machine needs no API
key), through the very operations the routes call (:mod:`online_ctr.admin`). A refusal, an
unknown name or a Redis that does not answer is one line on stderr and exit status 1; an
invalid option is one line and exit status 2.
"""

from __future__ import annotations

import argparse
from typing import Any, TypeVar

from online_ctr.cli import challengers as challenger_actions
from online_ctr.cli.admin_run import admin_redis, check_name, run_admin
from online_ctr.cli.model_options import add_config_options, config_from_args, parse_split
from online_ctr.cli.models_table import print_listing
from online_ctr.store.registry import GroupInfo
from online_ctr.store.weights import MAX_TOP, Weights
from service.api.listing import model_list
from service.api.weights_schemas import weights_response

T = TypeVar("T")


def register(subparsers: Any) -> None:
    """Add ``models list|create|delete|promote|weights`` to the ``online-ctr`` command line."""
    text = "administer models and groups (OCTR_REDIS_URL, or the local serve's Redis)"
    parser = subparsers.add_parser("models", help=text, description=text)
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list the models and the groups")
    listing.add_argument("--json", action="store_true", help="print what GET /models answers")
    listing.set_defaults(func=list_models)
    create = actions.add_parser(
        "create", help="create a model (with --group: in that group, created with it)"
    )
    create.add_argument("name", help="the model's name")
    add_config_options(create)
    create.set_defaults(func=create_model)
    delete = actions.add_parser(
        "delete", help="delete a model and all its keys (state, unlearned feedback, dead letters)"
    )
    delete.add_argument("name", help="the model's name (OCTR_MODEL: emptied, not removed)")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(func=delete_model)
    _add_promote(actions)
    _add_weights(actions)
    challenger_actions.register(actions)


def _add_weights(actions: Any) -> None:
    weights = actions.add_parser(
        "weights",
        help="print a model's largest weights with their feature names, or one feature's",
        description="Print the model's features of largest |w| with their recorded names "
        "(the model must record feature names: models create --feature-names, or "
        "OCTR_FEATURE_NAMES=true for the service's own model), or with --feature one "
        "feature's weight and state.",
    )
    weights.add_argument("name", help="the model's name")
    weights.add_argument(
        "--top", type=_top, default=20, help=f"how many weights to list (1-{MAX_TOP}; 20)"
    )
    weights.add_argument(
        "--feature",
        metavar="FIELD=VALUE",
        help="look up one feature, as sent, instead (a number, such as hour=20, also as the "
        "feature it becomes: its bucket, hour=8, or in raw mode hour)",
    )
    weights.add_argument("--json", action="store_true", help="print what the API answers")
    weights.set_defaults(func=print_weights)


def _top(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= MAX_TOP:
        raise argparse.ArgumentTypeError(f"a whole number from 1 to {MAX_TOP}, got {value!r}")
    return int(value)


def _add_promote(actions: Any) -> None:
    promote = actions.add_parser(
        "promote", help="make a model of a group serve it, and set its traffic split"
    )
    promote.add_argument("group", help="the group's name")
    promote.add_argument("model", help="the model that will serve the group")
    split = promote.add_mutually_exclusive_group()
    split.add_argument(
        "--split",
        metavar="MODEL=WEIGHT,...",
        help="traffic shares of requests with a split_key (default: keep the current split)",
    )
    split.add_argument("--no-split", action="store_true", help="clear the traffic split")
    promote.set_defaults(func=promote_model)


def list_models(args: argparse.Namespace) -> int:
    """Print the models and groups, as a table or as JSON."""
    target = admin_redis()
    listing = model_list(*run_admin(target, lambda admin: admin.list()), target.settings.model)
    if args.json:
        print(listing.model_dump_json(indent=2))
    else:
        print_listing(listing)
    return 0


def create_model(args: argparse.Namespace) -> int:
    """Create the model ``args.name`` with the options' configuration."""
    check_name(args.name)
    config = config_from_args(args)
    target = admin_redis()
    created = run_admin(target, lambda admin: admin.create(args.name, config))
    group = f" in group {config.group!r}" if config.group else ""
    if created:
        print(f"created model {args.name!r}{group}: rule {config.rule}")
    else:
        print(f"model {args.name!r} exists already, alike{group}: rule {config.rule}")
    return 0


def delete_model(args: argparse.Namespace) -> int:
    """Delete the model ``args.name``; prints what was deleted."""
    target = admin_redis()
    check_name(args.name)
    if not args.yes and not _confirmed(f"delete model {args.name!r} and all its data? [y/N] "):
        print("nothing deleted (pass --yes to skip the question)")
        return 1
    deleted = run_admin(target, lambda admin: admin.delete(args.name))
    print(f"deleted model {args.name!r}: {deleted.keys} keys")
    return 0


def promote_model(args: argparse.Namespace) -> int:
    """Make ``args.model`` serve ``args.group``; prints the group as it is now."""
    split = {} if args.no_split else None if args.split is None else parse_split(args.split)
    target = admin_redis()
    info: GroupInfo = run_admin(target, lambda admin: admin.promote(args.group, args.model, split))
    shares = ",".join(f"{k}={v:g}" for k, v in sorted(info.split.items())) or "none"
    print(f"group {info.name!r}: serving {info.serving}, split {shares}")
    return 0


def print_weights(args: argparse.Namespace) -> int:
    """Print the model's largest weights (or one feature's) as a table, or as JSON."""
    check_name(args.name)
    target = admin_redis()
    found: Weights = run_admin(
        target, lambda admin: admin.weights(args.name, args.top, args.feature)
    )
    if args.json:
        print(weights_response(found).model_dump_json(indent=2))
        return 0
    print(f"model {found.model!r} at step {found.t}" + _recorded(found))
    fields = list(found.features[0].state) if found.features else []
    print("\t".join(["weight", "name", "id", *fields]))
    for feature in found.features:
        name = "-" if feature.name is None else feature.name or "(bias)"
        if feature.number is not None:
            name += f" (from {args.feature})"
        state = [f"{feature.state[f]:.6g}" for f in fields]
        print("\t".join([f"{feature.weight:+.6g}", name, str(feature.id), *state]))
    return 0


def _recorded(found: Weights) -> str:
    if found.names_recorded is None:
        return ", feature names not recorded"
    return f", {found.names_recorded} of at most {found.names_max} names recorded"


def _confirmed(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:  # no terminal to answer: never delete by default
        return False
