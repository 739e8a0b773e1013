"""The parts of :mod:`loadtests.bench.vw_daemon` that need no process: what is sent (VW's text
lines, HTTP requests), how an answer is read off a socket, and the arithmetic of the figures.

VW's lines are :class:`loadtests.bench._vw.TextEncoder`'s, so both systems learn the same features
(VW's constant is our bias, ``I{j}=bucket``, ``C{j}=value``); a line to predict is the same
line without its label, which VW's daemon answers without learning it.

>>> rows = [({"I1": "2", "C1": "68fd1e64"}, 1)]
>>> learning_payload(rows)
b'1 | I1=2 C1=68fd1e64\\n'
>>> prediction_lines(rows)
[b'| I1=2 C1=68fd1e64\\n']
>>> order(2)
['vw', 'ours', 'ours', 'vw', 'vw', 'ours', 'ours', 'vw']
"""

from __future__ import annotations

import math
import re
import socket
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from loadtests.bench import _vw
from loadtests.common.stats import percentile

#: The two systems, by the name the figures use.
SYSTEMS = ("vw", "ours")

Row = tuple[Mapping[str, str | float], int]


def order(rounds: int) -> list[str]:
    """The systems in the order they run: A B B A each round, so that a drift of the
    shared machine's load falls on both alike."""
    return ["vw", "ours", "ours", "vw"] * rounds


def learning_payload(rows: Sequence[Row]) -> bytes:
    """The rows as VW's labelled text lines, one after the other, as the daemon reads them."""
    return "".join(line + "\n" for line in _vw.TextEncoder().lines(rows)).encode()


def prediction_lines(rows: Sequence[Row]) -> list[bytes]:
    """One VW line per row, without the label (so the daemon predicts and does not learn)."""
    return [line[line.index("|") :].encode() + b"\n" for line in _vw.TextEncoder().lines(rows)]


def learn_bodies(rows: Sequence[Row], size: int) -> list[bytes]:
    """``/learn`` bodies of ``size`` consecutive rows each (a partial last one dropped)."""
    return [
        orjson.dumps({"examples": [{"features": x, "label": y} for x, y in rows[i : i + size]]})
        for i in range(0, len(rows) - size + 1, size)
    ]


def predict_bodies(rows: Sequence[Row], size: int) -> list[bytes]:
    """``/predict`` bodies: one example each if ``size`` is 1, else ``size`` in a batch.

    >>> predict_bodies([({"a": "b"}, 0)] * 3, 1)[0], predict_bodies([({"a": "b"}, 0)] * 3, 2)
    (b'{"features":{"a":"b"}}', [b'{"examples":[{"features":{"a":"b"}},{"features":{"a":"b"}}]}'])
    """
    if size == 1:
        return [orjson.dumps({"features": x}) for x, _ in rows]
    return [
        orjson.dumps({"examples": [{"features": x} for x, _ in rows[i : i + size]]})
        for i in range(0, len(rows) - size + 1, size)
    ]


def http_request(path: str, body: bytes, key: str) -> bytes:
    """A keep-alive ``POST`` of a JSON body with a bearer key, as any HTTP/1.1 client sends it.

    >>> http_request("/predict", b"{}", "k").decode().splitlines()[:2]
    ['POST /predict HTTP/1.1', 'Host: 127.0.0.1']
    """
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)


class Answers:
    """What comes back on one connection: HTTP responses or VW's answer lines, read in
    64 KiB ``recv`` calls and split off a buffer (a raw socket client, for both systems)."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.buffer = b""

    def _more(self) -> None:
        chunk = self.connection.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def response(self) -> tuple[int, bytes]:
        """The next HTTP response's status and body (``Content-Length`` framed)."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._more()
        head = self.buffer[:end]
        length = _LENGTH.search(head)
        if length is None:
            raise ValueError(f"an answer without Content-Length: {head[:200]!r}")
        size = end + 4 + int(length.group(1))
        while len(self.buffer) < size:
            self._more()
        body, self.buffer = self.buffer[end + 4 : size], self.buffer[size:]
        return int(head.split(b" ", 2)[1]), body

    def lines(self, count: int) -> bytes:
        """The next ``count`` answer lines, as received (each ends with a newline)."""
        seen = self.buffer.count(b"\n")
        chunks = [self.buffer]
        while seen < count:
            chunk = self.connection.recv(65536)
            if not chunk:
                raise ConnectionError(f"the server closed after {seen} of {count} answers")
            chunks.append(chunk)
            seen += chunk.count(b"\n")
        text = b"".join(chunks)
        cut = _after_nth_newline(text, count)
        self.buffer = text[cut:]
        return text[:cut]


def tree_ticks(stat: str) -> int:
    """A process's CPU clock ticks and those of the children it has waited for: utime, stime,
    cutime and cstime (fields 14 to 17 of a ``/proc/PID/stat`` line).

    Redis forks to rewrite its append-only file, and waits for the fork: counted here once
    waited for, and while it runs as a process of the tree (:func:`tree_cpu_seconds`).

    >>> tree_ticks("42 (redis-server 1) S 1 2 3 4 5 6 7 8 9 10 150 50 7 3 20 0")
    210
    """
    after_name = stat[stat.rindex(")") + 2 :].split()
    # after_name[0] is field 3 (state), so field k is after_name[k - 3].
    return sum(int(ticks) for ticks in after_name[11:15])


def _after_nth_newline(text: bytes, count: int) -> int:
    """Where the ``count``-th line of ``text`` ends.

    >>> _after_nth_newline(b"1\\n2\\n3", 2)
    4
    """
    at = -1
    for _ in range(count):
        at = text.index(b"\n", at + 1)
    return at + 1


@dataclass(frozen=True)
class Run:
    """One system's figures from one run: learning, single and batch predictions, and the
    CPU seconds each process used while it learned."""

    system: str
    examples: int
    learn_s: float
    single_s: tuple[float, ...]
    single_loop_s: float
    batch_s: tuple[float, ...]
    batch_size: int
    logloss: float | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)
    #: Seconds until the last ``/learn`` was answered (ours; VW's answers are its learning).
    answered_s: float | None = None
    #: Ours only: the same single predictions against the bare FastAPI endpoint
    #: (:mod:`loadtests.common.bare_app`), one block before ours and one after, same client.
    bare_single_s: tuple[float, ...] = ()

    @property
    def learn_per_s(self) -> float:
        return self.examples / self.learn_s

    @property
    def single_p50_ms(self) -> float:
        return percentile(self.single_s, 50) * 1e3

    @property
    def single_p99_ms(self) -> float:
        return percentile(self.single_s, 99) * 1e3

    @property
    def bare_p50_ms(self) -> float:
        return percentile(self.bare_single_s, 50) * 1e3

    @property
    def bare_p99_ms(self) -> float:
        return percentile(self.bare_single_s, 99) * 1e3

    @property
    def single_per_s(self) -> float:
        return len(self.single_s) / self.single_loop_s

    @property
    def batch_p50_ms(self) -> float:
        return percentile(self.batch_s, 50) * 1e3

    @property
    def batch_examples_per_s(self) -> float:
        return self.batch_size * len(self.batch_s) / sum(self.batch_s)


#: Each figure: its attribute of :class:`Run`, what the table calls it, and which way is better.
FIGURES = (
    ("learn_per_s", "learning, examples/s until all are learned", "higher"),
    ("single_p50_ms", "one prediction at a time, p50 ms", "lower"),
    ("single_p99_ms", "one prediction at a time, p99 ms", "lower"),
    ("single_per_s", "one prediction at a time, requests/s (the whole loop)", "higher"),
    ("batch_p50_ms", "batch of 1,000 predictions, p50 ms", "lower"),
    ("batch_examples_per_s", "batch of 1,000 predictions, examples/s (all batches)", "higher"),
)


@dataclass(frozen=True)
class Compared:
    """One figure of both systems: medians over the rounds, and ours/VW per round."""

    label: str
    better: str
    vw: float
    ours: float
    ratios: tuple[float, ...]

    @property
    def ratio(self) -> float:
        """The median of the rounds' ratios (each from runs made side by side)."""
        return statistics.median(self.ratios)


def per_round(runs: Sequence[Run], attribute: str) -> list[dict[str, float]]:
    """Per round of four runs (A B B A), each system's mean of its two runs.

    >>> runs = [_example(s, learn_s) for s, learn_s in zip(order(1), [1.0, 2.0, 4.0, 3.0])]
    >>> per_round(runs, "learn_s")
    [{'vw': 2.0, 'ours': 3.0}]
    """
    if len(runs) % 4 or [run.system for run in runs] != order(len(runs) // 4):
        raise ValueError("the runs are not in A B B A rounds")
    rounds = [runs[i : i + 4] for i in range(0, len(runs), 4)]
    return [
        {
            system: statistics.fmean(getattr(run, attribute) for run in one if run.system == system)
            for system in SYSTEMS
        }
        for one in rounds
    ]


def compare(runs: Sequence[Run]) -> list[Compared]:
    """Every figure of :data:`FIGURES`: each system's median over the rounds, and the
    median of the rounds' ours/VW ratios."""
    compared = []
    for attribute, label, better in FIGURES:
        rounds = per_round(runs, attribute)
        compared.append(
            Compared(
                label,
                better,
                statistics.median(r["vw"] for r in rounds),
                statistics.median(r["ours"] for r in rounds),
                tuple(r["ours"] / r["vw"] for r in rounds),
            )
        )
    return compared


#: Ours against the bare endpoint: each figure of ours, the bare one's, and what the table
#: calls it.
BARE_FIGURES = (
    ("single_p50_ms", "bare_p50_ms", "one prediction at a time, p50 ms"),
    ("single_p99_ms", "bare_p99_ms", "one prediction at a time, p99 ms"),
)


def against_bare(runs: Sequence[Run]) -> list[Compared]:
    """Ours against the bare endpoint, measured in the same runs (``vw`` holds the bare
    figure): per round the mean of ours's two runs and of their bare blocks, and their ratio.

    >>> from dataclasses import replace
    >>> runs = [_example(s, 1.0) for s in order(1)]  # each single prediction 1 s
    >>> runs[1:3] = [replace(r, bare_single_s=(0.5, 0.5)) for r in runs[1:3]]
    >>> [round(c.ratio, 2) for c in against_bare(runs)]
    [2.0, 2.0]
    """
    ours = [run for run in runs if run.system == "ours"]
    rounds = [ours[i : i + 2] for i in range(0, len(ours), 2)]
    compared = []
    for mine, bare, label in BARE_FIGURES:
        means = [
            (
                statistics.fmean(getattr(r, mine) for r in one),
                statistics.fmean(getattr(r, bare) for r in one),
            )
            for one in rounds
        ]
        compared.append(
            Compared(
                label,
                "lower",
                statistics.median(b for _, b in means),
                statistics.median(o for o, _ in means),
                tuple(o / b for o, b in means),
            )
        )
    return compared


def cpu_breakdown(runs: Sequence[Run], system: str) -> dict[str, float]:
    """Median CPU seconds per process while ``system`` learned, over its runs.

    >>> cpu_breakdown([_example("vw", 1.0, {"VW": 2.0}), _example("vw", 1.0, {"VW": 4.0})], "vw")
    {'VW': 3.0}
    """
    mine = [run.cpu_s for run in runs if run.system == system]
    return {name: statistics.median(cpu[name] for cpu in mine) for name in mine[0]}


def _example(system: str, learn_s: float, cpu_s: dict[str, float] | None = None) -> Run:
    """A run with only a learning time (and CPU seconds), for the examples above."""
    return Run(system, 1, learn_s, (1.0,), 1.0, (1.0,), 1, cpu_s=cpu_s or {})


def ratio_text(value: float) -> str:
    """A ratio as the tables print it.

    >>> ratio_text(0.8765), ratio_text(12.34), ratio_text(0.01234), ratio_text(math.nan)
    ('0.88x', '12.3x', '0.012x', 'n/a')
    """
    if not math.isfinite(value):
        return "n/a"
    if value >= 10:
        return f"{value:.1f}x"
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"


def figure_text(value: float) -> str:
    """A figure as the tables print it: whole above 100, else three significant digits.

    >>> figure_text(45662.4), figure_text(302.52), figure_text(1.0), figure_text(0.03312)
    ('45,662', '303', '1.00', '0.0331')
    """
    if not math.isfinite(value):
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:#.3g}"
