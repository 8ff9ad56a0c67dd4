"""The cost rules on the jax program catalogue (tests/programs/lax_programs.py, 350+ programs).

For every program: `xla_estimate` of `compiled.as_text()` equals `compiled.cost_analysis()` for
flops, transcendentals and bytes accessed, bit for bit. Where the catalogue gives a hand
formula, our exact integer counts equal it: whole-program `flops` / `transcendentals` (XLA's
loop-once totals: every program here is loop-free), and per-kind sums (`dot_flops`,
`conv_flops`, ...) over every instruction of that kind, fused or not.

XLA's answers come from `tests.programs.compile.compile_program` (cached on disk by program and
lowered text; delete the cache folder to ask XLA again).
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

import hloparse  # noqa: E402
from hloflops.engine import own_cost  # noqa: E402
from hloflops.xla.estimate import loop_once_totals, xla_estimate  # noqa: E402
from hloparse.ir import CallRole  # noqa: E402
from tests.programs.compile import compile_program  # noqa: E402
from tests.programs.lax_programs import PROGRAMS  # noqa: E402

KEYS = ("flops", "transcendentals", "bytes accessed")
# Per-kind formula keys -> the opcodes whose own flops they sum.
KIND_OPCODES = {
    "dot_flops": ("dot", "scaled-dot", "ragged-dot"),
    "conv_flops": ("convolution",),
    "sort_flops": ("sort",),
    "reduce_flops": ("reduce",),
    "reduce_window_flops": ("reduce-window",),
    "fft_flops": ("fft",),
    "elementwise_flops": None,  # every elementwise opcode, see _is_elementwise
}


def _is_elementwise(opcode: str) -> bool:
    from hloflops.cost.rules import ELEMENTWISE_FLOP_OPCODES, TRANSCENDENTAL_OPCODES

    return opcode in ELEMENTWISE_FLOP_OPCODES or opcode in TRANSCENDENTAL_OPCODES


def _kind_flops(module, opcodes) -> int:
    """Own flops (exact view) of every executed instruction with one of `opcodes`, walking from
    ENTRY through CONTROL edges."""
    total = 0
    stack = [module.entry.name]
    while stack:
        comp = module.computation(stack.pop())
        for inst in comp.instructions:
            if (inst.opcode in opcodes) if opcodes is not None else _is_elementwise(inst.opcode):
                cost = own_cost(module, comp, inst, view="exact")
                assert cost.uncounted is None, (inst.name, cost.uncounted)
                total += cost.cost.flops
            stack.extend(s.computation for s in inst.calls if s.role in CallRole.CONTROL)
    return total


def test_catalogue_is_big_enough():
    assert len(PROGRAMS) >= 200
    assert sum(1 for p in PROGRAMS if p.formula) >= 100


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_program(program):
    compiled_text, _lowered, xla = compile_program(program)
    module = hloparse.parse(compiled_text)
    estimate = xla_estimate(module, diagnostics=True)
    for key in KEYS:
        assert estimate.get(key, 0.0) == float(xla.get(key, 0.0)), (key, estimate, xla)
    # and every other key of XLA's dict (optimal_seconds, per-operand diagnostics)
    assert estimate == {k: float(v) for k, v in xla.items() if v != 0}
    if not program.formula:
        return
    xla_ints, _ = loop_once_totals(module, view="xla")
    exact, uncounted = loop_once_totals(module, view="exact")
    has_custom_call = any(inst.opcode == "custom-call" for _, inst in module.instructions())
    for key, want in program.formula.items():
        if key in ("flops", "transcendentals"):
            got = xla_ints.flops if key == "flops" else xla_ints.transcendentals
            assert got == want, (key, got, want)
            if not has_custom_call:  # without custom-calls, truth and XLA's count coincide
                assert not uncounted
                assert (exact.flops if key == "flops" else exact.transcendentals) == want
        elif key in KIND_OPCODES:
            assert _kind_flops(module, KIND_OPCODES[key]) == want, key
        else:
            pytest.fail(f"formula key {key!r} has no check here")
