"""The compiled functions a replay runs, compiled ahead of time: no numba at run time.

``python -m online_ctr.learning.precompile`` (``make precompile``; ``make install`` and
``make test`` run it) compiles them with numba's ahead-of-time compiler into an extension
module beside this file, ``_precompiled``, and writes what it holds to ``_precompiled.json``:
per kernel (:class:`online_ctr.learning.jit.Kernel`, by name), each compiled form's symbol and
the types of its arguments; and the hash of this package's sources it was built from.

:func:`function` finds the form of a kernel for the arguments of a call: the same machine code
as numba's JIT makes from the same source (a test holds them equal bit for bit), without
numba's import and the loading of its cache (~0.2 s of CPU). It finds none where the module
was not built, was built from other sources (any ``.py`` file of this package changed since:
then the JIT runs, as it always can), or where an argument is not of the type the form was
built for: the form cannot check that itself, it would read an array of another type as its
own, so each argument is checked here as numba types it (``numba.typeof``).

>>> check = checker(["array", "float64", 1, "C", True])
>>> check(np.zeros(3)), check(np.zeros(3, np.float32)), check(np.zeros(3)[::2])
(True, False, False)
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

#: The extension module's name, in this package, and its index beside it.
MODULE = "_precompiled"
HERE = Path(__file__).parent
INDEX = HERE / f"{MODULE}.json"

Check = Callable[[Any], bool]
#: Per kernel name, each compiled form with the check of its arguments.
Forms = dict[str, list[tuple[Callable[..., Any], Sequence[Check]]]]

_ENABLED = [True]


def function(name: str, args: Sequence[Any]) -> Callable[..., Any] | None:
    """The precompiled form of kernel ``name`` for ``args``, or None: then the JIT runs."""
    if not _ENABLED[0]:
        return None
    for form, checks in current_forms().get(name, ()):
        if len(checks) == len(args) and all(
            check(a) for check, a in zip(checks, args, strict=True)
        ):
            return form
    return None


@contextmanager
def disabled() -> Iterator[None]:
    """No precompiled form meanwhile: every kernel runs numba's JIT (for the tests that hold
    the two equal)."""
    _ENABLED[0] = False
    try:
        yield
    finally:
        _ENABLED[0] = True


@functools.cache
def current_forms() -> Forms:
    """The module's forms, if it was built from these sources; none otherwise (read once)."""
    try:
        index = json.loads(INDEX.read_text())
        module = importlib.import_module(f"{__package__}.{MODULE}")
    except (OSError, ValueError, ImportError):
        return {}
    return forms(module, index, fingerprint())


def built_from_these_sources(folder: Path = HERE) -> bool:
    """Whether ``folder``'s index says its module was built from this package's sources."""
    try:
        index = json.loads((folder / f"{MODULE}.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(index, dict) and index.get("fingerprint") == fingerprint()


def forms(module: Any, index: dict[str, Any], current: str) -> Forms:
    """The forms of ``module`` that ``index`` lists, or none if it was built from sources
    other than those hashing to ``current``, or if the two do not fit (an index that names
    what the module lacks, or that is not one)."""
    if not isinstance(index, dict) or index.get("fingerprint") != current:
        return {}
    try:
        return {
            name: [
                (getattr(module, symbol), [checker(t) for t in kinds]) for symbol, kinds in found
            ]
            for name, found in index["kernels"].items()
        }
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        return {}


#: Modules whose version file the fingerprint includes: the JIT's compiler, which a form is
#: held equal to, is theirs.
COMPILERS = ("numba", "llvmlite")


def fingerprint(root: Path = HERE) -> str:
    """The hash of this package's sources (every ``.py`` file under it, by relative path) and
    of the compilers' versions (their ``_version.py``, found without importing them)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    for name in COMPILERS:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            version = Path(spec.origin).parent / "_version.py"
            digest.update(version.read_bytes() if version.is_file() else b"")
        digest.update(b"\0")
    return digest.hexdigest()


def checker(spec: list[Any]) -> Check:
    """Whether a value has the type ``spec`` describes (:func:`online_ctr.learning.precompile
    .describe`), as ``numba.typeof`` would type it: ``["array", dtype, ndim, layout,
    writable]``, ``["int"]`` (int64), ``["float"]`` (float64), ``["bool"]``, or ``["tuple",
    module, class name, items]`` (a named tuple)."""
    kind = spec[0]
    if kind == "array":
        return _array_checker(np.dtype(spec[1]), spec[2], spec[3], spec[4])
    if kind == "int":
        return lambda v: type(v) in (int, np.int64) and -(2**63) <= v < 2**63
    if kind == "float":
        return lambda v: type(v) in (float, np.float64)
    if kind == "bool":
        return lambda v: type(v) in (bool, np.bool_)
    if kind == "tuple":
        module, qualname, items = spec[1], spec[2], [checker(item) for item in spec[3]]
        return lambda v: (
            type(v).__module__ == module
            and type(v).__qualname__ == qualname
            and len(v) == len(items)
            and all(check(item) for check, item in zip(items, v, strict=True))
        )
    raise ValueError(f"no check for a value of type {spec!r}")


def _array_checker(dtype: np.dtype[Any], ndim: int, layout: str, writable: bool) -> Check:
    """A numpy array (not a subclass) of ``dtype`` (native byte order: numba's) and ``ndim``,
    aligned, contiguous as ``layout`` says ("A": any), and writable if the form writes."""

    def check(v: Any) -> bool:
        if type(v) is not np.ndarray or v.dtype != dtype or v.ndim != ndim:
            return False
        flags = v.flags
        if not flags.aligned or (writable and not flags.writeable):
            return False
        return layout == "A" or (flags.c_contiguous if layout == "C" else flags.f_contiguous)

    return check
