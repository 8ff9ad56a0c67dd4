"""Trip counts read from hand-written HLO loops: every source, direction and tracing path.

Each module below is a counter loop written the way XLA or jax writes them (or deliberately
not); the expected count is what the loop does when run, worked out in the comment."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.loops.tripcount import (
    EVALUATION_LIMIT,
    TripCount,
    all_trip_counts,
    infer_trip_count,
    solve_counter,
    trip_count,
)


def counter_loop(*, init: str = "0", step: str = "1", bound: str = "10", direction: str = "LT",
                 dtype: str = "s32", update: str = "add", reversed_compare: bool = False,
                 backend_config: str = "") -> str:
    """`while (i <dir> bound) i = i <update> step` with i starting at `init`."""
    lhs, rhs = ("b", "i") if reversed_compare else ("i", "b")
    config = f", backend_config={backend_config}" if backend_config else ""
    return f"""
HloModule counter

cond {{
  p = ({dtype}[], f32[4]) parameter(0)
  i = {dtype}[] get-tuple-element(p), index=0
  b = {dtype}[] constant({bound})
  ROOT c = pred[] compare({lhs}, {rhs}), direction={direction}
}}

body {{
  p = ({dtype}[], f32[4]) parameter(0)
  i = {dtype}[] get-tuple-element(p), index=0
  s = {dtype}[] constant({step})
  n = {dtype}[] {update}(i, s)
  x = f32[4] get-tuple-element(p), index=1
  y = f32[4] add(x, x)
  ROOT t = ({dtype}[], f32[4]) tuple(n, y)
}}

ENTRY main {{
  a = f32[4] parameter(0)
  z = {dtype}[] constant({init})
  t = ({dtype}[], f32[4]) tuple(z, a)
  ROOT w = ({dtype}[], f32[4]) while(t), condition=cond, body=body{config}
}}
"""


def tc_of(text: str, name: str = "w", overrides=None) -> TripCount:
    module = hloparse.parse(text)
    for comp, inst in module.instructions():
        if inst.name == name and inst.opcode == "while":
            return trip_count(module, comp, inst, overrides)
    raise AssertionError(f"no while {name}")


def brute_force(init: int, step: int, direction: str, bound: int, limit: int = 1_000_000) -> int | None:
    ops = {"LT": int.__lt__, "LE": int.__le__, "GT": int.__gt__, "GE": int.__ge__, "NE": int.__ne__,
           "EQ": int.__eq__}
    i, k = init, 0
    while ops[direction](i, bound):
        i += step
        k += 1
        if k > limit:
            return None
    return k


@pytest.mark.parametrize(
    "init,step,bound,direction,expected",
    [
        (0, 1, 10, "LT", 10),  # i = 0..9
        (0, 1, 10, "LE", 11),  # i = 0..10
        (0, 3, 10, "LT", 4),  # 0, 3, 6, 9
        (0, 3, 9, "LE", 4),  # 0, 3, 6, 9 (the `while i<=9: i+=3` XLA gives 4 for)
        (5, 7, 100000, "LT", 14285),  # XLA's {5,7} example: ceil(99995 / 7)
        (10, -1, 0, "GT", 10),  # decrementing: 10..1
        (10, -1, 0, "GE", 11),  # 10..0
        (10, -3, 0, "GT", 4),  # 10, 7, 4, 1
        (0, 1, 10, "NE", 10),
        (0, 2, 10, "NE", 5),
        (12, 1, 10, "LT", 0),  # false on entry
        (3, 1, 3, "EQ", 1),  # runs once, then 4 == 3 is false
        (-5, 1, 5, "LT", 10),
    ],
)
def test_counter_pattern_closed_form(init, step, bound, direction, expected):
    assert brute_force(init, step, direction, bound) == expected  # the comment's arithmetic
    tc = tc_of(counter_loop(init=str(init), step=str(step), bound=str(bound), direction=direction))
    assert (tc.value, tc.source, tc.lower, tc.upper) == (expected, "pattern", expected, expected), tc


def test_reversed_operands_and_subtract_update():
    # `10 > i` is `i < 10`; `i - (-2)` steps by +2: 0, 2, 4, 6, 8 -> 5 iterations.
    tc = tc_of(counter_loop(bound="10", direction="GT", reversed_compare=True, update="subtract", step="-2"))
    assert (tc.value, tc.source) == (5, "pattern")


def test_unsigned_and_64_bit_counters():
    assert tc_of(counter_loop(dtype="u32", bound="7")).value == 7
    assert tc_of(counter_loop(dtype="s64", init="-3000000000", bound="3000000000", step="1000000000")).value == 6


@pytest.mark.parametrize("init,step,bound,direction", [(0, 1, 10, "LT"), (7, 2, 30, "LE"), (20, -3, -4, "GT"),
                                                       (1, 5, 101, "NE"), (9, -1, 9, "GE")])
def test_solve_counter_matches_brute_force(init, step, bound, direction):
    assert solve_counter(init, step, direction, bound) == brute_force(init, step, direction, bound)


def test_counter_moving_away_is_not_a_pattern():
    # i = 0, i -= 1 while i < 10: never false until s8 wraps around at -128 -> 127 (129 steps).
    tc = tc_of(counter_loop(dtype="s8", step="-1", bound="10", direction="LT"))
    assert (tc.value, tc.source) == (129, "evaluation"), tc


def test_ne_that_skips_its_bound_runs_until_wraparound():
    # s8: 0, 3, 6, ... never hits 10; it wraps (126 + 3 = -127, ...) and eventually does.
    i, k = 0, 0
    while i != 10:
        i = ((i + 3 + 128) % 256) - 128
        k += 1
        if k > 1000:
            break
    expected = k
    tc = tc_of(counter_loop(dtype="s8", step="3", bound="10", direction="NE"))
    assert (tc.value, tc.source) == (expected, "evaluation")


def test_float_counter_is_evaluated_in_float32():
    # x = 0.0; while x < 1.0: x += 0.1, every add rounded to float32. Whether the tenth sum lands
    # just under or over 1.0 is rounding, so the expected count is computed the same way here.
    import numpy as np

    x, k = np.float32(0.0), 0
    while x < np.float32(1.0):
        x = np.float32(x + np.float32(0.1))
        k += 1
    tc = tc_of(counter_loop(dtype="f32", init="0", step="0.1", bound="1"))
    assert (tc.value, tc.source) == (k, "evaluation")


MULTIPLY = """
HloModule mul

cond {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] constant(1000)
  ROOT c = pred[] compare(i, b), direction=LT
}

body {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  two = s32[] constant(2)
  m = s32[] multiply(i, two)
  ROOT t = (s32[]) tuple(m)
}

ENTRY main {
  one = s32[] constant(1)
  t = (s32[]) tuple(one)
  ROOT w = (s32[]) while(t), condition=cond, body=body
}
"""


def test_multiplicative_counter_is_evaluated():
    # 1, 2, 4, ..., 512 are < 1000: 10 iterations (XLA's brute force gives 10 too).
    tc = tc_of(MULTIPLY)
    assert (tc.value, tc.source) == (10, "evaluation")


# A fori_loop(0, n) whose n is carried in the tuple (loop-invariant), initial values coming in
# through a call and a fusion boundary, with the compare inside a fusion (after-opt style).
CARRIED_BOUND = """
HloModule carried

fused_compare {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}

cond {
  p = (s32[], s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  ROOT c = pred[] fusion(i, n), kind=kLoop, calls=fused_compare
}

body {
  p = (s32[], s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[4] get-tuple-element(p), index=2
  ROOT t = (s32[], s32[], f32[4]) tuple(i1, n, x)
}

loop_wrapper {
  q = (s32[], s32[], f32[4]) parameter(0)
  ROOT w = (s32[], s32[], f32[4]) while(q), condition=cond, body=body
}

ENTRY main {
  a = f32[4] parameter(0)
  z = s32[] constant(3)
  seven = s32[] constant(7)
  n = s32[] multiply(seven, seven)
  cz = s32[] copy(z)
  t = (s32[], s32[], f32[4]) tuple(cz, n, a)
  ROOT c = (s32[], s32[], f32[4]) call(t), to_apply=loop_wrapper
}
"""


def test_bound_carried_in_the_tuple_and_init_through_a_call():
    # i from 3 to 49 (= 7 * 7), step 1: 46 iterations.
    tc = tc_of(CARRIED_BOUND)
    assert (tc.value, tc.source) == (46, "pattern"), tc


NESTED = """
HloModule nested

inner_cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] constant(5)
  ROOT c = pred[] compare(i, b), direction=LT
}

inner_body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  x = f32[4] get-tuple-element(p), index=1
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[4]) tuple(i1, x)
}

outer_cond {
  p = (s32[], s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  b = s32[] constant(3)
  ROOT c = pred[] compare(j, b), direction=LT
}

outer_body {
  p = (s32[], s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  start = s32[] get-tuple-element(p), index=1
  x = f32[4] get-tuple-element(p), index=2
  t = (s32[], f32[4]) tuple(start, x)
  inner = (s32[], f32[4]) while(t), condition=inner_cond, body=inner_body
  y = f32[4] get-tuple-element(inner), index=1
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  ROOT r = (s32[], s32[], f32[4]) tuple(j1, start, y)
}

ENTRY main {
  a = f32[4] parameter(0)
  z = s32[] constant(0)
  s = s32[] constant(1)
  t = (s32[], s32[], f32[4]) tuple(z, s, a)
  ROOT outer = (s32[], s32[], f32[4]) while(t), condition=outer_cond, body=outer_body
}
"""


def test_nested_loop_init_from_the_enclosing_loop_state():
    # The inner counter starts at the outer loop's element 1, which the outer body never
    # changes (so it is 1 on every outer iteration): 1..4 -> 4 inner iterations; outer 3.
    counts = all_trip_counts(hloparse.parse(NESTED))
    assert {k: (v.value, v.source) for k, v in counts.items()} == {"inner": (4, "pattern"), "outer": (3, "pattern")}


def test_init_that_changes_with_the_enclosing_loop_is_unknown():
    # Make the inner start the outer counter j: its trip count differs per outer iteration.
    text = NESTED.replace("t = (s32[], f32[4]) tuple(start, x)", "t = (s32[], f32[4]) tuple(j, x)")
    tc = tc_of(text, "inner")
    assert tc.value is None and tc.source == "unknown" and "enclosing loop" in tc.note
    assert (tc.lower, tc.upper) == (0, None)


DATA_DEPENDENT = """
HloModule datadep

add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  p = (s32[], f32[4]) parameter(0)
  x = f32[4] get-tuple-element(p), index=1
  zero = f32[] constant(0)
  s = f32[] reduce(x, zero), dimensions={0}, to_apply=add_f
  lim = f32[] constant(100)
  ROOT c = pred[] compare(s, lim), direction=LT
}

body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[4] get-tuple-element(p), index=1
  y = f32[4] add(x, x)
  ROOT t = (s32[], f32[4]) tuple(i1, y)
}

ENTRY main {
  a = f32[4] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[4]) tuple(z, a)
  ROOT w = (s32[], f32[4]) while(t), condition=cond, body=body
}
"""


def test_data_dependent_loop_is_unknown_never_one():
    tc = tc_of(DATA_DEPENDENT)
    assert tc == TripCount(None, "unknown", 0, None, tc.note)
    assert "reduce" in tc.note


def test_overrides_by_name_and_by_op_name_pattern():
    text = DATA_DEPENDENT.replace("while(t), condition=cond, body=body",
                                  'while(t), condition=cond, body=body, metadata={op_name="jit(f)/while"}')
    by_name = tc_of(text, overrides={"w": 7})
    assert (by_name.value, by_name.source, by_name.lower, by_name.upper) == (7, "override", 7, 7)
    by_pattern = tc_of(text, overrides={"*/while": 9})
    assert (by_pattern.value, by_pattern.source) == (9, "override")
    assert tc_of(text, overrides={"jit(g)/*": 9}).value is None  # pattern does not match
    # A pattern never replaces a count the analysis found; an exact name does.
    known_loop = counter_loop(bound="10").replace("body=body", 'body=body, metadata={op_name="jit(f)/while"}')
    assert (tc_of(known_loop, overrides={"*while*": 3}).value, tc_of(known_loop, overrides={"*while*": 3}).source) \
        == (10, "pattern")
    renamed = tc_of(known_loop, overrides={"w": 3})
    assert (renamed.value, renamed.source) == (3, "override") and "found 10" in renamed.note
    with pytest.raises(ValueError):
        tc_of(text, overrides={"w": -1})


def test_backend_config_wins_and_a_disagreement_is_noted():
    config = '{"known_trip_count":{"n":"11"}}'
    tc = tc_of(counter_loop(bound="10", backend_config=config))
    assert (tc.value, tc.source) == (11, "backend_config")
    assert "gives 10" in tc.note
    agreeing = tc_of(counter_loop(bound="11", backend_config=config))
    assert (agreeing.value, agreeing.source, agreeing.note) == (11, "backend_config", "XLA's known_trip_count")


def test_body_not_followable_but_condition_false_on_entry_is_zero():
    # The counter is updated from a reduce (opaque), but 12 < 10 is false at the first check.
    text = counter_loop(init="12", bound="10").replace(
        "n = s32[] add(i, s)", 'n = s32[] custom-call(i, s), custom_call_target="opaque_step"')
    module = hloparse.parse(text)
    comp = module.entry
    assert infer_trip_count(module, comp, comp.by_name["w"]).value == 0


def test_constant_true_condition_is_unknown_with_one_certain_iteration():
    text = counter_loop().replace("ROOT c = pred[] compare(i, b), direction=LT", "ROOT c = pred[] constant(true)")
    tc = tc_of(text)
    assert (tc.value, tc.lower, tc.upper) == (None, 1, None)


def test_evaluation_gives_up_at_its_limit_with_a_proven_lower_bound():
    # s64 counter from 0 by +1 while != -1: 2^64 - 1 iterations, far past the limit.
    tc = tc_of(counter_loop(dtype="s64", bound="-1", direction="NE"))
    assert (tc.value, tc.source, tc.lower) == (None, "unknown", EVALUATION_LIMIT)


SEQUENTIAL = """
HloModule sequential

cond_a {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] constant(4)
  ROOT c = pred[] compare(i, b), direction=LT
}

body_a {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[]) tuple(i1)
}

cond_b {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] constant(10)
  ROOT c = pred[] compare(i, b), direction=LT
}

body_b {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[]) tuple(i1)
}

ENTRY main {
  z = s32[] constant(0)
  t = (s32[]) tuple(z)
  first = (s32[]) while(t), condition=cond_a, body=body_a
  ROOT second = (s32[]) while(first), condition=cond_b, body=body_b
}
"""


def test_init_from_an_earlier_loops_result_is_stepped():
    # `first` leaves its counter at 4; `second` counts from there to 10: 6 iterations.
    counts = all_trip_counts(hloparse.parse(SEQUENTIAL))
    assert {k: v.value for k, v in counts.items()} == {"first": 4, "second": 6}


BRANCHY = """
HloModule branchy

step_big {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  three = s32[] constant(3)
  ROOT r = s32[] add(i, three)
}

step_small {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  ROOT r = s32[] add(i, one)
}

cond {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] constant(20)
  ROOT c = pred[] compare(i, b), direction=LT
}

body {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  ten = s32[] constant(10)
  small = pred[] compare(i, ten), direction=LT
  t = (s32[]) tuple(i)
  n = s32[] conditional(small, t, t), true_computation=step_small, false_computation=step_big
  ROOT r = (s32[]) tuple(n)
}

ENTRY main {
  z = s32[] constant(0)
  t = (s32[]) tuple(z)
  ROOT w = (s32[]) while(t), condition=cond, body=body
}
"""


def test_counter_stepped_through_a_conditional_is_evaluated():
    # i += 1 while i < 10 (10 steps to 10), then i += 3: 10, 13, 16, 19 -> 22 (4 more): 14.
    tc = tc_of(BRANCHY)
    assert (tc.value, tc.source) == (14, "evaluation")
