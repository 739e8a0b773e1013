"""What an API key may do, and to which models: its grants, parsed from scope strings.

A scope string is a scope (``predict``, ``learn``, ``admin``, ``metrics``), alone for every
model, or followed by ``:`` and a model or group name, or a name prefix ending in ``*``
(``*`` alone: every model). A key's scopes are a set of such strings; ``admin`` on some
models includes ``metrics`` on them (an administrator reads their series).

>>> grants = Grants.parse(["predict", "learn:ads-*", "admin:ads-1"])
>>> grants.allows("predict", "anything"), grants.allows("learn", "ads-2")
(True, True)
>>> grants.allows("learn", "default"), grants.allows("metrics", "ads-1")
(False, True)
>>> grants.text()
['admin:ads-1', 'learn:ads-*', 'metrics:ads-1', 'predict']
>>> Grants.parse(["learn:"])
Traceback (most recent call last):
...
ValueError: 'learn:' is not <scope> or <scope>:<name or prefix*>
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SCOPES = ("predict", "learn", "admin", "metrics")
#: Scopes a scope includes, on the same models: an administrator, who may read the models,
#: may also read their series on /metrics; ``metrics`` alone is for a scraper.
IMPLIED = {"admin": ("metrics",)}
#: A name (as model names are: 1-64 of A-Z a-z 0-9 _ . -), or a prefix of one then ``*``.
_TARGET = re.compile(r"^(\*|[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\*?)$")


@dataclass(frozen=True)
class Match:
    """The models one scope reaches: all, or these names and these name prefixes."""

    everything: bool = False
    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    def __call__(self, name: str) -> bool:
        return self.everything or name in self.names or name.startswith(self.prefixes)

    def text(self, scope: str) -> list[str]:
        if self.everything:
            return [scope]
        targets = sorted(self.names) + sorted(prefix + "*" for prefix in self.prefixes)
        return [f"{scope}:{target}" for target in targets]


EVERYTHING = Match(everything=True)


def _add(found: dict[str, list[str]], scope: str, target: str) -> None:
    for each in (scope, *IMPLIED.get(scope, ())):
        found.setdefault(each, []).append(target)


def _match(targets: list[str]) -> Match:
    if "*" in targets:
        return EVERYTHING
    prefixes = tuple(sorted({t[:-1] for t in targets if t.endswith("*")}))
    return Match(names=frozenset(t for t in targets if not t.endswith("*")), prefixes=prefixes)


@dataclass(frozen=True)
class Grants:
    """Per scope, the models a key reaches with it (a scope it lacks is absent)."""

    scopes: Mapping[str, Match]

    @classmethod
    def parse(cls, texts: Iterable[str]) -> Grants:
        """The grants of scope strings; a ValueError naming the first bad one."""
        found: dict[str, list[str]] = {}
        for text in texts:
            scope, colon, target = text.partition(":")
            if scope not in SCOPES or (colon and _TARGET.fullmatch(target) is None):
                raise ValueError(f"{text!r} is not <scope> or <scope>:<name or prefix*>")
            _add(found, scope, target if colon else "*")
        if not found:
            raise ValueError("no scope given")
        return cls({scope: _match(targets) for scope, targets in found.items()})

    def has(self, scope: str) -> bool:
        """Whether the key has ``scope`` on some model at least."""
        return scope in self.scopes

    def allows(self, scope: str, name: str) -> bool:
        """Whether the key has ``scope`` on the model or group ``name``."""
        match = self.scopes.get(scope)
        return match is not None and match(name)

    def everywhere(self, scope: str) -> bool:
        """Whether the key has ``scope`` on every model (e.g. ``admin`` to manage keys)."""
        match = self.scopes.get(scope)
        return match is not None and match.everything

    def text(self) -> list[str]:
        """The scope strings, implied ones included, sorted."""
        return sorted(t for scope, match in self.scopes.items() for t in match.text(scope))


#: What a request has with auth off: every scope on every model.
ALL = Grants(dict.fromkeys(SCOPES, EVERYTHING))
#: What a request without a known key has.
NOTHING = Grants({})
