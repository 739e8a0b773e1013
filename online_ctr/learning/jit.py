"""numba, imported only when a compiled function is first called without a precompiled form.

Every compiled function of the project is declared with :func:`compiled` (numba caches its
machine code on disk), :func:`helper` (compiled into its callers) or :func:`inlined` (copied
into each call site). Until numba is needed, each declaration is a :class:`Kernel`: calling it
runs its ahead-of-time form (:mod:`online_ctr.learning.precompiled`) where the arguments are
of the types that form was built for, and otherwise imports numba (:func:`load`). Importing
numba and loading the cached kernels is ~0.2 s of CPU, most of a one-row replay's start-up.

:func:`load` imports numba, makes each declared kernel numba's dispatcher, and puts the
dispatcher in place of the kernel under every module name that holds it: numba, compiling a
caller, finds its callees among the caller's globals and inlines them only if they are its own
dispatchers. A function declared after that is a dispatcher at once.

>>> twice = helper(lambda x: 2 * x)
>>> twice(21)
42
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from online_ctr.learning import precompiled

Function = TypeVar("Function", bound=Callable[..., Any])

#: numba, once :func:`load` imported it.
_NUMBA: list[types.ModuleType] = []
#: Every kernel made, in order, and by its name (the declared ones and each rule's loops).
_MADE: list[Kernel] = []
KERNELS: dict[str, Kernel] = {}
#: Reentrant: making a dispatcher asks for numba again.
_LOADING = threading.RLock()


class Kernel:
    """A compiled function, its numba dispatcher made (by ``make``) only when first needed.

    ``name`` (module and qualified name) is what its precompiled form is found by."""

    def __init__(self, name: str, make: Callable[[], Any]) -> None:
        self.name = name
        self._make = make
        self._dispatcher: Any = None
        _MADE.append(self)
        KERNELS[name] = self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ahead = None if kwargs else precompiled.function(self.name, args)
        if ahead is not None:
            return ahead(*args)
        return self.dispatcher()(*args, **kwargs)

    def dispatcher(self) -> Any:
        """numba's dispatcher of this function (numba imported first, if it is not yet)."""
        if self._dispatcher is None:
            with _LOADING:
                load()
                if self._dispatcher is None:
                    self._dispatcher = self._make()
        return self._dispatcher

    def __repr__(self) -> str:
        return f"Kernel({self.name!r})"


def load() -> types.ModuleType:
    """numba, imported now if it is not yet, every declared kernel then its dispatcher."""
    with _LOADING:
        if not _NUMBA:
            _NUMBA.append(_import_numba())
            for kernel in list(_MADE):
                kernel._dispatcher = kernel._make()
            _rebind()
    return _NUMBA[0]


def _rebind() -> None:
    """Each module's name for a kernel names its dispatcher instead (``type(...) is``: an
    ``isinstance`` would ask some modules' lazy objects for their class, and load them)."""
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for name, value in list(names.items()):
            if type(value) is Kernel and value._dispatcher is not None:
                names[name] = value._dispatcher


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit``, numba imported first."""
    return load().njit(*args, **options)


def _declare(function: Function, make: Callable[[], Any]) -> Function:
    """``function`` as a :class:`Kernel`, or at once its dispatcher once numba is loaded."""
    if _NUMBA:
        return cast(Function, make())
    kernel = Kernel(f"{function.__module__}.{function.__qualname__}", make)
    functools.update_wrapper(kernel, function)  # its name and docstring, for the doctests
    return cast(Function, kernel)


def helper(function: Function) -> Function:
    """A function compiled into the compiled functions that call it (the cache keeps those)."""
    return _declare(function, lambda: njit(error_model="numpy")(function))


def inlined(function: Function) -> Function:
    """A helper that numba copies into each call site, where its constant arguments fold."""
    return _declare(function, lambda: njit(inline="always", error_model="numpy")(function))


def compiled(function: Function) -> Function:
    """Compile on the first call and cache the machine code on disk for the next process;
    where numba finds no writable cache directory it refuses ``cache=True`` outright, and
    compiling in every process is better than failing to import."""
    return _declare(function, lambda: cached(function))


def cached(function: Callable[..., Any]) -> Any:
    """numba's dispatcher of ``function``, cached on disk where it can be, releasing the GIL
    while it runs."""
    try:
        return njit(cache=True, nogil=True, error_model="numpy")(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(error_model="numpy")(function)


@contextmanager
def _scipy_hidden() -> Iterator[None]:
    """SciPy and its BLAS module marked absent meanwhile (``None`` in ``sys.modules`` makes
    importing them raise ImportError, which numba takes for "no SciPy" and "no BLAS"), the
    marks removed at once after: SciPy and whatever else uses cython_blas import as before. A
    module loaded already is left as it is, and is not spared."""
    hidden = [name for name in ("scipy", "scipy.linalg.cython_blas") if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            del sys.modules[name]


def _import_numba() -> types.ModuleType:
    """numba, imported without its two SciPy probes, which cost every process that has SciPy
    installed and never uses it here (:func:`_scipy_hidden`):

    - numba's own import imports ``scipy`` only to check its version: ~8 ms (``import
      numba`` after numpy, 30 runs each way, interleaved: medians 0.149 s and 0.141 s);
    - the first compilation refreshes numba's CPU target, which imports
      ``numba.np.arraymath``, which imports ``scipy.linalg.cython_blas`` to learn whether
      ``np.dot`` can call a BLAS: that is ``scipy.linalg`` and what it pulls in, ~0.15 s
      (``online-ctr replay`` of 200,000 Criteo rows, the whole process: 1.34-1.41 s before,
      1.20-1.22 s after). Nothing compiled here uses a BLAS (no ``np.dot``, ``@`` or
      ``np.linalg``; were one added, numba would refuse to compile it and the tests would
      say so).

    And a function loaded from numba's cache does not refresh the target at all
    (:func:`_load_without_refresh`)."""
    with _scipy_hidden():
        import numba
        from numba.core import caching, cpu
        from numba.core.runtime import nrt
    refresh_registries: Callable[[Any], None] = cpu.CPUContext.load_additional_registries

    def load_additional_registries(self: Any) -> None:
        with _scipy_hidden():  # arraymath's BLAS probe runs now, finding none
            refresh_registries(self)

    cpu.CPUContext.load_additional_registries = load_additional_registries  # type: ignore[method-assign]
    caching.Cache.load_overload = _load_without_refresh(nrt.rtsys)  # type: ignore[method-assign]
    return numba


def _load_without_refresh(runtime: Any) -> Callable[..., Any]:
    """numba's ``Cache.load_overload``, without the refresh of the target context it starts
    with: that refresh imports and registers the implementation of every Python and numpy
    function numba can compile (``numba.np.arraymath`` and ~50 more modules), which only a
    compilation reads; machine code loaded from the cache needs of it only the runtime's
    symbols, to which it is linked. ~0.1 s of CPU of every process that only loads
    (``import numba.np.arraymath`` then the refresh, 5 runs: 33-37 ms and 68-75 ms). A
    compilation still refreshes the target, first (numba's compiler does)."""

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        runtime.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    return load_overload
