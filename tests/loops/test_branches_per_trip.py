"""Conditionals resolved per trip, checked against their unrolled twins (XLA's own count), and
conditionals the program decides at run time, checked against their all-cheap / all-dear twins.

Every program of tests/programs/branch_programs.py is analysed on its optimized module
(`compiled.as_text()`) and on its module before optimization; the twin is a Python loop with a
Python `if` (no loop, no conditional), whose `cost_analysis()` is XLA's exact count of what the
rolled program executes, up to the rolled program's loop-counter ops.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

import hloparse  # noqa: E402
from hloflops.accounting import RESIDUAL, account  # noqa: E402
from hloflops.api import analyze  # noqa: E402
from hloflops.batch.db import ResultsDB  # noqa: E402
from hloflops.batch.run import run_batch  # noqa: E402
from hloflops.loops.branches import resolve_conditionals  # noqa: E402
from hloflops.loops.execution import execution_counts  # noqa: E402
from hloflops.report.report import Report  # noqa: E402
from hloflops.report.text import render_summary  # noqa: E402
from tests.programs.branch_programs import BY_NAME, DATA, DOT, PAIRS, TANH  # noqa: E402
from tests.programs.compile import compile_program  # noqa: E402
from tests.support.batch_fixtures import OLD_ROW, schema_1_database

NAMES = [p.name for p in PAIRS]
STAGES = ("optimized", "before")


def dots(acc) -> int:
    return sum(r.total.flops for r in acc.rows if r.opcode == "dot")


@functools.lru_cache(maxsize=None)
def texts(name: str, which: str) -> tuple[str, str, dict]:
    pair = BY_NAME[name]
    return compile_program(pair.rolled if which == "rolled" else pair.unrolled)


@functools.lru_cache(maxsize=None)
def analysed(name: str, stage: str):
    compiled, lowered, xla = texts(name, "rolled")
    module = hloparse.parse(compiled if stage == "optimized" else lowered)
    return module, account(module)


@functools.lru_cache(maxsize=None)
def twin(name: str):
    compiled, _, xla = texts(name, "unrolled")
    return account(hloparse.parse(compiled)), xla


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("name", NAMES)
def test_rolled_equals_its_unrolled_twin(name, stage):
    module, acc = analysed(name, stage)
    unrolled, xla = twin(name)
    assert not unrolled.loops and not unrolled.conditionals  # the twin has neither
    assert unrolled.total.flops == int(xla["flops"])  # the twin's count is XLA's own
    assert dots(acc) == dots(unrolled) > 0
    assert acc.total.transcendentals == unrolled.total.transcendentals == int(xla.get("transcendentals", 0))
    assert acc.conditionals and all(c.resolution == "per-trip" for c in acc.conditionals)
    for c in acc.conditionals:
        assert sum(c.branch_executions) == c.executions  # every execution takes one branch
    assert Report(acc, module=module).is_exact
    # The rows follow the branch each trip takes: they add up to the total, and the
    # reconciliation with XLA still adds up (a conditional resolved per trip is one more entry).
    assert sum(r.total.flops for r in acc.rows) == acc.total.flops
    assert sum(r.total.transcendentals for r in acc.rows) == acc.total.transcendentals
    assert sum(r.total.bytes_accessed for r in acc.rows) == acc.total.bytes_accessed
    assert sum(acc.reconciliation.values()) == acc.total.flops - int(acc.xla_estimate["flops"])
    assert abs(acc.reconciliation[RESIDUAL]) <= 1  # XLA's float32 sums, nothing else
    for loop in acc.loops:  # a loop's total is what its rows add up to
        inside = {loop.name} | {lp.name for lp in acc.loops if _inside(acc, lp.name, loop.name)}
        assert loop.total.flops == sum(r.total.flops for r in acc.rows if r.loop in inside)
    assert acc.bounds["flops"] == (acc.total.flops, acc.total.flops)


def _inside(acc, name: str, outer: str) -> bool:
    parents = {lp.name: lp.parent for lp in acc.loops}
    while parents.get(name):
        name = parents[name]
        if name == outer:
            return True
    return False


def test_the_issue_example_counts_the_dots_it_runs():
    # fori_loop of 10 trips, cond(i % 2 == 0, one matmul, two matmuls): 5 x 1 + 5 x 2 = 15 dots,
    # where the dearest branch on every trip said 20 (33% high).
    for stage in STAGES:
        _, acc = analysed("fori10_mod2", stage)
        assert dots(acc) == 15 * DOT
        (cond,) = acc.conditionals
        assert cond.branch_executions == (5, 5) and cond.executions == 10


def test_branch_executions_per_program():
    expected = {  # branch index -> trips taking it (a pred's true branch is index 0 in HLO)
        "fori6_warmup_eq0": [(5, 1)],  # i == 0 once
        "fori8_lt3": [(5, 3)],  # i < 3 for 0, 1, 2
        "fori7_last2": [(5, 2)],  # i >= 5 for 5, 6
        "fori9_switch_mod3": [(3, 3, 3)],
        "nn_scan5_warmup_lt2": [(3, 2)],
        "scan6_mod4_grad": [(4, 2), (4, 2)],  # forward and backward each: i % 4 == 0 for 0 and 4
        "nn_scan5_warmup_lt2_grad": [(3, 2), (3, 2)],
        # i even (6 of 12) takes the inner cond; of those, i % 3 == 0 (0 and 6) the tanh (index 1)
        "fori12_cond_in_cond": [(6, 6), (4, 2)],
    }
    for name, counts in expected.items():
        for stage in STAGES:
            _, acc = analysed(name, stage)
            assert sorted(c.branch_executions for c in acc.conditionals) == sorted(counts), (name, stage)


def test_nested_loops_read_the_outer_and_the_inner_counter():
    for stage in STAGES:
        _, acc = analysed("nested3x4_outer_and_inner", stage)
        by_kind = sorted((c.branch_executions, len(c.note.split("while")) - 1) for c in acc.conditionals)
        # cond(i == 1) on the outer counter, read inside the inner body: 4 of 12 executions
        # true, evaluated over both loops; cond(j % 2 == 1) on the inner counter: 6 and 6.
        assert by_kind == [((6, 6), 1), ((8, 4), 2)]
        assert acc.total.transcendentals == 3 * 2 * TANH


# ---- predicates on data: a range ------------------------------------------------------------

@pytest.mark.parametrize("stage", STAGES)
def test_a_data_predicate_gives_the_range_of_its_twins(stage):
    (case,) = DATA
    compiled, lowered, _ = compile_program(case.rolled)
    module = hloparse.parse(compiled if stage == "optimized" else lowered)
    report = Report(account(module), module=module)
    cheap, dear = compile_program(case.cheap)[2], compile_program(case.dear)[2]
    (cond,) = report.conditionals
    assert cond.resolution == "data" and cond.branch_executions == (None, None) and "reduce" in cond.note
    assert not report.is_exact
    low, high = report.flops_bounds
    assert high == report.flops
    # Every trip cheap against every trip dear: the range is exactly what the twins differ by.
    assert high - low == int(dear["flops"]) - int(cheap["flops"]) == case.trips * DOT
    assert report.transcendentals_bounds == (0, case.trips * TANH) == (int(dear.get("transcendentals", 0)),
                                                                        int(cheap["transcendentals"]))
    assert report.bytes_accessed_bounds[0] < report.bytes_accessed_bounds[1]
    out = render_summary(report)
    assert f"flops between {low:,} and {high:,}" in out and cond.name in out and "LOWER BOUNDS" not in out
    d = report.to_dict()
    assert d["exact"] is False and d["flops_bounds"] == [low, high]
    assert d["transcendentals_bounds"] == [0, case.trips * TANH]
    assert d["conditionals"][0]["resolution"] == "data"
    assert "between" in report.to_html()


# ---- by hand: constants, budgets, unknown trip counts, gates --------------------------------

CONSTANT = """HloModule constant_selector

small {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}

big {
  p = f32[4] parameter(0)
  e = f32[4] exponential(p)
  ROOT m = f32[4] multiply(e, p)
}

ENTRY main {
  x = f32[4] parameter(0)
  two = s32[] constant(2)
  one = s32[] constant(1)
  k = s32[] subtract(two, one)
  ROOT c = f32[4] conditional(k, x, x), branch_computations={big, small}
}
"""

LOOP = """HloModule loop_selector

cheap {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}

dear {
  p = f32[4] parameter(0)
  e = f32[4] exponential(p)
  ROOT m = f32[4] multiply(e, p)
}

body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4] get-tuple-element(s), index=1
  three = s32[] constant(3)
  r = s32[] remainder(i, three)
  zero = s32[] constant(0)
  p = pred[] compare(r, zero), direction=EQ
  y = f32[4] conditional(p, x, x), true_computation=dear, false_computation=cheap
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4]) tuple(j, y)
}

cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(LIMIT)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(t), condition=cond, body=body
  ROOT y = f32[4] get-tuple-element(w), index=1
}
"""


def test_a_constant_selector_outside_any_loop_resolves():
    module = hloparse.parse(CONSTANT)
    report = Report(account(module), module=module)
    (cond,) = report.conditionals
    assert (cond.resolution, cond.branch_executions) == ("constant", (0, 1))
    # negate (4) and the selector's subtract (1); not big's exponential and multiply
    assert report.flops == 5 and report.transcendentals == 0 and report.is_exact
    assert report.flops_bounds == (5, 5)


def test_a_selector_on_the_counter_resolves_and_a_budget_or_unknown_count_does_not():
    module = hloparse.parse(LOOP.replace("LIMIT", "10"))
    report = Report(account(module), module=module)
    (cond,) = report.conditionals
    # i % 3 == 0 on 0..9: 0, 3, 6, 9 take the dear (true) branch.
    assert cond.branch_executions == (4, 6) and cond.resolution == "per-trip" and report.is_exact
    assert report.transcendentals == 4 * 4
    ex = execution_counts(module)
    (tight,) = resolve_conditionals(module, ex.trip_counts, ex.order, budget=5).values()
    assert tight.kind == "unresolved" and "evaluations" in tight.note
    unknown = hloparse.parse(LOOP.replace("constant(LIMIT)", "parameter(1)").replace(
        "ENTRY main {\n  x = f32[4] parameter(0)", "ENTRY main {\n  x = f32[4] parameter(0)\n  m = s32[] parameter(1)"))
    assert not Report(account(unknown), module=unknown).is_exact


def test_a_counter_conditional_inside_a_data_conditional_stays_a_range():
    import jax.numpy as jnp
    from jax import lax

    from tests.programs import Program
    from tests.programs.branch_programs import H, W, one, two

    def fn(w, h):
        def body(i, h):
            inner = lambda h, w: lax.cond(i % 2 == 0, one, two, h, w)  # noqa: E731
            return lax.cond(jnp.sum(h) > 0, inner, one, h, w)
        return lax.fori_loop(0, 4, body, h)

    compiled, _, _ = compile_program(Program("branch_gated_by_data", fn, (W, H)))
    module = hloparse.parse(compiled)
    report = Report(account(module), module=module)
    kinds = sorted(c.resolution for c in report.conditionals)
    # The inner one reads the counter, but runs only on the trips the data picks: not per trip.
    assert kinds == ["data", "unresolved"] and not report.is_exact
    low, high = report.flops_bounds
    (outer,) = [c for c in report.conditionals if c.resolution == "data"]
    costs = sorted(b.cost.flops for b in outer.branches)
    # All 4 trips one dot, or all 4 the dearest inner branch (two dots, and the selector's ops)
    assert high - low == 4 * (costs[-1] - costs[0]) and costs[-1] - costs[0] > DOT


def test_the_batch_database_holds_the_range(tmp_path: Path):
    (case,) = DATA
    compiled, _, _ = compile_program(case.rolled)
    (tmp_path / "data.hlo").write_text(compiled)
    (tmp_path / "resolved.hlo").write_text(texts("fori10_mod2", "rolled")[0])
    db = tmp_path / "old.sqlite"
    schema_1_database(db, OLD_ROW)  # a database from before the range columns
    run_batch([tmp_path / "data.hlo", tmp_path / "resolved.hlo"], db=db, processes=1, timeout_s=120, progress=False)
    with ResultsDB(db) as results:
        rows = {Path(r["path"]).name: r for r in results.module_rows()}
    data, resolved = rows["data.hlo"], rows["resolved.hlo"]
    report = analyze(str(tmp_path / "data.hlo"))
    assert (data["flops_low"], data["flops_high"]) == report.flops_bounds and data["exact"] == 0
    assert data["range_reason"].startswith(f"between {report.flops_bounds[0]:,} and {report.flops_bounds[1]:,}")
    assert report.unresolved_conditionals[0].name in data["range_reason"]
    assert resolved["exact"] == 1 and resolved["range_reason"] is None
    assert resolved["flops_low"] == resolved["flops_high"] == resolved["flops"]
    assert rows["old.hlo"]["flops"] == 7 and rows["old.hlo"]["flops_low"] is None


def test_strict_exits_1_on_a_range(tmp_path: Path):
    import subprocess
    import sys

    (case,) = DATA
    path = tmp_path / "data.hlo"
    path.write_text(compile_program(case.rolled)[0])
    proc = subprocess.run([sys.executable, "-m", "hloflops.cli", str(path), "--strict", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "decided at run time" in proc.stderr
    assert json.loads(proc.stdout)["exact"] is False
    resolved = tmp_path / "resolved.hlo"
    resolved.write_text(texts("fori10_mod2", "rolled")[0])
    ok = subprocess.run([sys.executable, "-m", "hloflops.cli", str(resolved), "--strict"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr


NEVER_RUNS = """HloModule never_runs

cheap {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}

dear {
  p = f32[4] parameter(0)
  e = f32[4] exponential(p)
  ROOT m = f32[4] multiply(e, p)
}

body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4] get-tuple-element(s), index=1
  two = s32[] constant(2)
  r = s32[] remainder(i, two)
  zero = s32[] constant(0)
  p = pred[] compare(r, zero), direction=EQ
  inner = f32[4] conditional(p, x, x), true_computation=dear, false_computation=cheap
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4]) tuple(j, inner)
}

cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

dead {
  s = (s32[], f32[4]) parameter(0)
  w = (s32[], f32[4]) while(s), condition=cond, body=body
  ROOT y = f32[4] get-tuple-element(w), index=1
}

alive {
  s = (s32[], f32[4]) parameter(0)
  ROOT y = f32[4] get-tuple-element(s), index=1
}

ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[4]) tuple(zero, x)
  k = s32[] constant(1)
  ROOT outer = f32[4] conditional(k, t, t), branch_computations={dead, alive}
}
"""


GATED = NEVER_RUNS.replace("""  inner = f32[4] conditional(p, x, x), true_computation=dear, false_computation=cheap
""", """  k = s32[] constant(GATE)
  inner = f32[4] conditional(k, s, s), branch_computations={gated, passthrough}
""").replace("dead {", """gated {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4] get-tuple-element(s), index=1
  two = s32[] constant(2)
  r = s32[] remainder(i, two)
  zero = s32[] constant(0)
  p = pred[] compare(r, zero), direction=EQ
  ROOT counter = f32[4] conditional(p, x, x), true_computation=dear, false_computation=cheap
}

passthrough {
  s = (s32[], f32[4]) parameter(0)
  ROOT x = f32[4] get-tuple-element(s), index=1
}

dead {""").replace("branch_computations={dead, alive}", "branch_computations={dead, dead}")


def test_a_conditional_in_a_branch_never_taken_is_resolved():
    # A loop-counter conditional inside a loop that sits in a branch a constant selector never
    # takes runs 0 times, per trip: exact too.
    module = hloparse.parse(NEVER_RUNS)
    report = Report(account(module), module=module)
    by_name = {c.name: c for c in report.conditionals}
    assert (by_name["outer"].resolution, by_name["outer"].branch_executions) == ("constant", (0, 1))
    assert (by_name["inner"].resolution, by_name["inner"].branch_executions) == ("per-trip", (0, 0))
    assert report.is_exact and report.transcendentals == 0 and report.flops == 0
    # Inside the loop, behind a constant conditional: taken, it is evaluated per trip (i even:
    # 5 of 10 take the exponential); not taken, it never runs.
    for gate, counter, transcendentals in (("0", (5, 5), 5 * 4), ("1", (0, 0), 0)):
        module = hloparse.parse(GATED.replace("GATE", gate))
        report = Report(account(module), module=module)
        by_name = {c.name: c for c in report.conditionals}
        assert by_name["counter"].branch_executions == counter and report.is_exact, gate
        assert by_name["counter"].resolution == ("per-trip" if gate == "0" else "constant")
        assert report.transcendentals == transcendentals


def test_conditionals_sharing_a_name_are_left_unresolved():
    # Hand-written text may reuse an instruction name in two computations: never mixed up.
    text = NEVER_RUNS.replace("ROOT outer = f32[4] conditional(k, t, t), branch_computations={dead, alive}",
                              "ROOT inner = f32[4] conditional(k, t, t), branch_computations={alive, dead}")
    module = hloparse.parse(text)
    report = Report(account(module), module=module)
    assert {c.resolution for c in report.conditionals} == {"unresolved"} and not report.is_exact


COMMUNICATING = """HloModule communicating, replica_count=1, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

reduce_it {
  p = f32[64] parameter(0)
  ROOT r = f32[64] all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
}

scale_it {
  p = f32[64] parameter(0)
  ROOT m = f32[64] multiply(p, p)
}

body {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[64] get-tuple-element(s), index=1
  four = s32[] constant(4)
  r = s32[] remainder(i, four)
  zero = s32[] constant(0)
  p = pred[] compare(r, zero), direction=EQ
  y = f32[64] conditional(p, x, x), true_computation=reduce_it, false_computation=scale_it
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[64]) tuple(j, y)
}

cond {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f32[64] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[64]) tuple(zero, x)
  w = (s32[], f32[64]) while(t), condition=cond, body=body
  ROOT y = f32[64] get-tuple-element(w), index=1
}
"""


def test_communication_follows_the_branch_each_trip_takes():
    # Gradient-accumulation style: an all-reduce every 4th step (0, 4, 8), a multiply otherwise.
    # The dearest branch by flops is the multiply, which would have put 0 bytes on the wire.
    report = analyze(COMMUNICATING)
    (cond,) = report.conditionals
    assert cond.branch_executions == (3, 7) and report.is_exact
    per_all_reduce = 2 * (4 - 1) * 64 * 4 // 4
    assert report.communication_bytes == 3 * per_all_reduce
    assert report.to_dict()["communication"]["by_opcode"]["all-reduce"]["executions"] == 3
    assert sum(r.total.flops for r in report.rows if r.opcode == "multiply") == 7 * 64
