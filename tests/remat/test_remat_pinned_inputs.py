"""The backward's widens of a checkpoint input the checkpoint's barrier pinned narrow (after
optimization, CPU; analysis/hloflops/remat/pinned_inputs.py).

A Python-loop bf16 LM with `nn.remat` per block: the forward leaves each block's residual add in
f32; the next block's checkpoint re-reads its input through its barrier as bf16, narrowed under
the checkpoint's own name (`.../transpose(...)/remat2`), and the recompute's layer norm and
residual add and the layer-norm gradient's fusions each widen it again, where the program without
remat's backward reads the forward's f32 value. Before the rule, the convert misses were four
widens of the block input per block boundary (base 125: -1,048,576, more 29: -2,097,152).
"""

from __future__ import annotations

import pytest

import hloparse


@pytest.mark.parametrize("seed, family", [(125, "base"), (29, "more")])
def test_backward_widens_of_a_pinned_checkpoint_input_are_remat(seed, family):
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    from tests.remat.generator import check, draw

    outcome = check(draw(seed, family))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert "convert" not in after.misses, outcome.describe()


FWD = 'metadata={op_name="jit(loss)/jvp()/%s"}'
REC = 'metadata={op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/%s"}'
PIN = 'metadata={op_name="jit(loss)/transpose(jvp(jvp()))/remat2"}'


def _pinned(source: str = "jit(loss)/jvp()/add") -> str:
    """A block's residual add (`source`), narrowed under the next checkpoint's `remat2`, read
    narrow by two forward fusions and by three of the recompute (one a lone widen)."""
    return f"""
HloModule pinned, is_scheduled=true

%residual (a: f32[16,64], b: f32[16,64]) -> f32[16,64] {{
  %a = f32[16,64]{{1,0}} parameter(0)
  %b = f32[16,64]{{1,0}} parameter(1)
  ROOT %sum = f32[16,64]{{1,0}} add(%a, %b), metadata={{op_name="{source}"}}
}}

%pin (p: f32[16,64]) -> bf16[16,64] {{
  %p = f32[16,64]{{1,0}} parameter(0)
  ROOT %narrow = bf16[16,64]{{1,0}} convert(%p), {PIN}
}}

%widen (q: bf16[16,64]) -> f32[16,64] {{
  %q = bf16[16,64]{{1,0}} parameter(0)
  ROOT %wide = f32[16,64]{{1,0}} convert(%q)
}}

%sum_rows (u: f32[16,64]) -> f32[16] {{
  %u = f32[16,64]{{1,0}} parameter(0)
  %zero = f32[] constant(0)
  ROOT %rows = f32[16]{{0}} reduce(%u, %zero), dimensions={{1}}, to_apply=%add_scalar, {REC % 'reduce_sum'}
}}

%fwd_rows (v: f32[16,64]) -> f32[16] {{
  %v = f32[16,64]{{1,0}} parameter(0)
  %zero.1 = f32[] constant(0)
  ROOT %rows.1 = f32[16]{{0}} reduce(%v, %zero.1), dimensions={{1}}, to_apply=%add_scalar, {FWD % 'reduce_sum'}
}}

%add_scalar (x: f32[], y: f32[]) -> f32[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}}

%center_fwd (c0: bf16[16,64], c1: f32[16,64]) -> bf16[16,64] {{
  %c0 = bf16[16,64]{{1,0}} parameter(0)
  %c1 = f32[16,64]{{1,0}} parameter(1)
  %w0 = f32[16,64]{{1,0}} convert(%c0)
  %d0 = f32[16,64]{{1,0}} subtract(%w0, %c1), {FWD % 'sub'}
  ROOT %n0 = bf16[16,64]{{1,0}} convert(%d0)
}}

%add_fwd (e0: bf16[16,64], e1: f32[16,64]) -> f32[16,64] {{
  %e0 = bf16[16,64]{{1,0}} parameter(0)
  %e1 = f32[16,64]{{1,0}} parameter(1)
  %w1 = f32[16,64]{{1,0}} convert(%e0)
  ROOT %s1 = f32[16,64]{{1,0}} add(%w1, %e1), {FWD % 'add'}
}}

%center_rec (f0: bf16[16,64], f1: f32[16,64]) -> bf16[16,64] {{
  %f0 = bf16[16,64]{{1,0}} parameter(0)
  %f1 = f32[16,64]{{1,0}} parameter(1)
  %w2 = f32[16,64]{{1,0}} convert(%f0)
  %d2 = f32[16,64]{{1,0}} subtract(%w2, %f1), {REC % 'sub'}
  ROOT %n2 = bf16[16,64]{{1,0}} convert(%d2)
}}

%add_rec (g0: bf16[16,64], g1: f32[16,64]) -> f32[16,64] {{
  %g0 = bf16[16,64]{{1,0}} parameter(0)
  %g1 = f32[16,64]{{1,0}} parameter(1)
  %w3 = f32[16,64]{{1,0}} convert(%g0)
  ROOT %s3 = f32[16,64]{{1,0}} add(%w3, %g1), {REC % 'add'}
}}

ENTRY %main {{
  %x0 = f32[16,64]{{1,0}} parameter(0)
  %x1 = f32[16,64]{{1,0}} parameter(1)
  %m = f32[16,64]{{1,0}} parameter(2)
  %h = f32[16,64]{{1,0}} parameter(3)
  %block = f32[16,64]{{1,0}} fusion(%x0, %x1), kind=kLoop, calls=%residual, metadata={{op_name="{source}"}}
  %mean_fwd = f32[16] fusion(%block), kind=kLoop, calls=%fwd_rows, {FWD % 'reduce_sum'}
  %pinned = bf16[16,64]{{1,0}} fusion(%block), kind=kLoop, calls=%pin, {PIN}
  %centered = bf16[16,64]{{1,0}} fusion(%pinned, %m), kind=kLoop, calls=%center_fwd
  %next = f32[16,64]{{1,0}} fusion(%pinned, %h), kind=kLoop, calls=%add_fwd, {FWD % 'add'}
  %widened = f32[16,64]{{1,0}} fusion(%pinned), kind=kLoop, calls=%widen
  %mean_rec = f32[16] fusion(%widened), kind=kLoop, calls=%sum_rows, {REC % 'reduce_sum'}
  %centered_rec = bf16[16,64]{{1,0}} fusion(%pinned, %m), kind=kLoop, calls=%center_rec
  %next_rec = f32[16,64]{{1,0}} fusion(%pinned, %h), kind=kLoop, calls=%add_rec, {REC % 'add'}
  ROOT %out = (f32[16], f32[16], bf16[16,64], f32[16,64], bf16[16,64], f32[16,64]) tuple(%mean_fwd, %mean_rec,
      %centered, %next, %centered_rec, %next_rec)
}}
"""


def _converts(text: str) -> dict[str, bool]:
    from hloflops.accounting import account

    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    return {r.name: r.remat for r in acc.rows if r.opcode == "convert"}


def test_every_backward_widen_of_a_pinned_input_is_remat_however_many_forward_fusions_read_it():
    # base draws 5 and 129 (bf16 attention blocks, a Python loop of `nn.remat` blocks): the next
    # block's layer norm centers the pinned value and its residual add reads it, two forward
    # readers; the program without remat reads the same narrow value there and nowhere in its
    # backward (which reads the forward's centered value), so the recompute's three widens,
    # the lone one feeding its mean too, are remat. Before: the lone widen was not counted
    # (base 5 convert -25,344 -> -17,152, base 129 -5,632 -> -1,536; the rest is other values).
    converts = _converts(_pinned())
    assert converts["wide"] and converts["w2"] and converts["w3"]
    assert not any(converts[name] for name in ("narrow", "w0", "n0", "w1"))  # the forward's


def test_the_widen_of_a_narrowed_backward_value_is_not_a_pinned_input():
    # The same narrowing of a gradient (a backward value under `remat2`): the program without
    # remat rounds that gradient too, and widens it where this program does.
    converts = _converts(_pinned("jit(loss)/transpose(jvp(jvp()))/add_any"))
    assert not converts["wide"]
