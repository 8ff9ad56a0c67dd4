"""Totals as formulas in unknown trip counts (hloflops.loops.formula), against XLA.

Each program is written the way users write a runtime loop: `fori_loop(0, n)` with a traced `n`,
a `while_loop` until a data condition, a traced loop inside a traced loop, a scan inside a traced
loop, a bound clamped with `jnp.minimum` / `jnp.clip`. Its twin is the same computation as a
Python loop of the real number of iterations (no loop at all), whose XLA `cost_analysis()` is the
truth: the formula, evaluated at the real counts, gives the twin's dot FLOPs and transcendentals
exactly (the rolled program has loop-counter ops besides, which the twin has not), both for the
module after optimization and before it. `Report.evaluate` equals `analyze(trip_counts=...)`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import hloparse  # noqa: E402
from hloflops import analyze  # noqa: E402
from hloflops.accounting import _calling_instructions  # noqa: E402
from hloflops.cost.costs import Cost  # noqa: E402
from hloflops.loops.execution import execution_counts  # noqa: E402
from hloflops.loops.formula import Totals, loop_formula  # noqa: E402
from tests.programs import Program  # noqa: E402
from tests.programs.compile import compile_program  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
W = (np.eye(8, dtype=np.float32) * 0.5 + 0.01).astype(np.float32)
X = np.ones((2, 8), np.float32)
DOT = 2 * 2 * 8 * 8  # x[2,8] @ w[8,8]
TANH = 2 * 8


def _step(x, w):
    return jnp.tanh(x @ w)


def traced_fori(n, w, x):
    return lax.fori_loop(0, n, lambda i, h: _step(h, w), x)


def traced_fori_twin(n):
    def run(w, x):
        for _ in range(n):
            x = _step(x, w)
        return x
    return run


def until_large(w, x):
    """x <- x @ (2w) + 1 until max(x) >= 1000 (a data condition); returns x and the iterations."""
    def body(carry):
        h, k = carry
        return h @ (w * 2.0) + 1.0, k + 1
    return lax.while_loop(lambda c: jnp.max(c[0]) < 1000.0, body, (x, jnp.int32(0)))


def until_large_twin(n):
    def run(w, x):
        w2 = w * 2.0
        for _ in range(n):
            x = x @ w2 + 1.0
        return x, jnp.int32(n)
    return run


def nested_traced(n, m, w, x):
    return lax.fori_loop(0, n, lambda i, h: lax.fori_loop(0, m, lambda j, g: _step(g, w), h), x)


def nested_twin(n, m):
    def run(w, x):
        for _ in range(n * m):
            x = _step(x, w)
        return x
    return run


def scan_in_traced(n, ws, x):
    def inner(h, w):
        return _step(h, w), ()
    return lax.fori_loop(0, n, lambda i, h: lax.scan(inner, h, ws)[0], x)


def scan_in_traced_twin(n):
    def run(ws, x):
        for _ in range(n):
            for k in range(ws.shape[0]):
                x = _step(x, ws[k])
        return x
    return run


def clamped(n, w, x):
    return lax.fori_loop(0, jnp.clip(n, 2, 6), lambda i, h: _step(h, w), x)


WS = np.stack([W, W * 0.9, W * 0.8])
CASES = {
    # name: (rolled program, twin for the real counts, real counts in loop nesting order)
    "fori_traced_n": (Program("formula_fori_traced_n", traced_fori, (np.int32(5), W, X)),
                      Program("formula_fori_traced_n_twin", traced_fori_twin(5), (W, X)), (5,)),
    "while_until_data": (Program("formula_while_until_data", until_large, (W, X)),
                         None, None),  # counts found by running it (below)
    "nested_traced": (Program("formula_nested_traced", nested_traced, (np.int32(3), np.int32(4), W, X)),
                      Program("formula_nested_traced_twin", nested_twin(3, 4), (W, X)), (3, 4)),
    "scan_in_traced": (Program("formula_scan_in_traced", scan_in_traced, (np.int32(4), WS, X)),
                       Program("formula_scan_in_traced_twin", scan_in_traced_twin(4), (WS, X)), (4,)),
}


def _while_counts() -> tuple[Program, tuple[int, ...]]:
    _, iterations = jax.jit(until_large)(W, X)
    n = int(iterations)
    assert n > 2  # a real loop: the data decides after several trips
    return Program(f"formula_while_until_data_twin_{n}", until_large_twin(n), (W, X)), (n,)


def _case(name: str) -> tuple[Program, Program, tuple[int, ...]]:
    rolled, twin, counts = CASES[name]
    if twin is None:
        twin, counts = _while_counts()
    return rolled, twin, counts


def _loop_names_outermost_first(report) -> list[str]:
    depth = {}
    for lp in report.loops:
        d, parent = 0, lp.parent
        while parent is not None:
            d += 1
            parent = next(p.parent for p in report.loops if p.name == parent)
        depth[lp.name] = d
    return sorted((lp.name for lp in report.loops if lp.trip_count is None), key=lambda n: depth[n])


def _dot_formula(text: str):
    """The formula of the dot and convolution FLOPs alone: the same fold over each
    computation's dots (what the twin's dots are compared with)."""
    module = hloparse.parse(text)
    report = analyze(module)
    own: dict[str, Cost] = {}
    for row in report.rows:
        if row.opcode in ("dot", "convolution"):
            own[row.computation] = own.get(row.computation, Cost()) + Cost(row.cost.flops, 0, 0)
    ex = execution_counts(module)
    return loop_formula(module, ex.order, own, ex.trip_counts, {}, _calling_instructions(module))


def _twin_truth(twin: Program) -> tuple[int, int]:
    """(dot flops, transcendentals) of the twin, each proved against XLA's cost_analysis()."""
    compiled, _, xla = compile_program(twin)
    report = analyze(compiled)
    assert not report.loops and report.is_exact
    assert report.flops == int(xla["flops"]) and report.transcendentals == int(xla.get("transcendentals", 0))
    return sum(r.total.flops for r in report.rows if r.opcode in ("dot", "convolution")), report.transcendentals


@pytest.mark.parametrize("stage", ["optimized", "before_optimization"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_formula_at_the_real_counts_is_the_unrolled_twin(name: str, stage: str) -> None:
    rolled, twin, counts = _case(name)
    compiled, lowered, _ = compile_program(rolled)
    text = compiled if stage == "optimized" else lowered
    report = analyze(text)
    names = _loop_names_outermost_first(report)
    assert len(names) == len(counts) and report.formula is not None and not report.is_exact
    assert set(report.formula.names) == set(names)
    values = dict(zip(names, counts))
    twin_dots, twin_transcendentals = _twin_truth(twin)
    assert _dot_formula(text).evaluate(values).flops == twin_dots
    totals = report.evaluate(values)
    assert totals.transcendentals == twin_transcendentals
    # ... and it is what the analysis gives when it is told the counts.
    told = analyze(text, trip_counts=values)
    assert told.is_exact and totals == Totals(told.flops, told.transcendentals, told.bytes_accessed)
    # At the lower bounds the formula is the headline (a lower bound, as before).
    assert report.formula.at_lower_bounds() == Totals(report.flops, report.transcendentals, report.bytes_accessed)


def test_nested_unknown_loops_multiply() -> None:
    compiled, _, _ = compile_program(CASES["nested_traced"][0])
    report = analyze(compiled)
    outer, inner = _loop_names_outermost_first(report)
    product = [c for c, symbols in report.formula.metric_terms("transcendentals") if set(symbols) == {outer, inner}]
    assert product == [TANH]  # one tanh step per inner trip of each outer trip
    flops = dict((frozenset(s), c) for c, s in report.formula.metric_terms("flops"))
    assert flops[frozenset({outer, inner})] >= DOT and frozenset({inner}) not in flops
    for n, m in ((0, 5), (2, 0), (3, 4), (7, 1)):
        told = analyze(compiled, trip_counts={outer: n, inner: m})
        assert report.evaluate({outer: n, inner: m}) == Totals(told.flops, told.transcendentals, told.bytes_accessed)


def test_a_known_loop_inside_an_unknown_one_scales_its_coefficient() -> None:
    compiled, _, _ = compile_program(CASES["scan_in_traced"][0])
    report = analyze(compiled)
    (outer,) = report.formula.names
    assert report.formula.metric_terms("transcendentals") == [(3 * TANH, (outer,))]


@pytest.mark.parametrize("stage", ["optimized", "before_optimization"])
def test_a_clamped_bound_gives_the_formula_a_range(stage: str) -> None:
    compiled, lowered, _ = compile_program(Program("formula_clamped", clamped, (np.int32(9), W, X)))
    text = compiled if stage == "optimized" else lowered
    report = analyze(text)
    (symbol,) = report.formula.symbols
    assert (symbol.lower, symbol.upper) == (2, 6)
    loop = next(lp for lp in report.loops if lp.name == symbol.name)
    assert loop.bounds == (2, 6) and loop.trip_count is None
    at = report.to_dict()["formula_bounds"]
    for count, end in ((2, 0), (6, 1)):
        told = analyze(text, trip_counts={symbol.name: count})
        assert [at[m][end] for m in ("flops", "transcendentals", "bytes_accessed")] == \
            [told.flops, told.transcendentals, told.bytes_accessed]
    # The headline counts the two trips the clamp guarantees.
    assert report.transcendentals == 2 * TANH


def test_json_and_summary_show_the_formula() -> None:
    compiled, _, _ = compile_program(CASES["fori_traced_n"][0])
    report = analyze(compiled)
    (name,) = report.formula.names
    d = report.to_dict()
    assert d["transcendentals_formula"] == [{"coefficient": TANH, "symbols": [name]}]
    const = [t for t in d["flops_formula"] if not t["symbols"]]
    per_trip = [t for t in d["flops_formula"] if t["symbols"] == [name]]
    assert len(per_trip) == 1 and per_trip[0]["coefficient"] >= DOT
    assert sum(t["coefficient"] for t in const) == d["formula_bounds"]["flops"][0] == d["flops"]
    assert d["formula_symbols"] == [{"name": name, "bounds": [0, None], "note": report.loops[0].note}]
    assert d["formula_bounds"]["flops"][1] is None
    text = report.summary()
    assert f"flops = {per_trip[0]['coefficient']:,} x N[{name}]" in text


def test_known_modules_have_no_formula_keys_and_evaluate_checks_its_names() -> None:
    def known(w, x):
        return lax.fori_loop(0, 3, lambda i, h: _step(h, w), x)
    compiled, _, _ = compile_program(Program("formula_known", known, (W, X)))
    report = analyze(compiled)
    assert report.formula is None and not any("formula" in k for k in report.to_dict())
    assert report.evaluate({}) == Totals(report.flops, report.transcendentals, report.bytes_accessed)
    with pytest.raises(ValueError, match="not an unknown trip count"):
        report.evaluate({report.loops[0].name: 3})
    traced = analyze(compile_program(CASES["fori_traced_n"][0])[0])
    with pytest.raises(ValueError, match="no count for"):
        traced.evaluate({})
    with pytest.raises(ValueError, match="non-negative"):
        traced.evaluate({traced.formula.names[0]: -1})


def test_cli_trip_count_fills_in_the_formula(tmp_path: Path) -> None:
    compiled, _, _ = compile_program(CASES["fori_traced_n"][0])
    path = tmp_path / "traced.hlo"
    path.write_text(compiled)
    report = analyze(compiled)
    (name,) = report.formula.names
    env_run = [sys.executable, "-m", "hloflops.cli", str(path), "--json", "--trip-count", f"{name}=5"]
    out = subprocess.run(env_run, capture_output=True, text=True, cwd=ROOT, check=True,
                         env={"PYTHONPATH": f"{ROOT / 'analysis'}:{ROOT}", "PATH": "/usr/bin:/bin"})
    told = json.loads(out.stdout)
    assert "flops_formula" not in told and told["exact"]
    assert report.evaluate({name: 5}).as_dict() == {k: told[k] for k in ("flops", "transcendentals", "bytes_accessed")}


def loop_in_a_branch(flag, n, w, x):
    """One branch runs a traced loop, the other two steps: which is dearer depends on n."""
    return lax.cond(flag > 0, lambda h: lax.fori_loop(0, n, lambda i, g: _step(g, w), h),
                    lambda h: _step(_step(h, w), w), x)


@pytest.mark.parametrize("stage", ["optimized", "before_optimization"])
def test_a_branch_holding_an_unknown_loop_is_chosen_at_the_given_counts(stage: str) -> None:
    compiled, lowered, _ = compile_program(Program("formula_loop_in_a_branch", loop_in_a_branch,
                                                   (np.int32(1), np.int32(5), W, X)))
    text = compiled if stage == "optimized" else lowered
    report = analyze(text)
    (name,) = report.formula.names
    assert report.formula.notes and "depends on the counts" in report.formula.notes[0]
    seen = set()
    for n in range(6):
        told = analyze(text, trip_counts={name: n})
        assert report.evaluate({name: n}) == Totals(told.flops, told.transcendentals, told.bytes_accessed)
        seen.add(told.conditionals[0].chosen)
    assert len(seen) == 2  # the dearer branch changes with n: the polynomial alone could not say


# torax's predictor-corrector: an unknown loop (while.370) in one branch of a conditional whose
# other conditionals have constant selectors (hloflops.loops.branches resolves those): the
# formula must follow the branches the accounting resolved, not the dearest ones.
TORAX = (ROOT / ".." / "shared" / "corpus" / "xla_benchmark_models"
         / "tools__benchmarks__hlo__hlo_torax_iterhybrid_predictor_corrector_f64.hlo").resolve()


def test_formula_follows_constant_selectors_around_an_unknown_loop() -> None:
    if not TORAX.is_file():
        pytest.skip(f"corpus module not found: {TORAX}")
    report = analyze(str(TORAX))
    assert report.formula is not None and report.conditionals
    assert any(c.resolution == "constant" for c in report.conditionals)
    names = [symbol.name for symbol in report.formula.symbols]
    low = report.formula.at_lower_bounds()
    assert (low.flops, low.transcendentals, low.bytes_accessed) == (
        report.flops, report.transcendentals, report.bytes_accessed)
    for n in (0, 1, 3):
        counts = {name: n for name in names}
        given = analyze(str(TORAX), trip_counts=counts)
        got = report.evaluate(counts)
        assert (got.flops, got.transcendentals, got.bytes_accessed) == (
            given.flops, given.transcendentals, given.bytes_accessed), n
