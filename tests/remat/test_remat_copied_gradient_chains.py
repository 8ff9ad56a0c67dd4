"""A checkpoint's backward chain read from a rebuilt matmul and copied into several fusions is a hinge
beyond its first copy (analysis/hloflops/remat/copied_gradient_chains.py). utpu 200 (nnx_scan,
nothing_saveable, gelu): the chain `dy' * gelu'(h)`, `h` rebuilt by the recomputed matmul, runs in the
bias gradient's fusion and again nested in the weight gradient's; the program without remat runs it
once, behind the cotangent matmul, and stores it. Its copies carry the checkpoint's backward name, so
the range left them out and the truth (42,496) lay above the high end (39,424). Small hand-written
modules."""

from __future__ import annotations

import hloparse
from hloflops.remat.copied_gradient_chains import copied_gradient_chains

_RECOMPUTE = '"jit(loss)/transpose(jvp())/checkpoint/rematted_computation/mul"'
_CHAIN = '"jit(loss)/transpose(jvp())/checkpoint/mul"'
_GRADIENT = '"jit(loss)/transpose(jvp())/checkpoint/dot_general"'
_BIAS = '"jit(loss)/transpose(jvp())/checkpoint/reduce_sum"'
_REBUILT = '"jit(loss)/transpose(jvp())/checkpoint/rematted_computation/dot_general"'
_FORWARD = '"jit(loss)/jvp()/dot_general"'


def _module(rebuilt: bool = True) -> str:
    """`h = x @ w` rebuilt by the recompute's matmul (not `rebuilt`: the forward's), `a = h * h`
    recomputed from it, and the chain `c = g * a` in a bias-gradient fusion and nested in a weight
    gradient's fusion."""
    name = _REBUILT if rebuilt else _FORWARD

    def body(p: tuple[int, int]) -> str:
        return f"""  %h = f32[2,8]{{1,0}} parameter({p[0]})
  %g = f32[2,8]{{1,0}} parameter({p[1]})
  %a = f32[2,8]{{1,0}} multiply(%h, %h), metadata={{op_name={_RECOMPUTE}}}
  %c = f32[2,8]{{1,0}} multiply(%g, %a), metadata={{op_name={_CHAIN}}}"""
    return f"""HloModule m, is_scheduled=true

%add (x: f32[], y: f32[]) -> f32[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}}

%bias (h: f32[2,8], g: f32[2,8]) -> f32[8] {{
{body((0, 1))}
  %z = f32[] constant(0)
  ROOT %r = f32[8]{{0}} reduce(%c, %z), dimensions={{0}}, to_apply=%add, metadata={{op_name={_BIAS}}}
}}

%chain (h: f32[2,8], g: f32[2,8]) -> f32[2,8] {{
{body((0, 1)).replace("%c = ", "ROOT %c = ")}
}}

%weight_gradient (x: f32[2,8], h: f32[2,8], g: f32[2,8]) -> f32[8,8] {{
  %x = f32[2,8]{{1,0}} parameter(0)
  %h = f32[2,8]{{1,0}} parameter(1)
  %g = f32[2,8]{{1,0}} parameter(2)
  %inner = f32[2,8]{{1,0}} fusion(%h, %g), kind=kLoop, calls=%chain
  ROOT %w = f32[8,8]{{1,0}} dot(%x, %inner), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}},
    metadata={{op_name={_GRADIENT}}}
}}

ENTRY %main (x0: f32[2,8], g0: f32[2,8], w0: f32[8,8]) -> (f32[8], f32[8,8]) {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %g0 = f32[2,8]{{1,0}} parameter(1)
  %w0 = f32[8,8]{{1,0}} parameter(2)
  %h0 = f32[2,8]{{1,0}} dot(%x0, %w0), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
    metadata={{op_name={name}}}
  %r = f32[8]{{0}} fusion(%h0, %g0), kind=kLoop, calls=%bias, metadata={{op_name={_BIAS}}}
  %w = f32[8,8]{{1,0}} fusion(%x0, %h0, %g0), kind=kOutput, calls=%weight_gradient, metadata={{op_name={_GRADIENT}}}
  ROOT %t = (f32[8], f32[8,8]) tuple(%r, %w)
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
        pairing.find_remat(hloparse.parse(text))
    finally:
        pairing.fusion_copies = original
    return seen["ops"]


def test_a_chain_read_from_a_rebuilt_matmul_in_two_fusions_hinges_on_its_second_copy():
    text = _module()
    found = copied_gradient_chains(hloparse.parse(text), _ops(text), set())
    assert {key[:2] for key in found} == {("chain", "c")}, found


def test_a_chain_reading_the_forwards_matmul_is_no_hinge():
    # TPU 15: both programs read the forward's stored `h` and the cotangent: the chain's copies
    # are fused alike, whatever the recompute names in it (the linearization's own `1 - tanh`).
    text = _module(rebuilt=False)
    assert copied_gradient_chains(hloparse.parse(text), _ops(text), set()) == set()


def test_a_copy_already_counted_as_remat_is_no_hinge():
    text = _module()
    ops = _ops(text)
    counted = {op.key for op in ops if op.key[:2] == ("chain", "c")}
    assert copied_gradient_chains(hloparse.parse(text), ops, counted) == set()
