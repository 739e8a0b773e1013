"""The kernels compiled ahead of time (online_ctr/learning/precompiled.py) compute what numba's
JIT computes, bit for bit, only for arguments of the types they were built for, only while the
sources are those they were built from; and a replay at its defaults runs them without
importing numba."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from online_ctr.learning import columnar, hashing, jit, precompile, precompiled
from online_ctr.learning.admission import admit_all
from online_ctr.learning.features import FeatureHasher, concat
from online_ctr.learning.learner import scoring_features
from online_ctr.learning.retention import retaining
from online_ctr.learning.rules import get_rule
from online_ctr.learning.sequential import learn_sequential
from tests.conftest import fresh_python
from tests.core.test_replay_command import SPEED, last_json, run

pytest.importorskip("pyarrow")

HINT = "stale or missing: run `make precompile` (python -m online_ctr.learning.precompile)"


@pytest.fixture(scope="module")
def forms() -> precompiled.Forms:
    found = precompiled.current_forms()
    assert set(found) == set(precompile.NAMES), HINT
    return found


@pytest.fixture
def criteo(data_dir: Path) -> Path:
    return data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """The names of the kernels that ran a precompiled form meanwhile."""
    found: set[str] = set()
    plain = precompiled.function

    def function(name: str, args: Any) -> Callable[..., Any] | None:
        form = plain(name, args)
        if form is not None:
            found.add(name)
        return form

    monkeypatch.setattr(precompiled, "function", function)
    yield found


def form_and_jit(name: str, args: tuple[Any, ...]) -> tuple[Callable[..., Any], Any]:
    form = precompiled.function(name, args)
    assert form is not None, f"{name} has no precompiled form for these arguments"
    return form, jit.KERNELS[name].dispatcher()


def same(a: Any, b: Any) -> bool:
    """Equal bit for bit: arrays (their dtype, shape and bytes), tuples of them, or None."""
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return bool(a is None and b is None)


def test_a_replay_at_its_defaults_runs_without_numba(
    forms: precompiled.Forms, criteo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """...and prints exactly what the JIT's replay prints (timings aside)."""
    code = (
        "import sys\n"
        "from online_ctr.cli.main import main\n"
        f"main(['replay', {str(criteo)!r}])\n"
        "print('numba' in sys.modules, 'llvmlite' in sys.modules)\n"
    )
    *output, imported = fresh_python(code).splitlines()
    assert imported == "False False"
    with precompiled.disabled():
        assert run(criteo) == 0
    jitted = last_json(capsys)
    printed = json.loads(output[-1])
    assert {k: v for k, v in printed.items() if k not in SPEED} == {
        k: v for k, v in jitted.items() if k not in SPEED
    }


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--l1", "0", "--alpha", "0.3"),
        ("--encoding", "compact"),
        ("--admission", "poisson:0.5"),
        ("--expire-after", "500"),
        ("--max-features", "2000"),
        ("--base-rate", "off", "--batch-size", "7"),
    ],
)
def test_replays_are_the_jits_bit_for_bit(
    forms: precompiled.Forms,
    criteo: Path,
    capsys: pytest.CaptureFixture[str],
    used: set[str],
    flags: tuple[str, ...],
) -> None:
    """Every model option that reaches the per-example loop, through its precompiled form."""
    assert run(criteo, "--limit", 4000, *flags) == 0
    ahead = last_json(capsys)
    assert "online_ctr.learning.kernels.learn_examples_ftrl" in used
    with precompiled.disabled():
        assert run(criteo, "--limit", 4000, *flags) == 0
    jitted = last_json(capsys)
    assert {k: v for k, v in ahead.items() if k not in SPEED} == {
        k: v for k, v in jitted.items() if k not in SPEED
    }


@pytest.mark.parametrize("compact", [False, True])
def test_the_loop_is_the_jits_on_real_rows(
    forms: precompiled.Forms, criteo: Path, compact: bool
) -> None:
    """Logits, probabilities, the state after and the base rate's counts, each bit for bit."""
    batch = concat(list(columnar.criteo_batches(criteo, FeatureHasher(), limit=3000)))
    features = scoring_features(batch)
    rule = get_rule("ftrl")
    outcomes = []
    for disabled in (False, True):
        state = rule.zeros(len(features.ids))
        base = np.array([1.0, 0.999, 3.0, 20.0])
        with precompiled.disabled() if disabled else nullcontext():
            learned = learn_sequential(
                rule, rule.params(l1=0.5), state, 11, batch, features,
                "compact" if compact else "float64", admit_all(), retaining(), base,
            )  # fmt: skip
        outcomes.append((learned.logits, learned.probabilities, learned.state, base))
    assert same(tuple(outcomes[0]), tuple(outcomes[1]))


def test_the_tables_passes_are_the_jits(forms: precompiled.Forms) -> None:
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    keys[::7] = keys[3]  # repeats
    form, dispatcher = form_and_jit("online_ctr.learning.hashing.distinct", (keys,))
    unique, _ = want = dispatcher(keys)
    assert same(form(keys), want)
    rows = np.arange(len(unique))
    tables = [hashing.empty_slots(len(unique)) for _ in range(2)]
    form, dispatcher = form_and_jit(
        "online_ctr.learning.hashing.put_rows", (*tables[0], unique, rows)
    )
    form(*tables[0], unique, rows)
    dispatcher(*tables[1], unique, rows)
    assert same(tables[0], tables[1])
    probe = rng.permutation(np.concatenate([keys, rng.integers(0, 2**64, 99, np.uint64)]))
    form, dispatcher = form_and_jit("online_ctr.learning.hashing.find_rows", (*tables[0], probe))
    assert same(form(*tables[0], probe), dispatcher(*tables[0], probe))


def test_the_gather_and_the_weights_are_the_jits(forms: precompiled.Forms) -> None:
    rng = np.random.default_rng(6)
    codes = rng.integers(0, 50, (26, 4000)).astype(np.int32)
    offsets = np.arange(26, dtype=np.int64) * 50
    table = rng.integers(0, 2**62, 26 * 50)
    present = rng.random(26 * 50) < 0.9
    args = (codes, offsets, table, present)
    form, dispatcher = form_and_jit("online_ctr.learning.columnar._gather", args)
    assert same(form(*args), dispatcher(*args))
    rule = get_rule("ftrl")
    state = np.column_stack([rng.normal(0, 3, 4000), rng.exponential(5, 4000)])
    state[:7] = [
        [0.0, 0.0],
        [1.0, 0.0],
        [-1.0, 0.0],
        [np.inf, 1],
        [-np.inf, 1],
        [2, np.inf],
        [np.nan, 1],
    ]
    p = rule.kernel_params(rule.params(beta=0.0))
    for ts in (np.array([3.0]), rng.random(4000)):
        args = (state, ts, p)
        form, dispatcher = form_and_jit("online_ctr.learning.kernels.weights_rows_ftrl", args)
        assert same(form(*args), dispatcher(*args))


def test_other_argument_types_run_the_jit(forms: precompiled.Forms) -> None:
    """A form reads its arguments as the types it was built for: others are not given it."""
    name = "online_ctr.learning.hashing.distinct"
    keys = np.arange(10, dtype=np.uint64)
    assert precompiled.function(name, (keys,)) is not None
    for other in (keys.astype(np.int64), keys[::2], keys.astype(">u8"), keys.reshape(2, 5)):
        assert precompiled.function(name, (other,)) is None
    assert precompiled.function(name, (keys, keys)) is None
    unique, inverse = hashing.distinct(keys.astype(np.int64)[::2])  # through the JIT
    assert unique.tolist() == [0, 2, 4, 6, 8]
    assert inverse.tolist() == [0, 1, 2, 3, 4]


class Pair(NamedTuple):
    n: int
    x: float


def test_the_checks_type_values_as_numba_does() -> None:
    writable = precompiled.checker(["array", "float64", 2, "C", True])
    readable = precompiled.checker(["array", "float64", 2, "C", False])
    any_layout = precompiled.checker(["array", "float64", 2, "A", True])
    a = np.zeros((3, 4))
    frozen = a.copy()
    frozen.flags.writeable = False
    assert writable(a) and readable(a) and readable(frozen) and not writable(frozen)
    assert not writable(a.T) and any_layout(a.T) and any_layout(a[:, ::2])
    assert not writable(np.ma.masked_array(a)) and not writable(a.tolist())
    integer, real, boolean = (precompiled.checker([k]) for k in ("int", "float", "bool"))
    assert integer(3) and integer(np.int64(3)) and not integer(True) and not integer(2**63)
    assert not integer(np.int32(3)) and not integer(3.0)
    assert real(3.0) and real(np.float64(3)) and not real(3) and not real(np.float32(3))
    assert boolean(True) and boolean(np.bool_(False)) and not boolean(1)
    pair = precompiled.checker(["tuple", __name__, "Pair", [["int"], ["float"]]])
    assert pair(Pair(1, 2.0)) and not pair(Pair(1, 2)) and not pair((1, 2.0))
    with pytest.raises(ValueError, match="no check"):
        precompiled.checker(["complex"])


def test_a_module_built_from_other_sources_is_not_used(forms: precompiled.Forms) -> None:
    index = {"fingerprint": precompiled.fingerprint(), "kernels": {}}
    assert precompiled.forms(object(), index, precompiled.fingerprint()) == {}
    assert precompiled.forms(object(), {**index, "fingerprint": "other"}, "x") == {}


def test_the_fingerprint_covers_every_source(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "rules" / "b.py").write_text("y = 2\n")
    before = precompiled.fingerprint(tmp_path)
    (tmp_path / "rules" / "b.py").write_text("y = 3\n")
    assert precompiled.fingerprint(tmp_path) != before
    (tmp_path / "rules" / "b.py").write_text("y = 2\n")
    assert precompiled.fingerprint(tmp_path) == before
    (tmp_path / "c.txt").write_text("not a source")
    assert precompiled.fingerprint(tmp_path) == before


def test_the_fingerprint_covers_the_compilers_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another numba may compile the JIT's side otherwise: the forms are rebuilt."""
    (tmp_path / "a.py").write_text("x = 1\n")
    before = precompiled.fingerprint(tmp_path)
    monkeypatch.setattr(precompiled, "COMPILERS", ("numba",))
    assert precompiled.fingerprint(tmp_path) != before


def test_describe_names_what_the_checks_read() -> None:
    from numba.core import types

    assert precompile.describe(types.Array(types.uint8, 2, "C", readonly=True)) == [
        "array", "uint8", 2, "C", False,
    ]  # fmt: skip
    assert precompile.describe(types.int64) == ["int"]
    with pytest.raises(TypeError, match="int32"):
        precompile.describe(types.int32)


def test_a_kernel_declared_before_numba_is_its_dispatcher_after() -> None:
    """numba inlines a callee only if it finds its own dispatcher among the caller's globals."""
    jit.load()
    assert type(hashing.find_rows).__name__ == "CPUDispatcher"
    assert type(hashing.find).__name__ == "CPUDispatcher"  # an inlined helper
    assert jit.KERNELS["online_ctr.learning.hashing.find"].dispatcher() is hashing.find


def test_the_build_says_in_one_line_why_it_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert precompile.main(["--out", str(tmp_path / "missing")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "missing is not a folder" in error and "--out" in error
    monkeypatch.setattr(precompile.shutil, "which", lambda name: None)
    assert precompile.main(["--out", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no C compiler" in error
    assert not list(tmp_path.iterdir())


def test_a_current_build_is_not_built_again(forms: precompiled.Forms) -> None:
    index = precompiled.HERE / f"{precompiled.MODULE}.json"
    written = index.stat().st_mtime_ns
    assert precompile.main(["--if-stale"]) == 0
    assert index.stat().st_mtime_ns == written
    assert precompiled.built_from_these_sources()


def test_an_index_that_does_not_fit_its_module_is_not_used(forms: precompiled.Forms) -> None:
    current = precompiled.fingerprint()
    lacking = {"fingerprint": current, "kernels": {"k": [["kernel_99", [["int"]]]]}}
    assert precompiled.forms(object(), lacking, current) == {}
    unchecked = {"fingerprint": current, "kernels": {"k": [["__init__", [["complex"]]]]}}
    assert precompiled.forms(object(), unchecked, current) == {}
    assert precompiled.forms(object(), ["not", "an", "index"], current) == {}  # type: ignore[arg-type]
