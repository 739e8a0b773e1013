"""The runnable command blocks of the documentation, and how their shown output is compared.

A block is runnable when the line before its opening fence is ``<!-- docs-test: run -->``.
In a ``sh`` block each command (a line, or several joined by a trailing backslash, an open
quote or an open loop: whatever ``bash -n`` finds incomplete) may be followed by ``#>`` lines,
the output it prints; a ``python`` block's output is the comment lines after ``# Output:``
(``#>`` would be reformatted by ``ruff format``, which formats Python blocks in Markdown).

Shown output is compared with what the command printed:

- a JSON line with JSON: numbers rounded to the digits the page shows (``0.313`` matches
  0.31290...), an object with a ``...`` member holds at least the members shown, one without
  exactly those, in the order shown (what a reader's terminal prints); ``[...]`` is any list;
- any other line with the printed line of the same position, runs of spaces as one, ``...``
  standing for any text and each number rounded as above;
- and the output ends with a newline, as each line shown does: otherwise the reader's next
  output (or prompt) runs on after it (curl prints a JSON body without one: ``-w '\\n'``).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

MARK = "<!-- docs-test: run -->"
_BLOCK = re.compile(re.escape(MARK) + r"\n```(\w+)\n(.*?)\n```", re.S)
_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
#: Stands for "any other members" in an object, or for any list.
_ANY = "..."


@dataclass
class Step:
    """One command (or a whole Python block) and the lines it is shown to print."""

    language: str
    code: str
    expected: list[str] = field(default_factory=list)


def _complete(shell: str) -> bool:
    """Whether bash would run ``shell`` as it is (no open quote, continuation or loop)."""
    done = subprocess.run(["bash", "-n"], input=shell, capture_output=True, text=True)
    return done.returncode == 0 and not shell.rstrip().endswith("\\")


def _shell_steps(body: str) -> list[Step]:
    steps: list[Step] = []
    pending: list[str] = []
    for line in body.splitlines():
        if line.startswith("#>"):
            assert not pending, f"output shown inside a command: {pending}"
            steps[-1].expected.append(line[3:] if line.startswith("#> ") else line[2:])
        elif pending or (line.strip() and not line.lstrip().startswith("#")):
            pending.append(line)
            if _complete("\n".join(pending)):
                steps.append(Step("sh", "\n".join(pending)))
                pending = []
    assert not pending, f"a command never ends: {pending}"
    return steps


def page_steps(path: Path) -> list[Step]:
    """The steps of every runnable block of the page at ``path``, in order."""
    steps: list[Step] = []
    for language, body in _BLOCK.findall(path.read_text()):
        if language == "sh":
            steps.extend(_shell_steps(body))
        elif language == "python":
            _, marked, output = body.partition("\n# Output:\n")
            shown = [line.removeprefix("# ") for line in output.splitlines()] if marked else []
            steps.append(Step("python", body, shown))
        else:
            raise AssertionError(f"{path.name}: no way to run a `{language}` block")
    return steps


def _same_number(shown: str, printed: str) -> bool:
    """``printed`` rounded to the decimal places of ``shown`` is ``shown``."""
    want, got = Decimal(shown), Decimal(printed)
    exponent = want.as_tuple().exponent
    assert isinstance(exponent, int)
    if exponent >= 0 or "e" in shown.lower():
        return want == got
    return got.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_HALF_EVEN) == want


def _parse_shown(text: str) -> Any:
    text = re.sub(r",\s*\.\.\.\s*}", f', "{_ANY}": true}}', text)
    text = text.replace("[...]", f'["{_ANY}"]')
    return json.loads(text, parse_float=str, parse_int=str)


def _same_json(shown: Any, printed: Any) -> bool:
    if isinstance(shown, dict):
        if not isinstance(printed, dict):
            return False
        keys = [key for key in shown if key != _ANY]
        if _ANY not in shown and set(keys) != set(printed):
            return False
        if [key for key in printed if key in shown] != keys:  # missing, or in another order
            return False
        return all(_same_json(shown[k], printed[k]) for k in keys)
    if isinstance(shown, list):
        if shown == [_ANY]:
            return isinstance(printed, list)
        return (
            isinstance(printed, list)
            and len(shown) == len(printed)
            and all(_same_json(a, b) for a, b in zip(shown, printed, strict=True))
        )
    if isinstance(shown, str) and re.fullmatch(_NUMBER, shown):
        return (
            isinstance(printed, str)
            and bool(re.fullmatch(_NUMBER, printed))
            and (_same_number(shown, printed))
        )
    return bool(shown == printed)


def _same_line(shown: str, printed: str) -> bool:
    shown, printed = " ".join(shown.split()), " ".join(printed.split())
    if shown.startswith(("{", "[")):
        try:
            parsed = json.loads(printed, parse_float=str, parse_int=str)
        except json.JSONDecodeError:
            return False
        return _same_json(_parse_shown(shown), parsed)
    pattern, numbers = "", []
    for part in re.split(f"({re.escape(_ANY)}|{_NUMBER})", shown):
        if part == _ANY:
            pattern += ".*?"
        elif re.fullmatch(_NUMBER, part):
            pattern += f"({_NUMBER})"
            numbers.append(part)
        else:
            pattern += re.escape(part)
    match = re.fullmatch(pattern, printed)
    if match is None:
        return False
    return all(_same_number(w, g) for w, g in zip(numbers, match.groups(), strict=True))


def matches(expected: list[str], printed: str) -> bool:
    """Whether ``printed`` is what the ``expected`` lines show (see the module's docstring)."""
    if expected and not printed.endswith("\n"):
        return False
    lines = printed.rstrip("\n").split("\n") if printed.strip() else []
    return len(lines) == len(expected) and all(
        _same_line(want, got) for want, got in zip(expected, lines, strict=True)
    )
