"""Build :mod:`online_ctr.learning.precompiled`: the kernels of a default replay, compiled ahead
of time with numba's ``pycc`` into an extension module beside the sources.

``python -m online_ctr.learning.precompile`` (``make precompile``; about 10 s on a 2-core VM
with numba's cache warm) runs the replay's warm-up under the JIT, so that each kernel in
:data:`NAMES` is compiled for exactly the argument types a replay gives it, then compiles each
of those signatures again, from the same function, into one module, with the JIT's options: numba's
error model (IEEE results where Python would raise), this CPU's instructions, and the GIL
released while the machine code runs, as ``nogil`` does (the column reader's thread encodes a
block while the learner runs).

Needs a C compiler (gcc) and setuptools; without them it fails with one line, and a replay
runs numba's JIT instead, as it always can.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from online_ctr.learning import columnar, hashing, jit, precompiled, sequential
from online_ctr.learning.rules import get_rule

#: What a replay at its defaults calls (FTRL; Criteo read a column at a time): the column
#: reader's gather, the table's look-ups, the rule's per-example loop and its array weights.
NAMES = (
    "online_ctr.learning.columnar._gather",
    "online_ctr.learning.hashing.find_rows",
    "online_ctr.learning.hashing.put_rows",
    "online_ctr.learning.hashing.distinct",
    "online_ctr.learning.kernels.learn_examples_ftrl",
    "online_ctr.learning.kernels.weights_rows_ftrl",
)


def warm_up() -> None:
    """What ``online-ctr replay``'s own warm-up calls at its defaults, under the JIT."""
    rule = get_rule("ftrl")
    with precompiled.disabled():
        columnar.warm_up()
        hashing.warm_up()
        sequential.warm_up_loop(rule, rule.params())
        rule.weights(rule.zeros(1), 1, rule.params())


def describe(numba_type: Any) -> list[Any]:
    """An argument's numba type as :func:`online_ctr.learning.precompiled.checker` reads it."""
    from numba.core import types
    from numba.np import numpy_support

    if isinstance(numba_type, types.Array):
        dtype = str(numpy_support.as_dtype(numba_type.dtype))
        return ["array", dtype, numba_type.ndim, numba_type.layout, numba_type.mutable]
    if isinstance(numba_type, types.Boolean):
        return ["bool"]
    if numba_type == types.int64:
        return ["int"]
    if numba_type == types.float64:
        return ["float"]
    if isinstance(numba_type, types.BaseNamedTuple):
        named: Any = numba_type  # numba's annotations omit these two attributes
        cls, items = named.instance_class, named.types
        return ["tuple", cls.__module__, cls.__qualname__, [describe(t) for t in items]]
    raise TypeError(f"cannot check an argument of numba type {numba_type}")


@contextmanager
def _as_jit() -> Iterator[None]:
    """pycc's flags with the JIT's ``error_model="numpy"`` and ``nogil=True`` (pycc takes
    neither as an option: it compiles each export with a ``Flags()`` of its own)."""
    compiler: Any = importlib.import_module("numba.pycc.compiler")
    plain = compiler.Flags

    class JitFlags(plain):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.error_model = "numpy"
            self.release_gil = True

    compiler.Flags = JitFlags
    try:
        yield
    finally:
        compiler.Flags = plain


def build(folder: Path) -> Path:
    """Compile the kernels of :data:`NAMES` into ``folder`` (the module, then its index);
    returns the index's path."""
    jit.load()
    warm_up()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc is "pending deprecation", with no successor yet
        pycc: Any = importlib.import_module("numba.pycc")
    cc = pycc.CC(precompiled.MODULE, source_module=__name__)
    cc.output_dir = str(folder)
    cc.target_cpu = "host"  # as the JIT: this CPU's instructions (pycc's default is generic)
    kernels: dict[str, list[Any]] = {}
    for name in NAMES:
        dispatcher = jit.KERNELS[name].dispatcher()
        for signature in dispatcher.nopython_signatures:
            symbol = f"kernel_{sum(len(found) for found in kernels.values())}"
            cc.export(symbol, signature)(dispatcher.py_func)
            kernels.setdefault(name, []).append([symbol, [describe(t) for t in signature.args]])
    index = folder / f"{precompiled.MODULE}.json"
    index.unlink(missing_ok=True)  # no index of another build beside a module of this one
    with _as_jit():
        cc.compile()
    text = json.dumps({"fingerprint": precompiled.fingerprint(), "kernels": kernels}, indent=1)
    index.write_text(text + "\n")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m online_ctr.learning.precompile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=precompiled.HERE, help="the folder")
    parser.add_argument(
        "--if-stale",
        action="store_true",
        help="only if the folder holds no module built from these sources",
    )
    args = parser.parse_args(argv)
    if args.if_stale and precompiled.built_from_these_sources(args.out):
        return 0
    problem = _unbuildable(args.out)
    if problem is None:
        try:
            index = build(args.out)
        except Exception as error:  # the C compiler's or linker's, as setuptools raises them
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            problem = f"compiling failed ({type(error).__name__}: {first}); check that the C "
            problem += "compiler and Python's headers (Debian: python3-dev) work"
        else:
            print(f"{parser.prog}: {len(NAMES)} kernels compiled into {index.parent}")
            return 0
    print(f"{parser.prog}: error: {problem}; replays run numba's JIT meanwhile", file=sys.stderr)
    return 1


def _unbuildable(folder: Path) -> str | None:
    """Why nothing can be built into ``folder`` (no C compiler, no folder to write), or None."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C compiler (cc or gcc) on PATH: install one (Debian: apt-get install gcc)"
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        return f"{folder} is not a folder this user can write to: give --out one"
    return None


if __name__ == "__main__":
    sys.exit(main())
