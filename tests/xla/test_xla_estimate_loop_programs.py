"""xla_estimate counts every while body once, as XLA does: on the loop catalogue
(tests/programs/loop_programs.py: scan, fori_loop, while, nested, remat policies, conv and cond
in loops, data-dependent loops) it equals `compiled.cost_analysis()` bit for bit, rolled and
unrolled alike."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

import hloparse  # noqa: E402
from hloflops.xla.estimate import xla_estimate  # noqa: E402
from tests.programs import loop_programs  # noqa: E402
from tests.programs.compile import compile_program  # noqa: E402

KEYS = ("flops", "transcendentals", "bytes accessed", "optimal_seconds")
_UNKNOWN = loop_programs.UNKNOWN_TRIP
_UNKNOWN = list(_UNKNOWN) if isinstance(_UNKNOWN, (list, tuple)) else [_UNKNOWN]
PROGRAMS = ([p.rolled for p in loop_programs.PAIRS] + [p.unrolled for p in loop_programs.PAIRS]
            + [u.program for u in _UNKNOWN])


def test_catalogue_has_loops():
    assert len(loop_programs.PAIRS) >= 20


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_loop_program_matches_xla(program):
    compiled_text, _lowered, xla = compile_program(program)
    estimate = xla_estimate(hloparse.parse(compiled_text), diagnostics=True)
    for key in KEYS:
        assert estimate.get(key, 0.0) == float(xla.get(key, 0.0)), (key, estimate, xla)
    assert estimate == {k: float(v) for k, v in xla.items() if v != 0}  # every key, diagnostics too
