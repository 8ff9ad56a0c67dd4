"""Execution counts through the call graph, and the loop-aware accounting built on them."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.accounting import RESIDUAL, account
from hloflops.cost.costs import Cost, OpCost
from hloflops.loops.execution import execution_counts
from tests.loops.test_tripcount import DATA_DEPENDENT, NESTED

# Two calls of one computation (which holds a fusion), a conditional with two branches and an
# async call: every CONTROL role once.
SITES = """
HloModule sites

fused {
  a = f32[8] parameter(0)
  ROOT m = f32[8] multiply(a, a)
}

shared {
  p = f32[8] parameter(0)
  ROOT f = f32[8] fusion(p), kind=kLoop, calls=fused
}

big_branch {
  p = f32[8] parameter(0)
  e = f32[8] exponential(p)
  ROOT s = f32[8] add(e, e)
}

small_branch {
  p = f32[8] parameter(0)
  ROOT n = f32[8] negate(p)
}

async_body {
  p = f32[8] parameter(0)
  ROOT s = f32[8] sine(p)
}

ENTRY main {
  x = f32[8] parameter(0)
  c1 = f32[8] call(x), to_apply=shared
  c2 = f32[8] call(c1), to_apply=shared
  pred = pred[] parameter(1)
  cond = f32[8] conditional(pred, c2, c2), true_computation=big_branch, false_computation=small_branch
  start = ((f32[8]), f32[8], s32[]) async-start(cond), calls=async_body
  ROOT done = f32[8] async-done(start), calls=async_body
}
"""


def test_nested_loops_multiply_and_conditions_run_once_more():
    ec = execution_counts(hloparse.parse(NESTED))
    # outer: 3 iterations; inner: 4 per outer iteration (see test_tripcount).
    assert {k: ec.of(k) for k in ("main", "outer_body", "outer_cond", "inner_body", "inner_cond")} == {
        "main": 1, "outer_body": 3, "outer_cond": 4, "inner_body": 3 * 4, "inner_cond": 3 * (4 + 1)}
    assert all(ec.known.values())
    assert ec.loop_of["inner_body"] == "inner" and ec.loop_of["outer_body"] == "outer"
    assert ec.parent_loop("inner") == "outer" and ec.parent_loop("outer") is None


def test_call_sites_sum_fusions_inherit_conditional_and_async():
    module = hloparse.parse(SITES)
    ec = execution_counts(module)
    assert ec.of("shared") == 2 and ec.of("fused") == 2  # two call sites; the fusion runs per call
    assert ec.of("async_body") == 1  # async-start runs it; async-done names it but does not rerun it
    assert ec.of("big_branch") == 1 and ec.of("small_branch") == 1  # "if taken", no choice given
    assert not ec.is_known("big_branch") and ec.is_known("shared")
    chosen = execution_counts(module, branch_choice={"cond": 0})
    assert (chosen.of("big_branch"), chosen.of("small_branch")) == (1, 0)
    assert chosen.fusion_of["fused"] == "f"


def test_unknown_trip_count_counts_the_lower_bound_and_says_so():
    ec = execution_counts(hloparse.parse(DATA_DEPENDENT))
    assert ec.trip_counts["w"].value is None
    assert (ec.of("body"), ec.of("cond")) == (0, 1)  # body: lower bound 0; condition: at least once
    assert not ec.is_known("body") and not ec.is_known("cond") and ec.is_known("main")
    overridden = execution_counts(hloparse.parse(DATA_DEPENDENT), overrides={"w": 6})
    assert (overridden.of("body"), overridden.of("cond"), overridden.is_known("body")) == (6, 7, True)


# ---- accounting bookkeeping with a cost function we control ---------------------------------

def one_flop_each(module, computation, instruction) -> OpCost:
    """1 flop per arithmetic instruction, 0 for plumbing: makes every total countable by eye."""
    plumbing = {"parameter", "constant", "tuple", "get-tuple-element", "while", "call", "fusion", "conditional",
                "async-start", "async-done", "copy", "bitcast"}
    return OpCost(Cost(0 if instruction.opcode in plumbing else 1, 0, 0))


def test_nested_accounting_and_reconciliation_by_hand():
    module = hloparse.parse(NESTED)
    # Arithmetic ops: inner_cond 1 (compare), inner_body 1 (add), outer_cond 1, outer_body 1.
    # Exact: outer_cond 4 + outer_body 3 + inner_body 12 + inner_cond 15 = 34.
    # XLA counts each loop once: outer_cond 1 + outer_body 1 + (inner_body 1 + inner_cond 1) = 4.
    acc = account(module, cost_fn=one_flop_each, xla={"flops": 4.0})
    assert acc.total.flops == 34
    loops = {loop.name: loop for loop in acc.loops}
    # Innermost first (hloflops.reconciliation). Inner: one execution of it per outer trip XLA
    # sees, 4 body + 5 condition = 9, less XLA's one body and one condition (2): 7, the inner
    # trips after the first and the extra checks. Outer: its total 34 less XLA's one body
    # (1 + inner body 1 + inner condition 1) and one condition (1) = 30, less the inner loop's 7:
    # 23 = the 2 outer trips after the first, whole (2 x (1 + 4 + 5) = 20), and the 3 outer
    # checks after the first. Each lies within its loop's total (34 and 27).
    assert (loops["outer"].extra_over_xla.flops, loops["inner"].extra_over_xla.flops) == (23, 7)
    assert acc.reconciliation == {"outer": 23, "inner": 7, RESIDUAL: 0}
    assert sum(acc.reconciliation.values()) == acc.total.flops - 4
    assert loops["inner"].parent == "outer" and loops["inner"].executions == 3
    assert loops["inner"].body_cost.flops == 2 and loops["inner"].total.flops == 3 * (4 * 1 + 5 * 1)
    assert loops["outer"].total.flops == 34 - 0  # everything but ENTRY's (plumbing-only) ops
    assert sum(r.total.flops for r in acc.rows) == acc.total.flops


def test_conditional_takes_the_largest_branch_and_reports_all():
    acc = account(hloparse.parse(SITES), cost_fn=one_flop_each, xla={"flops": 0.0})
    # shared's fusion body: 1 multiply, run twice = 2; big branch 2 ops; small 1; async sine 1.
    assert acc.total.flops == 2 + 2 + 1
    assert acc.total_lower_bound.flops == 2 + 1 + 1
    (cond,) = acc.conditionals
    assert (cond.chosen, cond.smallest) == (0, 1)
    assert [(b.computation, b.cost.flops) for b in cond.branches] == [("big_branch", 2), ("small_branch", 1)]
    small_rows = [r for r in acc.rows if r.computation == "small_branch"]
    assert small_rows and all(r.executions == 0 and not r.executions_known for r in small_rows)


def test_unknown_loop_is_visible_in_the_accounting():
    acc = account(hloparse.parse(DATA_DEPENDENT), cost_fn=one_flop_each, xla={"flops": 4.0})
    (loop,) = acc.loops
    assert loop.trip_count is None and loop.source == "unknown" and loop.bounds == (0, None)
    assert not acc.executions_known
    assert all(not r.executions_known for r in acc.rows if r.computation in ("body", "cond"))
    # body (add, add) at 0 executions, cond (reduce, compare) once: 2; XLA: 2 + 2 = 4.
    assert acc.total.flops == 2 and acc.reconciliation == {"w": -2, RESIDUAL: 0}
    fixed = account(hloparse.parse(DATA_DEPENDENT), trip_counts={"w": 5}, cost_fn=one_flop_each, xla={"flops": 4.0})
    assert fixed.total.flops == 5 * 2 + 6 * 2 and fixed.executions_known


# ---- with the real rules and XLA itself ------------------------------------------------------

def xla_flops(text: str) -> float:
    pytest.importorskip("jax")
    from hloflops.xla.compare import xla_cost_of_text

    return xla_cost_of_text(text)["flops"]


MATMUL_331 = """
HloModule mm331

ENTRY main {
  a = f32[331,331]{1,0} parameter(0)
  b = f32[331,331]{1,0} parameter(1)
  ROOT d = f32[331,331]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_loop_free_residual_is_float32_rounding():
    # 2 * 331^3 = 72529382 is not a float32; XLA reports the nearest one, 72529384.
    assert xla_flops(MATMUL_331) == 72529384.0
    acc = account(hloparse.parse(MATMUL_331))
    assert acc.total.flops == 2 * 331**3
    assert acc.loops == () and acc.reconciliation == {RESIDUAL: 2 * 331**3 - 72529384}


def test_real_rules_on_nested_loops_reconcile_with_xla_exactly():
    xla = xla_flops(NESTED)
    acc = account(hloparse.parse(NESTED))
    assert acc.xla_estimate["flops"] == xla  # the colleague's estimate equals XLA's own number
    assert acc.total.flops == 34  # every arithmetic op is a scalar: 1 flop each, as above
    assert acc.reconciliation == {"outer": 23, "inner": 7, RESIDUAL: 0}  # as by hand above
