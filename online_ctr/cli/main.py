"""The ``online-ctr`` command: one sub-command per module, each with a ``register`` function.

Sub-command modules are imported when the command runs, never at import time, and the service
ones only if the service is installed alongside the core.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

#: Per module that defines ``register(subparsers)``, the sub-commands it adds (each parser
#: sets ``func``). A test holds these names equal to what the modules register.
COMMANDS = {
    "online_ctr.cli.replay": ("replay",),
    "online_ctr.cli.train_batch": ("train-batch",),
    "online_ctr.cli.api": ("serve", "api"),
    "online_ctr.cli.models": ("models",),
    "online_ctr.cli.keys": ("keys",),
    "online_ctr.cli.snapshots": ("export", "import"),
    "online_ctr.cli.status": ("status",),
    "online_ctr.cli.feed": ("feed",),
    "online_ctr.cli.worker": ("worker",),
    "online_ctr.cli.redis_acl": ("redis-acl",),
}


def package_version() -> str:
    """The installed package's version (from its metadata), or ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("online-ctr")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


class VersionAction(argparse._VersionAction):
    """``--version``, which reads the package's metadata only when it is given: every other
    command line is spared the search of the installed distributions (~7 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        self.version = f"%(prog)s {package_version()}"
        super().__call__(parser, *args, **kwargs)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser, with every sub-command, or only with the module of sub-command
    ``only``: the others' imports (the service's, hundreds of milliseconds) are not paid for
    by a command that does not use them, such as a timed ``replay``."""
    modules = [m for m, names in COMMANDS.items() if only in names] or list(COMMANDS)
    parser = argparse.ArgumentParser(
        prog="online-ctr", description="Streaming online learning for CTR prediction."
    )
    parser.add_argument("--version", action=VersionAction)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in modules:
        importlib.import_module(name).register(subparsers)
    return parser


#: What a ``replay`` sets in its environment, unless the user did, before numpy and pyarrow
#: are imported (they read it as they load), and why.
REPLAY_ENVIRONMENT = {
    # At its import, numpy's OpenBLAS starts a thread per core, each spinning a while for
    # work that a replay never gives (it calls no BLAS: a 2 x 2 solve at most,
    # single-threaded at any setting), on the core the Criteo parser runs on: ~45 ms of CPU,
    # a tenth of a one-row replay's (``perf record``: 10% of its samples in
    # ``blas_thread_server``; with one thread, none, and 0.40 CPU-seconds against 0.46).
    "OPENBLAS_NUM_THREADS": "1",
    # Memory that the kernel zeroes as it first maps it costs here (a virtual machine) about
    # a tenth of a 200,000-row replay's CPU (``perf``: clear_page_erms). numpy asks for huge
    # pages for its arrays of 4 MB and more, which are mapped and zeroed 2 MB at a time
    # however little of them is touched; and pyarrow's allocator (mimalloc) hands memory back
    # to the kernel 10 ms after it is freed, to map and zero again for the next block parsed.
    # 200,000 rows, 8 runs each interleaved (load ~8), median CPU: 1.111 s with neither,
    # 1.223 s with both; another time 1.025 s against 1.068 s.
    "NUMPY_MADVISE_HUGEPAGE": "0",
    "MIMALLOC_PURGE_DELAY": "-1",
}


def replay_environment(command: str | None) -> None:
    """:data:`REPLAY_ENVIRONMENT` and :func:`keep_freed_memory` for a ``replay``. A user's
    own settings stand; a process that has numpy already (a test calling :func:`main`) is
    left as it is, and so are its children."""
    if command == "replay" and "numpy" not in sys.modules:
        for name, value in REPLAY_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
        keep_freed_memory()


#: glibc's ``mallopt`` parameters (malloc.h) and what a replay sets them to.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
KEPT_MALLOC = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 256 << 20, M_TOP_PAD: 16 << 20}


def keep_freed_memory() -> None:
    """Have glibc's malloc keep the memory freed for the next allocation, not hand it back to
    the kernel, which zeroes it again when it is next mapped (see :data:`REPLAY_ENVIRONMENT`):
    a replay allocates and frees arrays of megabytes for each block it reads. By default an
    array of more than 128 kB (a limit that then grows) is mapped and unmapped on its own, and
    the heap is trimmed past 128 kB free. 200,000 rows, 8 runs each interleaved, medians:
    28,109 page faults against 39,286, CPU 1.000 s against 1.016 s (as environment variables
    another time: 28,158 against 36,652, 1.029 s against 1.072 s). Nothing where the C
    library has no ``mallopt`` (not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    for parameter, value in KEPT_MALLOC.items():
        mallopt(parameter, value)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run(argv)
    except (KeyboardInterrupt, SystemError) as error:
        if not interrupted(error):
            raise
        from online_ctr.cli.args import fail  # only now: main imports next to nothing

        # What a shell's user expects of Ctrl-C: one line and 130 (128 + SIGINT), as `feed`.
        command = argv[0] if argv and not argv[0].startswith("-") else "command"
        return fail(command, "stopped by Ctrl-C (SIGINT) before it finished", status=130)


#: The commands Ctrl-C stops at once, with one line and status 130, wherever it lands.
STOPPED_AT_ONCE = ("replay", "train-batch")


def stop_at_once_on_ctrl_c(command: str) -> None:
    """Make SIGINT end this process at once, with one line and status 130 (128 + SIGINT).

    A KeyboardInterrupt is not enough for the batch commands: raised where Python cannot pass
    it on, it is lost or turned into another error. During numba's loading of compiled code
    it landed in a ctypes callback, which printed it as ignored and went on; in a class's
    creation, ``__set_name__`` wrapped it in a RuntimeError and the user got a traceback; and
    some ended the process by the signal itself, status -2. SIGINTs at random 0.2-1.2 s into
    a 1,000-pass replay, both cores busy: 3 of 30 went wrong so (1 of 30 at ``915e472``),
    none of 40 with this. They hold no state that a stop could leave half done: a replay
    prints, and ``train-batch --out`` writes its file at the end in one call, which an
    interrupt leaves partial either way."""
    line = f"online-ctr {command}: error: stopped by Ctrl-C (SIGINT) before it finished\n"

    def stop(signum: int, frame: object) -> None:
        with contextlib.suppress(Exception):  # the buffer may be mid-write: no reentry
            sys.stdout.flush()
        os.write(2, line.encode())
        os._exit(130)

    signal.signal(signal.SIGINT, stop)


def _run(argv: list[str]) -> int:
    # The sub-command is the first argument (no top-level option takes a value); anything
    # else (--help, --version, a typo) gets the full parser and its full answer.
    if argv and argv[0] in STOPPED_AT_ONCE:
        stop_at_once_on_ctrl_c(argv[0])
    # Importing the sub-command's modules (numpy's, for one) makes objects that live until
    # exit: no collection can free any of them, and those it triggers cost ~6 ms of CPU
    # (``replay``'s parser, 20 runs each way, interleaved).
    replay_environment(argv[0] if argv else None)
    gc.disable()
    try:
        args = build_parser(argv[0] if argv else None).parse_args(argv)
    finally:
        gc.enable()
    status: int = args.func(args)
    return status


def interrupted(error: BaseException | None) -> bool:
    """Whether ``error`` is a Ctrl-C, or was caused by one: numba re-raises one that arrives
    while compiled code runs as a ``SystemError`` caused by it."""
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__cause__ or error.__context__
    return False


def entry() -> NoReturn:
    """The ``online-ctr`` program: :func:`main` on the process's own arguments, then exit.

    The batch commands (:data:`STOPPED_AT_ONCE`) leave without Python's finalization, which
    frees one by one the objects numba, LLVM and pyarrow made, where the kernel frees the
    process's memory at once: a 200,000-row replay, whole process, 10 rounds A B B A, medians
    0.657 s against 0.672. Their output is flushed first; nothing else of theirs waits for
    the exit (``train-batch --out`` has written and closed its file, and neither registers
    exit handlers). Where the flush fails (a closed pipe), Python's exit reports it as ever."""
    status = main()
    if len(sys.argv) > 1 and sys.argv[1] in STOPPED_AT_ONCE:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            sys.exit(status)
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    entry()
