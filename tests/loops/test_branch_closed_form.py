"""The closed form of per-trip conditionals (hloflops.loops.branch_closed_form) agrees with
enumerating every trip: on the catalogue of tests/programs/branch_programs.py at both stages, on
hand-written counter loops (affine counters, periodic and threshold selectors), and it counts a
billion trips without stepping them. Split from test_branches_per_trip.py, which checks the counts
themselves against XLA.
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

import hloparse  # noqa: E402
from hloflops.accounting import account  # noqa: E402
from hloflops.loops.branches import resolve_conditionals  # noqa: E402
from hloflops.loops.execution import execution_counts  # noqa: E402
from hloflops.report.report import Report  # noqa: E402
from tests.programs.branch_programs import PAIRS  # noqa: E402
from tests.programs.compile import compile_program  # noqa: E402


# ---- closed form: affine counters, periodic and threshold selectors -------------------------

def test_the_closed_form_agrees_with_enumeration_on_the_catalogue():
    closed = 0
    for pair in PAIRS:
        compiled, lowered, _ = compile_program(pair.rolled)
        for text in (compiled, lowered):
            module = hloparse.parse(text)
            ex = execution_counts(module)
            fast = resolve_conditionals(module, ex.trip_counts, ex.order, closed_form_from=0)
            slow = resolve_conditionals(module, ex.trip_counts, ex.order, closed_form_from=10**18)
            assert {k: r.counts for k, r in fast.items()} == {k: r.counts for k, r in slow.items()}, pair.name
            closed += sum("closed form" in r.note for r in fast.values())
            assert not any("closed form" in r.note for r in slow.values())
    # jax's own lowerings of i % k, i == 0, i < c, i >= n - c (before and after optimization,
    # through its negate / select / and rewriting of remainder) all have a closed form: one
    # conditional of each of the programs, at both stages (the outer-counter one of the nested
    # loops reads two levels, the backward ones the indices their forward stacked, a cond inside a
    # cond passes the outer one's test: enumerated).
    assert closed == 2 * len(PAIRS) == 26


SELECTORS = {
    "mod3": """  three = s32[] constant(3)
  r = s32[] remainder(i, three)
  zero = s32[] constant(0)
  sel = pred[] compare(r, zero), direction=EQ""",
    "lt": """  c = s32[] constant(1234)
  sel = pred[] compare(i, c), direction=LT""",
    "eq_first": """  c = s32[] constant(INIT)
  sel = pred[] compare(i, c), direction=EQ""",
    "mask7": """  m = s32[] constant(7)
  a = s32[] and(i, m)
  zero = s32[] constant(0)
  sel = pred[] compare(a, zero), direction=EQ""",
    "affine_gt": """  two = s32[] constant(2)
  k2 = s32[] multiply(i, two)
  five = s32[] constant(5)
  o = s32[] add(k2, five)
  c = s32[] constant(777)
  sel = pred[] compare(o, c), direction=GT""",
    "jax_abs_and": """  zero = s32[] constant(0)
  lt = pred[] compare(i, zero), direction=LT
  neg = s32[] negate(i)
  ab = s32[] select(lt, neg, i)
  one = s32[] constant(1)
  b = s32[] and(ab, one)
  sel = pred[] compare(b, zero), direction=EQ""",
    "switch_rem3": """  three = s32[] constant(3)
  sel = s32[] remainder(i, three)""",
    "switch_clamped": """  three = s32[] constant(3)
  r = s32[] remainder(i, three)
  lo = s32[] constant(0)
  hi = s32[] constant(1)
  sel = s32[] clamp(lo, r, hi)""",
    "quadratic": """  sq = s32[] multiply(i, i)
  c = s32[] constant(1000000)
  sel = pred[] compare(sq, c), direction=LT""",
}

COUNTER_LOOP = """HloModule counter_loop

b0 {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}

b1 {
  p = f32[4] parameter(0)
  ROOT e = f32[4] exponential(p)
}

b2 {
  p = f32[4] parameter(0)
  ROOT c = f32[4] cosine(p)
}

body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4] get-tuple-element(s), index=1
SELECTOR
  y = f32[4] conditional(sel, BRANCHES)
  step = s32[] constant(STEP)
  j = s32[] add(i, step)
  ROOT t = (s32[], f32[4]) tuple(j, y)
}

cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(LIMIT)
  ROOT keep = pred[] compare(i, n), direction=DIR
}

ENTRY main {
  x = f32[4] parameter(0)
  init = s32[] constant(INIT)
  t = (s32[], f32[4]) tuple(init, x)
  w = (s32[], f32[4]) while(t), condition=cond, body=body
  ROOT y = f32[4] get-tuple-element(w), index=1
}
"""


def counter_loop(selector: str, init: int, step: int, limit: int) -> hloparse.Module:
    index = selector.startswith("switch")
    branches = "x, x, x), branch_computations={b0, b1, b2}" if index else \
        "x, x), true_computation=b1, false_computation=b0"
    text = (COUNTER_LOOP.replace("SELECTOR", SELECTORS[selector]).replace("sel, BRANCHES)", "sel, " + branches)
            .replace("STEP", str(step)).replace("LIMIT", str(limit)).replace("INIT", str(init))
            .replace("DIR", "LT" if step > 0 else "GT"))
    return hloparse.parse(text)


@pytest.mark.parametrize("selector", sorted(SELECTORS))
@pytest.mark.parametrize("init, step, limit", [(0, 1, 5000), (-2500, 1, 2500), (4999, -1, -1), (3, 7, 40000)])
def test_the_closed_form_agrees_with_enumeration_by_hand(selector, init, step, limit):
    module = counter_loop(selector, init, step, limit)
    ex = execution_counts(module)
    (fast,) = resolve_conditionals(module, ex.trip_counts, ex.order, closed_form_from=0).values()
    (slow,) = resolve_conditionals(module, ex.trip_counts, ex.order, closed_form_from=10**18).values()
    assert fast.kind == slow.kind == "per-trip" and fast.counts == slow.counts
    # Everything but the square of the counter (not affine, not periodic) is counted without
    # stepping each trip.
    assert ("closed form" in fast.note) == (selector != "quadratic")


def test_a_billion_trips_are_counted_in_closed_form():
    n = 10**9
    module = counter_loop("mod3", 0, 1, n)
    report = Report(account(module), module=module)
    (cond,) = report.conditionals
    assert cond.branch_executions == ((n + 2) // 3, n - (n + 2) // 3) and report.is_exact
    assert report.transcendentals == 4 * ((n + 2) // 3)
    # Beyond the budget and without a closed form it stays a range, never a guess.
    squared = counter_loop("quadratic", 0, 1, n)
    (cond,) = Report(account(squared), module=squared).conditionals
    assert cond.resolution == "unresolved" and "evaluations" in cond.note
