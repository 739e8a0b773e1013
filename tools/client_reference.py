"""The Python client's reference page, ``docs/reference/client.md``, generated from the client
itself: every public method of :class:`~online_ctr.client.Client` with its signature and
docstring, the asyncio twin's methods, the result classes' fields, the errors and the retry
policy. :mod:`tools.docs_reference` writes it with the other reference pages.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

#: Sphinx roles and double backticks, as Markdown code.
_ROLE = re.compile(r":(?:class|meth|func|mod|attr):`~?([^`]+)`")


def markdown(docstring: str | None) -> list[str]:
    """A docstring as Markdown lines: roles and ````x```` as ```x```, each ``Example::``
    block fenced as Python."""
    lines: list[str] = []
    fenced = False
    for line in inspect.cleandoc(docstring or "").splitlines():
        if fenced and line and not line.startswith("    "):
            lines += ["```", ""]
            fenced = False
        text = _ROLE.sub(r"`\1`", line).replace("``", "`")
        if fenced:
            if text or lines[-1] != "```python":  # no blank first line in the block
                lines.append(text.removeprefix("    "))
        elif text.endswith("::"):
            lines += [text[:-1], "", "```python"]
            fenced = True
        else:
            lines.append(text)
    while lines and lines[-1] == "":
        lines.pop()
    return [*lines, "```"] if fenced else lines


def signature(name: str, function: Callable[..., Any]) -> str:
    """``name(parameters) -> result`` without ``self``, annotations as written."""
    parts: list[str] = []
    starred = False
    for parameter in list(inspect.signature(function).parameters.values()):
        if parameter.name == "self":
            continue
        if parameter.kind is parameter.KEYWORD_ONLY and not starred:
            parts.append("*")
            starred = True
        text = parameter.name
        if parameter.annotation is not parameter.empty:
            text += f": {parameter.annotation}"
        if parameter.default is not parameter.empty:
            text += f" = {parameter.default!r}"
        parts.append(text)
    result = inspect.signature(function).return_annotation
    arrow = "" if result in (inspect.Signature.empty, None, "None") else f" -> {result}"
    return f"{name}({', '.join(parts)}){arrow}"


def public_methods(kind: type) -> list[str]:
    """The public methods of ``kind``, in the order they are defined."""
    return [
        name for name, member in vars(kind).items() if callable(member) and not name.startswith("_")
    ]


def _method(kind: type, name: str) -> Iterator[str]:
    yield f"### {kind.__name__}.{name}"
    yield ""
    yield "```python"
    yield signature(name, getattr(kind, name))
    yield "```"
    yield ""
    yield from markdown(getattr(kind, name).__doc__)
    yield ""


def _result(kind: type) -> Iterator[str]:
    yield f"### {kind.__name__}"
    yield ""
    yield from markdown(kind.__doc__)
    yield ""
    yield "| field | type | default |"
    yield "|---|---|---|"
    for field in dataclasses.fields(kind):
        default = "" if field.default is dataclasses.MISSING else f"`{field.default!r}`"
        kind_text = str(field.type).replace(" | ", " or ")  # a pipe would split the cell
        yield f"| `{field.name}` | `{kind_text}` | {default} |"
    yield ""


def client_page(generated: str) -> str:
    """The page's Markdown, opening with the ``generated`` marker."""
    from online_ctr import client

    lines = [generated, "", "# Python client reference", ""]
    lines += markdown(client.__doc__)
    lines += [
        "",
        "Everything below is importable from `online_ctr.client`. A tested example that runs",
        "against `make run`: [Getting started](../getting-started.md#the-python-client).",
        "",
        "## Client",
        "",
        "```python",
        signature("Client", client.Client.__init__),
        "```",
        "",
        *markdown(client.Client.__doc__),
        "",
    ]
    for name in public_methods(client.Client):
        lines.extend(_method(client.Client, name))
    coroutines = ", ".join(f"`{name}`" for name in public_methods(client.AsyncClient))
    lines += ["## AsyncClient", "", *markdown(client.AsyncClient.__doc__), ""]
    lines += [f"Its methods, each a coroutine: {coroutines}.", "", "## Results", ""]
    for kind in (client.Prediction, client.Explanation, client.Term, client.Accepted):
        lines.extend(_result(kind))
    for kind in (client.ModelInfo, client.ModelDeleted, client.ModelImported):
        lines.extend(_result(kind))
    lines += ["## Errors", ""]
    for error in (client.OnlineCtrError, client.ApiError, client.ClientError):
        lines.extend(_error(error))
    for error in (client.InvalidExampleError, client.ServerError, client.UnreachableError):
        lines.extend(_error(error))
    lines += ["## Retry", "", "```python", signature("Retry", client.Retry), "```", ""]
    lines += markdown(client.Retry.__doc__)
    return "\n".join(lines).rstrip() + "\n"


def _error(kind: type) -> Iterator[str]:
    bases = " and ".join(f"`{base.__name__}`" for base in kind.__bases__)
    yield f"### {kind.__name__}"
    yield ""
    yield f"A subclass of {bases}."
    yield ""
    yield from markdown(kind.__doc__)
    yield ""
