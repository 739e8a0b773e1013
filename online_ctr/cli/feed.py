"""``online-ctr feed``: send a click log, in any format ``replay`` reads, to a running
service's ``/learn`` in batches; or with ``--join``, each batch to ``/predict`` first and its
labels to ``/learn`` by prediction id, as an ad server and its click tracker would.

Every batch carries an Idempotency-Key made from the file and the batch's first row
(:mod:`online_ctr.cli.feed_plan`), so a feed that stopped half-way, run again as it was,
learns each row once. A progress bar goes to stderr on a terminal; the last line of stdout
says what the service did with the rows.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, NoReturn

from tqdm import tqdm

from online_ctr.cli.api_target import api_target
from online_ctr.cli.args import fail, integer, number, resolve_format
from online_ctr.cli.feed_plan import FEED_ID, FeedBatch, batches, file_identity
from online_ctr.cli.feed_sender import Outcome, Sender
from online_ctr.cli.feed_text import interrupted, service_error, summary
from online_ctr.cli.pacing import Pacer
from online_ctr.client.errors import OnlineCtrError
from online_ctr.learning.detect import FormatError
from online_ctr.learning.progress import count_lines
from online_ctr.learning.readers import FORMATS, ReaderError, read_examples
from online_ctr.process import settings_or_exit

#: Refusals that a feed run again meets for the rows an earlier run got learned: not a failure.
EARLIER = frozenset({"repeated"})


def feed_id(text: str) -> str:
    """An argparse type: a ``--feed-id``."""
    if FEED_ID.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"must be 1-64 of A-Z a-z 0-9 . _ : + = ~ -, got {text!r}")
    return text


def register(subparsers: Any) -> None:
    """Add ``feed`` to the ``online-ctr`` command line."""
    text = "send a click log to a running service's /learn, in batches that resume safely"
    parser = subparsers.add_parser("feed", help=text, description=text)
    parser.add_argument("file", type=Path, help="the click log")
    parser.add_argument(
        "--format", choices=FORMATS, help="the file's format; default: detected from its first line"
    )
    parser.add_argument(
        "--url", help="the API's URL; default: the one `online-ctr serve` recorded in the data dir"
    )
    parser.add_argument(
        "--api-key-file",
        type=Path,
        help="a file whose first key is sent (a keys file as OCTR_API_KEYS_FILE's); default: "
        "the local serve's, without --url",
    )
    parser.add_argument("--data-dir", type=Path, help="the data directory; overrides OCTR_DATA_DIR")
    parser.add_argument("--model", help="the model to teach; default: the one the service serves")
    parser.add_argument(
        "--batch-size",
        type=integer(1),
        default=1000,
        help="examples per request, at most the service's OCTR_MAX_EXAMPLES_PER_REQUEST; "
        "default 1000 (a rerun resumes only with the same batch size)",
    )
    parser.add_argument(
        "--start", type=integer(0), default=0, help="the first row to send (0-based); default 0"
    )
    parser.add_argument("--limit", type=integer(0), help="send only rows before this one")
    parser.add_argument(
        "--rate", type=number(1e-3), help="at most this many examples a second; default: no limit"
    )
    parser.add_argument(
        "--join",
        action="store_true",
        help="send each batch to /predict under one prediction id per row, then its labels to "
        "/learn by id (the model needs joins on: OCTR_JOIN_WINDOW_S > 0)",
    )
    parser.add_argument(
        "--feed-id",
        type=feed_id,
        help="names the feed in its Idempotency-Keys; default: from the file's first MiB (give "
        "a new one to feed the same file again)",
    )
    parser.set_defaults(func=feed)


def feed(args: argparse.Namespace) -> int:
    """Send the file's rows; 0 if every one is accepted (now or by an earlier feed)."""
    if not args.file.is_file():
        return fail("feed", f"no such file: {args.file}", status=1)
    try:
        resolve_format(args)
        name = args.feed_id or file_identity(args.file)
    except (FormatError, OSError) as error:
        return fail("feed", str(error), status=1)
    data_dir = args.data_dir or settings_or_exit().data_dir
    target = api_target(args.url, args.api_key_file, data_dir)
    rows = read_examples(args.file, args.format, args.limit)
    mode = "join" if args.join else "learn"
    plan = batches(rows, args.batch_size, name, args.start, mode)
    done, next_row = Outcome(), args.start
    with closing(Sender(target, args.model)) as sender, _bar(args) as bar:
        try:
            sender.probe()
            for batch in _paced(plan, Pacer(args.rate)):
                done.add(sender.join(batch) if args.join else sender.learn(batch))
                next_row = batch.end
                bar.update(len(batch.rows))
            bar.total = bar.n  # the lines counted include a header, if the file has one
        except ReaderError as error:
            return fail("feed", f"{error}{interrupted(args.start, next_row)}", status=1)
        except OnlineCtrError as error:
            message = service_error(error, target) + interrupted(args.start, next_row)
            return fail("feed", message, status=1)
        except KeyboardInterrupt:
            return fail("feed", f"stopped{interrupted(args.start, next_row)}", status=130)
    print(summary(done, args.start, next_row, target.url))
    refused = sum(n for reason, n in done.refused.items() if reason not in EARLIER)
    return 1 if refused else 0


def _paced(plan: Iterator[FeedBatch], pacer: Pacer) -> Iterator[FeedBatch]:
    for batch in plan:
        pacer.wait(len(batch.rows))
        yield batch


def _bar(args: argparse.Namespace) -> tqdm[NoReturn]:
    """The progress bar of the rows to send, on stderr; off unless stderr is a terminal."""
    shown = sys.stderr.isatty()
    total = None
    if shown:  # counting the lines reads the file once more: only for a bar someone sees
        lines = count_lines(args.file)
        last = lines if args.limit is None else min(lines, args.limit)
        total = max(0, last - args.start)
    return tqdm(total=total, unit=" rows", file=sys.stderr, disable=not shown)
