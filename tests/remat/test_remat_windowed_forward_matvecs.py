"""A recompute's whole matrix-vector product whose forward XLA ran as a window loop: no value
partner, remat all the same, weak (analysis/hloflops/remat/windowed_forward_matvecs.py).

TPU draws 270 (linen_remat_scan, tensor parallel) and 210 (nnx_scan): the forward's product is a
window loop of partial `reduce(multiply(broadcast(v), w))` over contraction shards, in both
programs; the recompute in the backward is one whole multiply and reduce, which paired with
nothing and stayed unsure (270: reduce -24,192; 210: reduce -1,440, multiply -1,536). The program
without remat keeps its forward's result and has no such product in its backward. Unit tests on a
small hand-written module; the replay compiles the draw through libtpu (or reads the sweep's cached texts)."""

from __future__ import annotations

from pathlib import Path

import pytest

import hloparse
from hloflops.remat.index import RematIndex
from hloflops.remat.windowed_forward_matvecs import windowed_forward_matvecs, with_windowed_forward_matvecs

_FORWARD = "jit(loss)/jvp(Model)/while/body/blocks/mlp/Dense_0/dot_general"
_RECOMPUTE = "jit(loss)/transpose(jvp(Model))/while/body/checkpoint/rematted_computation/blocks/mlp/Dense_0/dot_general"

HLO = """HloModule windows, is_scheduled=true

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

window_product {
  w = f32[4,8] parameter(0)
  v = f32[4] parameter(1)
  vb = f32[4,8] broadcast(v), dimensions={0}, metadata={op_name="@FORWARD"}
  m = f32[4,8] multiply(vb, w)
  z = f32[] constant(0)
  ROOT r = f32[@OUT] reduce(m, z), dimensions={0}, to_apply=sum, metadata={op_name="@FORWARD"}
}

whole_product {
  w = f32[8,8] parameter(0)
  v = f32[8] parameter(1)
  vb = f32[8,8] broadcast(v), dimensions={0}, metadata={op_name="@RECOMPUTE"}
  m = f32[8,8] multiply(vb, w)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(m, z), dimensions={0}, to_apply=sum, metadata={op_name="@RECOMPUTE"}
}

cond {
  c = (s32[], f32[4], f32[4,8], f32[@OUT]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  b = (s32[], f32[4], f32[4,8], f32[@OUT]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = f32[4] get-tuple-element(b), index=1
  w = f32[4,8] get-tuple-element(b), index=2
  acc = f32[@OUT] get-tuple-element(b), index=3
  p = f32[4] @PERMUTE
  d = f32[@OUT] fusion(w, x), kind=kLoop, calls=window_product, metadata={op_name="@FORWARD"}
  s = f32[@OUT] add(d, acc), metadata={op_name="@FORWARD"}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4], f32[4,8], f32[@OUT]) tuple(j, p, w, s)
}

ENTRY main {
  a = f32[4] parameter(0)
  wt = f32[4,8] parameter(1)
  whole = f32[8] parameter(2)
  ww = f32[8,8] parameter(3)
  z = s32[] constant(0)
  zero = f32[@OUT] broadcast(f32[] constant(0)), dimensions={}
  t0 = (s32[], f32[4], f32[4,8], f32[@OUT]) tuple(z, a, wt, zero)
  loop = (s32[], f32[4], f32[4,8], f32[@OUT]) while(t0), condition=cond, body=body,
    metadata={op_name="@FORWARD"}
  ROOT again = f32[8] fusion(ww, whole), kind=kLoop, calls=whole_product, metadata={op_name="@RECOMPUTE"}
}
"""

_PERMUTED = 'collective-permute(x), source_target_pairs={{0,1},{1,0}}'


def _module(forward: str = _FORWARD, out: int = 8, permute: str = _PERMUTED) -> hloparse.ir.Module:
    return hloparse.parse(HLO.replace("@FORWARD", forward).replace("@RECOMPUTE", _RECOMPUTE)
                          .replace("@OUT", str(out)).replace("@PERMUTE", permute))


def test_a_recomputed_matvec_whose_forward_ran_as_a_window_loop_is_found():
    assert windowed_forward_matvecs(_module()) == {("whole_product", "r")}


def test_no_window_loop_of_that_product_finds_nothing():
    # The loop named for another layer's dot; its products of other outputs (another product);
    # no collective-permute inside (a model's loop, not a window loop).
    assert windowed_forward_matvecs(_module(forward=_FORWARD.replace("Dense_0", "Dense_1"))) == set()
    assert windowed_forward_matvecs(_module(out=16)) == set()
    assert windowed_forward_matvecs(_module(permute="copy(x)")) == set()


def test_the_found_reduce_left_unsure_is_counted_weak_and_others_are_kept():
    module = _module()
    key = ("whole_product", "r")
    moved = with_windowed_forward_matvecs(module, RematIndex(frozenset(), 1, (), unsure=frozenset({key})))
    assert key in moved.remat and key in moved.weak and key not in moved.unsure  # in the range, counted
    # Decided by another rule (remat, or model FLOPs it settled): left as it was.
    kept = RematIndex(frozenset(), 1, ())
    assert with_windowed_forward_matvecs(module, kept) is kept


def test_tpu_draw_270_is_exact(monkeypatch):
    # linen_remat_scan, tensor parallel: reduce -24,192 (the recompute of Dense_0, unsure) -> exact.
    # Compiled through libtpu (the sweep's cached texts where this machine has them).
    pytest.importorskip("jax")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from tests.remat.generator import check, draw

    cache = Path("/tmp/r8cache")
    outcome = check(draw(270, "tpu"), cache if cache.is_dir() else None)
    assert outcome.all_ok("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
