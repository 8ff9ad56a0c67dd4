"""The rules of tests/support/invariants.py on generated loop nests (tests/programs/loop_nests.py),
with XLA's count of unrolled twins as the truth.

For each nest, on the module after optimization and before it:
- the checker's rules (formula = the accounting at every count tried and the totals at the lower
  bounds; reconciliation rows add up, each loop's within its total; bounds hold the totals);
- at concrete counts of the runtime loops (0 and 3), the accounting given those counts has the
  twin's dot FLOPs and transcendentals (the rolled program's counter and predicate ops aside)
  where no conditional reads data, and so does the formula (evaluate at those counts);
- where a conditional reads data, its twins forcing either branch everywhere lie within the
  bounds: transcendentals as XLA counts the twin, flops as XLA counts it plus what the rolled
  program runs besides (counters, predicates: the totals less the all-dot twin, which is what
  the totals count).

The suite runs `EXAMPLES` derandomized draws (XLA's answers are cached on disk, see
tests/programs/compile.py); benchmarks/loop_nest_invariants.py runs many more.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("jax")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import hloparse  # noqa: E402
from hloflops.accounting import account  # noqa: E402
from tests.programs.compile import compile_program  # noqa: E402
from tests.programs.loop_nests import OPS, Level, Nest, rolled, unrolled  # noqa: E402
from tests.support.invariants import violations  # noqa: E402

EXAMPLES = 10
COUNTS = (0, 3)  # a count below a clamped level's fewest trips (2..4) is skipped


@st.composite
def levels(draw, depth: int) -> Level:
    kind = draw(st.sampled_from(["known", "runtime", "clamped", "scan"]))
    ops = draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=3))
    return Level(kind, draw(st.integers(2, 4)), start=0 if kind == "scan" else draw(st.integers(0, 3)),
                 step=1 if kind == "scan" else draw(st.integers(1, 3)), ops=tuple(ops),
                 threshold=draw(st.integers(1, 3)), even=draw(st.booleans()))


@st.composite
def nests(draw) -> Nest:
    depth = draw(st.integers(1, 3))
    found = []
    for d in range(depth):
        level = draw(levels(d))
        if d < depth - 1:  # where the next level runs in this body
            ops = list(level.ops)
            ops.insert(draw(st.integers(0, len(ops))), "inner")
            level = Level(level.kind, level.trips, level.start, level.step, tuple(ops), level.threshold, level.even)
        found.append(level)
    return Nest(tuple(found))


def dots(acc) -> int:
    return sum(r.total.flops for r in acc.rows if r.opcode == "dot")


@functools.lru_cache(maxsize=64)
def twin_truth(nest: Nest, count: int, force: bool) -> dict:
    compiled, _, xla = compile_program(unrolled(nest, count, force))
    acc = account(hloparse.parse(compiled))
    assert not acc.loops and not acc.conditionals  # the twin has neither: XLA's count is exact
    return {"dots": dots(acc), "transcendentals": int(xla.get("transcendentals", 0)), "flops": int(xla.get("flops", 0))}


def check_nest(nest: Nest) -> None:
    compiled, lowered, _ = compile_program(rolled(nest))
    has_data = any("cond_data" in lv.ops for lv in nest.levels)
    for stage, text in (("optimized", compiled), ("before", lowered)):
        module = hloparse.parse(text)
        acc = account(module)
        found = violations(module, acc)
        assert not found, f"{nest} ({stage}): {found}"
        names = acc.formula.names if acc.formula is not None else ()
        for count in COUNTS if nest.runtime else (None,):
            if count is not None and any(lv.kind == "clamped" and lv.trips > count for lv in nest.levels):
                continue  # below a proved lower bound: no execution has it
            counts = {n: count for n in names} if count is not None else {}
            at = account(module, trip_counts=counts) if counts else acc
            truth = twin_truth(nest, count or 0, True)
            if not has_data:
                assert (dots(at), at.total.transcendentals) == (truth["dots"], truth["transcendentals"]), \
                    f"{nest} ({stage}) at {counts}"
                if acc.formula is not None:
                    assert acc.formula.evaluate(counts).transcendentals == truth["transcendentals"]
                continue
            # The dot branch is the dearer in flops: the totals count it everywhere, as the twin
            # forcing True does; what the rolled program runs besides (counters, predicates) is
            # the same for every execution at these counts.
            dear = twin_truth(nest, count or 0, True)
            overhead = at.total.flops - dear["flops"]
            for force in (True, False):
                forced = twin_truth(nest, count or 0, force)
                low, high = at.bounds["transcendentals"]
                assert low <= forced["transcendentals"] and (high is None or forced["transcendentals"] <= high), \
                    f"{nest} ({stage}) at {counts}, data branch forced {force}: {forced} not in {at.bounds}"
                low, high = at.bounds["flops"]
                runs = forced["flops"] + overhead
                assert low <= runs and (high is None or runs <= high), \
                    f"{nest} ({stage}) at {counts}, data branch forced {force}: {runs} flops not in {at.bounds}"


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(nests())
def test_generated_nests_keep_the_rules(nest):
    check_nest(nest)


def test_scan_inside_a_runtime_loop_with_counter_conditionals():
    """A named nest besides the draws: a runtime loop around a scan and a known loop whose
    conditionals read their own counter and the runtime loop's."""
    nest = Nest((Level("runtime", 0, start=1, step=2, ops=("inner", "cond_counter")),
                 Level("known", 3, start=2, step=1, ops=("switch", "cond_outer", "inner")),
                 Level("scan", 2, ops=("dot", "tanh"))))
    check_nest(nest)
