"""What ``explain`` costs a batch ``/predict``: ``python -m loadtests.bench.explain_cost``, and the
Explanations section of ``make bench``.

A real worker learns the Criteo head file, then stops; the real ``online-ctr api`` process
answers 1,000-example ``/predict`` bodies of the file's rows, one request at a time (httpx,
one connection), in three shapes: the plain body (read by the compiled scan), the same with
``"explain": false`` (parsed and validated: the path every explained body takes), and with
``"explain": true`` (default ``explain_top``, 10). Each round runs them in the order
A B C C B A, so that a change in the shared machine's load hits them alike; printed: each
shape's median request time over all its requests, and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
import orjson

from loadtests.bench.serving import learn_the_file
from loadtests.common.feed import criteo_rows
from loadtests.common.processes import Stack
from loadtests.common.report import BenchOptions, Headline, Section, table
from testkit.paths import DATA_DIR

SHAPES = {
    "plain": {},
    "explain false": {"explain": False},
    "explain true": {"explain": True},
}


def bodies(rows: Sequence[Mapping[str, object]], size: int) -> dict[str, list[bytes]]:
    """Per shape, the rows as ``size``-example bodies (the last partial one dropped).

    >>> shaped = bodies([{"a": "b"}] * 5, 2)
    >>> [len(sent) for sent in shaped.values()], shaped["explain true"][0]
    ([2, 2, 2], b'{"examples":[{"features":{"a":"b"}},{"features":{"a":"b"}}],"explain":true}')
    """
    chunks = [rows[i : i + size] for i in range(0, len(rows) - size + 1, size)]
    return {
        shape: [
            orjson.dumps({"examples": [{"features": x} for x in chunk], **extra})
            for chunk in chunks
        ]
        for shape, extra in SHAPES.items()
    }


def timed(client: httpx.Client, sent: list[bytes]) -> list[float]:
    """Seconds per request, each body once."""
    times = []
    headers = {"content-type": "application/json"}
    for body in sent:
        started = time.perf_counter()
        client.post("/predict", content=body, headers=headers).raise_for_status()
        times.append(time.perf_counter() - started)
    return times


def measure(data_dir: Path, size: int, rounds: int) -> dict[str, list[float]]:
    """Per shape, the seconds of every timed request (A B C C B A, ``rounds`` times)."""
    rows = criteo_rows(data_dir)
    shaped = bodies([x for x, _ in rows], size)
    times: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    order = [*SHAPES, *reversed(SHAPES)]  # A B C C B A
    with tempfile.TemporaryDirectory() as scratch, Stack(Path(scratch)) as stack:
        learn_the_file(stack, rows)
        url = stack.start_api()
        with httpx.Client(base_url=url, timeout=60) as client:
            for shape in SHAPES:  # warm: every name hashed, every weight cached
                timed(client, shaped[shape])
            for _ in range(rounds):
                for shape in order:
                    times[shape].extend(timed(client, shaped[shape]))
    return times


def run(options: BenchOptions) -> Section:
    """The Explanations section of ``loadtests.bench``: what ``"explain": true`` costs a
    1,000-example ``/predict``, next to the same bodies without it, from the same run."""
    size = 1000
    times = measure(options.data_dir, size, 1 if options.quick else 4)
    medians = {shape: statistics.median(t) * 1e3 for shape, t in times.items()}
    rows = [
        [shape, medians[shape], round(size / medians[shape] * 1e3), len(times[shape])]
        for shape in SHAPES
    ]
    markdown = (
        "A worker learns the Criteo head file; the real `online-ctr api` answers 1,000-example "
        "`/predict` bodies of its rows, one request at a time, in three shapes, A B C C B A each "
        'round: the plain body (the compiled scan), `"explain": false` (parsed and '
        'validated, the path an explained body takes) and `"explain": true` '
        "(`explain_top` 10).\n\n"
        + table(["body", "median ms", "examples/s", "requests"], rows, digits=1)
    )
    headline = Headline(
        '1,000-example `/predict` with `"explain": true`',
        medians["explain true"],
        "ms",
        baseline='the same bodies with `"explain": false`',
        baseline_value=medians["explain false"],
        note=f"plain bodies {medians['plain']:.1f} ms",
    )
    return Section(title="Explanations", markdown=markdown, headlines=(headline,))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000, help="examples per request")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    times = measure(args.data_dir, args.size, args.rounds)
    medians = {shape: statistics.median(t) for shape, t in times.items()}
    for shape, median in medians.items():
        print(
            f"{shape:>14}: median {median * 1e3:.1f} ms per {args.size:,}-example request "
            f"({args.size / median:,.0f} examples/s, {len(times[shape])} requests)",
            flush=True,
        )
    plain, off, on = medians["plain"], medians["explain false"], medians["explain true"]
    print(
        f"explain true / plain: {on / plain:.2f}x the time; explain true / explain false: "
        f"{on / off:.2f}x; explain false / plain: {off / plain:.2f}x",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
