"""The loss's cotangent handed out of the forward's last matmul's own output fusion, whose copies
the program without remat surely runs (analysis/hloflops/remat/matmul_loss_cotangents.py). TPU
draw 65 (hk_loop attn, one device): the output fusion of the last projection computes
`y = x @ W + b + residual`, then `y * c` beside `sum(y * y)`, and hands `y * c` to three readers;
the program without remat copies the multiply into all three (multiply 524,288 below this
program's split while the copies were a hinge). Where the matmul is a loop body's (peeled) or the
loss fusion holds no matmul, the copies stay a hinge (TPU 75, 206 and TPU 42, 141, 179: the twin
merged alike). Unit tests on small hand-written fusions; the replay reads the sweep's cached
texts and is skipped where they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest

import hloparse
from hloflops.remat.loss_cotangent_copies import loss_cotangent_copies
from hloflops.remat.matmul_loss_cotangents import matmul_loss_cotangents

_COTANGENT = '"jit(loss)/transpose(jvp())/mul;jit(loss)/transpose(jvp())/broadcast_in_dim"'


def _module(kind: str = "kOutput", matmul: str = "jit(loss)/jvp(linear_3)/dot_general") -> str:
    return f"""HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%loss_fusion (p0: f32[2,8], p1: f32[2,4], p2: f32[4,8]) -> (f32[2,8], f32[]) {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,4]{{1,0}} parameter(1)
  %p2 = f32[4,8]{{1,0}} parameter(2)
  %mm = f32[2,8]{{1,0}} dot(%p1, %p2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
    metadata={{op_name="{matmul}"}}
  %y = f32[2,8]{{1,0}} add(%p0, %mm), metadata={{op_name="jit(loss)/jvp()/add"}}
  %sq = f32[2,8]{{1,0}} multiply(%y, %y), metadata={{op_name="jit(loss)/jvp()/square"}}
  %zero = f32[] constant(0)
  %sum = f32[] reduce(%sq, %zero), dimensions={{0,1}}, to_apply=%add, metadata={{op_name="jit(loss)/jvp()/reduce_sum"}}
  %c = f32[] constant(0.0625)
  %cb = f32[2,8]{{1,0}} broadcast(%c), dimensions={{}}, metadata={{op_name={_COTANGENT}}}
  %g = f32[2,8]{{1,0}} multiply(%y, %cb), metadata={{op_name={_COTANGENT}}}
  ROOT %t = (f32[2,8], f32[]) tuple(%g, %sum)
}}

%reader (q: f32[2,8]) -> f32[2,8] {{
  %q = f32[2,8]{{1,0}} parameter(0)
  ROOT %n = f32[2,8]{{1,0}} negate(%q), metadata={{op_name="jit(loss)/transpose(jvp())/dot_general"}}
}}

ENTRY %main (x0: f32[2,8], x1: f32[2,4], x2: f32[4,8]) -> f32[2,8] {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %x1 = f32[2,4]{{1,0}} parameter(1)
  %x2 = f32[4,8]{{1,0}} parameter(2)
  %f = (f32[2,8], f32[]) fusion(%x0, %x1, %x2), kind={kind}, calls=%loss_fusion
  %g = f32[2,8]{{1,0}} get-tuple-element(%f), index=0
  %r0 = f32[2,8]{{1,0}} fusion(%g), kind=kLoop, calls=%reader
  %r1 = f32[2,8]{{1,0}} negate(%g)
  %r2 = f32[2,8]{{1,0}} multiply(%g, %g)
  %r3 = f32[2,8]{{1,0}} add(%r0, %r1)
  ROOT %r4 = f32[2,8]{{1,0}} add(%r3, %r2)
}}
"""


def _sure(text: str) -> dict:
    module = hloparse.parse(text)
    return matmul_loss_cotangents(module, loss_cotangent_copies(module))


def test_cotangent_out_of_the_last_matmuls_output_fusion_is_copied_by_the_twin_surely():
    # Three readers of the hand-out: the twin's two more copies are sure (73 of 73 on TPU 0-359).
    assert _sure(_module()) == {("loss_fusion", "g"): 2}


def test_cotangent_out_of_a_peeled_loop_layers_matmul_stays_a_hinge():
    # The last layer of a stack XLA peeled out of its loop (TPU 75, 206: the twin merged alike).
    assert _sure(_module(matmul="jit(loss)/jvp()/while/body/closed_call/linear_1/dot_general")) == {}


def test_cotangent_out_of_a_loop_fusion_stays_a_hinge():
    # No matmul's output fusion (TPU 42, 141, 179: the twin merged alike; 20 of 40 copied).
    assert _sure(_module(kind="kLoop")) == {}


def test_tpu_draw_65_is_exact_from_the_cached_texts():
    # hk_loop attn, one device: multiply +524,288 (the twin's two copies, a hinge) -> exact.
    from tests.programs.remat_forms import build
    from tests.remat.generator import draw
    from tests.remat.judge import judge
    from tests.remat.text_cache import cached_texts

    def absent(program, stage):
        pytest.skip("the sweep's cached texts of TPU draw 65 are not here (/tmp/r8cache)")

    form = draw(65, "tpu")
    pair = build(form)
    verdict = judge(pair, "after", cached_texts(Path("/tmp/r8cache"), form, pair, compile=absent))
    assert verdict.ok, verdict.describe()
