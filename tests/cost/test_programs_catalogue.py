"""Guards on the program catalogues: sizes, that everything compiles, and that what each entry
claims is true (hand formulas against XLA's live totals; pairs compute the same values; rolled
programs loop and unrolled ones do not; recorded trip counts are the real ones).

This is a guard for the catalogues, not a test of the cost analysis.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from tests.programs import FAMILIES, FORMULA_KEYS  # noqa: E402
from tests.programs.compile import compile_program, concrete_args, executable, run_program  # noqa: E402
from tests.programs.lax_programs import PROGRAMS  # noqa: E402
from tests.programs.loop_programs import PAIRS, UNKNOWN_TRIP, UNKNOWN_TRIPS  # noqa: E402

TRANSCENDENTAL_FAMILIES = [
    "exp",
    "log",
    "logistic",
    "pow",
    "sqrt",
    "cbrt",
    "rsqrt",
    "tanh",
    "sin",
    "cos",
    "expm1",
    "log1p",
    "atan2",
    "tan",
    "erf",
]
# A per-kind formula is only meaningful if the optimized module still holds that kind of op.
KIND_OPCODE = {
    "dot_flops": "dot",
    "conv_flops": "convolution",
    "sort_flops": "sort",
    "reduce_flops": "reduce",
    "reduce_window_flops": "reduce-window",
    "fft_flops": "fft",
}
KNOWN_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def test_catalogue_sizes_and_unique_names():
    assert len(PROGRAMS) >= 220
    assert len(PAIRS) >= 40
    names = [p.name for p in PROGRAMS] + [n for pair in PAIRS for n in (pair.rolled.name, pair.unrolled.name)]
    names += [u.program.name for u in UNKNOWN_TRIPS]
    assert len(names) == len(set(names))
    assert {p.tags[0] for p in PROGRAMS} == set(FAMILIES)
    for family in FAMILIES:
        assert sum(p.tags[0] == family for p in PROGRAMS) >= 3, family
    for family in TRANSCENDENTAL_FAMILIES:
        assert any(p.name.startswith(f"{family}_f32") for p in PROGRAMS), family


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_lax_program_compiles_and_formula_totals_match_xla(program):
    compiled_text, lowered_text, xla_cost = compile_program(program)
    assert compiled_text.startswith("HloModule"), compiled_text[:200]
    assert lowered_text.startswith("HloModule"), lowered_text[:200]
    formula = program.formula or {}
    if "flops" in formula or "transcendentals" in formula:  # totals are stated for loop-free modules only
        assert " while(" not in compiled_text
    for key in ("flops", "transcendentals"):  # whole-program totals: XLA must agree exactly
        if key in formula:
            assert xla_cost.get(key, 0.0) == float(formula[key]), (key, formula[key], xla_cost)
    for key, value in formula.items():
        assert key in FORMULA_KEYS, f"undocumented formula key {key}"
        if key in KIND_OPCODE and value > 0:
            opcode = KIND_OPCODE[key]
            assert re.search(rf" {re.escape(opcode)}\(", compiled_text), f"no {opcode} left for {key}"
    if "reduce_flops" in formula and "reduce_window_flops" not in formula:
        # XLA:CPU's tree-reduction rewrite moves part of a reduction into a reduce-window.
        assert " reduce-window(" not in compiled_text, "the reduction was split; reduce_flops would be wrong"
        assert isinstance(value, int) and value >= 0, (key, value)


def _assert_same_values(a, b):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(leaves_a, leaves_b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.all(np.isfinite(x)), "inputs should keep the program finite"
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.name)
def test_loop_pair_is_rolled_unrolled_and_equal(pair):
    rolled_text, _, _ = compile_program(pair.rolled)
    unrolled_text, _, _ = compile_program(pair.unrolled)
    assert " while(" in rolled_text
    assert " while(" not in unrolled_text
    known = {int(n) for n in KNOWN_TRIP.findall(rolled_text)}
    assert known <= set(pair.trip_counts), (known, pair.trip_counts)
    args = concrete_args(pair.rolled, seed=1)
    rolled_out = executable(pair.rolled)(*args)
    unrolled_out = executable(pair.unrolled)(*args)
    _assert_same_values(rolled_out, unrolled_out)


@pytest.mark.parametrize("case", UNKNOWN_TRIPS, ids=lambda u: u.program.name)
def test_unknown_trip_count_is_unknown_to_xla_and_recorded_right(case):
    text, _, _ = compile_program(case.program)
    assert " while(" in text
    assert not KNOWN_TRIP.search(text)
    *_, iterations = run_program(case.program)
    assert int(iterations) == case.actual_trip_count


def test_unknown_trip_is_the_data_dependent_while():
    assert UNKNOWN_TRIP in UNKNOWN_TRIPS
    assert "data" in UNKNOWN_TRIP.notes
