"""A recompute's cheap copies inside TPU's async collective fusions are a hinge
(analysis/hloflops/remat/collective_fusion_copies.py). vtpu 263 (whole_model_checkpoint encdec,
tensor parallelism): the recompute copies each block's first layer norm into the query's, key's and
value's collective fusions, where the program without remat's forward computes it once; the cap by
the forward's count left two of three copies model FLOPs, sure, and the truth (271,233) lay above
the range's high end (209,857). Small hand-written modules; the replay is skipped without libtpu,
as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.remat.collective_fusion_copies import collective_fusion_copies
from hloflops.remat.pairing import find_remat

_FORWARD = '"jit(loss)/jvp(Model)/LayerNorm_0/sub"'
_RECOMPUTE = '"jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Model/LayerNorm_0/sub"'


def _module(outer: str = "async_collective_fusion.7") -> str:
    """The forward's `x - m` once in a plain fusion; the recompute's twice, once in a plain fusion
    and once in a fusion nested in `outer` (TPU's collective matmul)."""
    return f"""HloModule m, is_scheduled=true

%norm (p0: f32[2,8], p1: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  ROOT %d = f32[2,8]{{1,0}} subtract(%p0, %p1), metadata={{op_name={_FORWARD}}}
}}

%renorm (p0: f32[2,8], p1: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  ROOT %d = f32[2,8]{{1,0}} subtract(%p0, %p1), metadata={{op_name={_RECOMPUTE}}}
}}

%renorm.clone (p0: f32[2,8], p1: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  ROOT %d = f32[2,8]{{1,0}} subtract(%p0, %p1), metadata={{op_name={_RECOMPUTE}}}
}}

%{outer} (q0: f32[2,8], q1: f32[2,8]) -> f32[2,8] {{
  %q0 = f32[2,8]{{1,0}} parameter(0)
  %q1 = f32[2,8]{{1,0}} parameter(1)
  %inner = f32[2,8]{{1,0}} fusion(%q0, %q1), kind=kLoop, calls=%renorm.clone
  ROOT %n = f32[2,8]{{1,0}} negate(%inner)
}}

ENTRY %main (x0: f32[2,8], x1: f32[2,8]) -> f32[2,8] {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %x1 = f32[2,8]{{1,0}} parameter(1)
  %v = f32[2,8]{{1,0}} fusion(%x0, %x1), kind=kLoop, calls=%norm, metadata={{op_name={_FORWARD}}}
  %b = (f32[2,8], f32[2,8]) opt-barrier((f32[2,8], f32[2,8]) tuple(%x0, %x1))
  %b0 = f32[2,8]{{1,0}} get-tuple-element(%b), index=0
  %b1 = f32[2,8]{{1,0}} get-tuple-element(%b), index=1
  %r = f32[2,8]{{1,0}} fusion(%b0, %b1), kind=kLoop, calls=%renorm, metadata={{op_name={_RECOMPUTE}}}
  %c = f32[2,8]{{1,0}} fusion(%b0, %b1), kind=kCustom, calls=%{outer}, metadata={{op_name={_RECOMPUTE}}}
  %s = f32[2,8]{{1,0}} add(%v, %r)
  ROOT %t = f32[2,8]{{1,0}} add(%s, %c)
}}
"""


def _ops(text: str) -> list:
    """The pairing's site ops of a module (as hloflops.remat.pairing builds them)."""
    from hloflops.remat import pairing
    seen: dict = {}
    original = pairing.fusion_copies

    def spy(module, ops, *args, **kwargs):
        seen["ops"] = ops
        return original(module, ops, *args, **kwargs)
    pairing.fusion_copies = spy
    try:
        find_remat(hloparse.parse(text))
    finally:
        pairing.fusion_copies = original
    return seen["ops"]


def test_recompute_copy_nested_in_a_collective_fusion_is_found():
    found = collective_fusion_copies(hloparse.parse(_module()), _ops(_module()))
    assert {key[:2] for key in found} == {("renorm.clone", "d")}, found


def test_no_collective_fusion_no_hinge():
    # The same nesting under a plain fusion: XLA's ordinary copy into a reader, decided by the cap.
    text = _module(outer="fused_computation.7")
    assert collective_fusion_copies(hloparse.parse(text), _ops(text)) == set()


@pytest.mark.parametrize("seed", [263])
def test_tpu_draw_whose_recompute_copies_into_collective_fusions_is_in_range(seed, monkeypatch):
    # Before the rule the truth (271,233) lay 61,376 above the high end (209,857).
    pytest.importorskip("jax")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.generator import check, draw
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(seed, "tpu"))
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
