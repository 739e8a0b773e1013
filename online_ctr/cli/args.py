"""Argument types and flags the sub-commands share."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from online_ctr.learning.detect import detect_format
from online_ctr.learning.numeric import NUMERIC_HANDLINGS
from online_ctr.learning.readers import FORMATS


def integer(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in "invalid integer value"
    return parse


def number(low: float) -> Callable[[str], float]:
    """An argparse type: a finite number >= ``low``."""

    def parse(text: str) -> float:
        value = float(text)
        if not low <= value < float("inf"):  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be a finite number >= {low}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """FILE, --format, --limit, --hash-bits and --numeric: which examples to read and how to
    turn them into features."""
    parser.add_argument("file", type=Path, help="the click log")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="the file's format; default: detected from its first line (a file that matches "
        "no format, such as the Open Bandit Dataset's item tables, is refused)",
    )
    parser.add_argument("--limit", type=integer(0), help="read only the first N examples")
    parser.add_argument("--hash-bits", type=integer(1), help="hashing-trick bits; default 64")
    parser.add_argument(
        "--numeric",
        choices=NUMERIC_HANDLINGS,
        default=NUMERIC_HANDLINGS[0],
        help="how a numeric value enters the model, as OCTR_NUMERIC in the service: log_bucket "
        "(the category field=floor(ln(x)^2)) or raw (x times a weight); default: log_bucket",
    )


def resolve_format(args: argparse.Namespace) -> None:
    """Set ``args.format`` from the file when no --format was given (a FormatError if none fits)."""
    if args.format is None:
        args.format = detect_format(args.file)


def fail(command: str, message: str, status: int) -> int:
    """Report an error the way argparse does (``online-ctr CMD: error: ...``); the status."""
    print(f"online-ctr {command}: error: {message}", file=sys.stderr)
    return status
