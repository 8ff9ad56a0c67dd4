"""flax's `remat_scan` recomputes each layer inside the scan's backward loop, as any scan with a
remat'd body does (analysis/hloflops/remat/backward_loop_copies.py).

jax names those recomputes `.../checkpoint/rematted_computation/while/body/.../blocks/...`: a
`while` inside the checkpoint's name, though no loop of the recompute's own runs (TPU 29, 77, 105,
214, 219: two loops, the forward's and the backward's). The rule that counts a backward loop's
copies of each recomputed value, less the program without remat's saving copies, skipped every
such frame on the name alone, and the other rules capped each value's recompute copies at the
forward's count: TPU 214 (linen_remat_scan lm, one device) counted 2 of the 6 backward copies of
softmax's `s - max` (5 run because of remat) and was out of range (subtract -789,504, bounds
[79,509,504, 81,899,520], truth 82,083,840). Only a `while` named inside the checkpoint is a loop of
the recompute's own, whose backward loop reads what it saved."""

from __future__ import annotations

import hloparse
import pytest
from hloflops.remat.backward_loop_copies import _recompute_loop_bodies

HLO = """HloModule loops, is_scheduled=true

cond {
  c = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  b = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = f32[8] get-tuple-element(b), index=1
  s = f32[8] subtract(x, x), metadata={op_name="@RECOMPUTE"}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8]) tuple(j, s)
}

ENTRY main {
  a = f32[8] parameter(0)
  z = s32[] constant(0)
  t0 = (s32[], f32[8]) tuple(z, a)
  ROOT w = (s32[], f32[8]) while(t0), condition=cond, body=body, metadata={op_name="@LOOP"}
}
"""


# how jax names a remat_scan layer's recompute in the backward loop
RECOMPUTE = ("jit(loss)/transpose(jvp(LM))/decoder/while/body/closed_call/checkpoint/rematted_computation/"
             "while/body/closed_call/blocks/self_attn/sub")


def _bodies(loop_name: str) -> set[str]:
    return _recompute_loop_bodies(hloparse.parse(HLO.replace("@LOOP", loop_name).replace("@RECOMPUTE", RECOMPUTE)))


def test_the_backward_loop_recomputing_a_layer_a_trip_is_no_loop_of_the_recompute():
    assert _bodies("jit(loss)/transpose(jvp(LM))/decoder/while") == set()


def test_a_loop_named_inside_the_checkpoint_is_the_recompute_s_own():
    assert _bodies("jit(loss)/transpose(jvp(LM))/checkpoint/rematted_computation/decoder/while") == {"body"}


def test_remat_scan_s_backward_loop_copies_are_counted(monkeypatch):
    pytest.importorskip("flax")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.generator import check, draw
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(214, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert "subtract" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
