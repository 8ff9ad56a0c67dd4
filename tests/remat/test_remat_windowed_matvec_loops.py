"""A forward window loop whose products XLA writes as multiply and reduce (a matrix-vector product)
runs because of remat where the backward gathers the recompute, or gathers the windowed value again
(analysis/hloflops/remat/windowed_matvec_loops.py).

TPU draws 191 (whole_model, tensor parallel, batch 2) and 293 (nnx_loop, offload): the program
without remat gathers each layer's input once for the forward product and the backward and runs
one product; with remat two forward products became window loops whose counters, first-trip
selects and accumulating adds were counted model FLOPs, and the high end stayed below the truth
(191: truth 164,262, bounds [81,664, 163,392]; 293: truth 13,446, bounds [8,552, 12,672]). The
backward's gather is an all-gather under the recompute's name (191), or an all-reduce of the
value written into zeros, named for the transpose or read by it (293, 124), or of a recompute so
written (haiku, 162). The loop's multiply and reduce are the product the program without remat
runs too; a loop of dots is the other rules'."""

from __future__ import annotations

import hloparse
from hloflops.remat.sites import SiteOp
from hloflops.remat.windowed_matvec_loops import windowed_matvec_loops, windowed_product_shares

HLO = """HloModule windows, is_scheduled=true

product {
  w = f32[8,8] parameter(0)
  v = f32[8] parameter(1)
  vb = f32[8,8] broadcast(v), dimensions={0}
  m = f32[8,8] multiply(vb, w)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(m, z), dimensions={0}, to_apply=sum
}

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

padding {
  zeros = f32[16] parameter(0)
  part = f32[8] parameter(1)
  at = s32[] parameter(2)
  ROOT u = f32[16] dynamic-update-slice(zeros, part, at)
}

other_padding {
  zeros = f32[16] parameter(0)
  part = f32[8] parameter(1)
  at = s32[] parameter(2)
  ROOT u = f32[16] dynamic-update-slice(zeros, part, at)
}

recomputed_padding {
  zeros = f32[16] parameter(0)
  pre = f32[8] parameter(1)
  at = s32[] parameter(2)
  relu = f32[8] maximum(pre, pre),
    metadata={op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/linear_1/max"}
  ROOT u = f32[16] dynamic-update-slice(zeros, relu, at)
}

cond {
  c = (s32[], f32[8], f32[8,8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  b = (s32[], f32[8], f32[8,8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = f32[8] get-tuple-element(b), index=1
  w = f32[8,8] get-tuple-element(b), index=2
  acc = f32[8] get-tuple-element(b), index=3
  p = f32[8] collective-permute(x), source_target_pairs={{0,1},{1,0}}
  d = f32[8] @PRODUCT
  s = f32[8] add(d, acc), metadata={op_name="@LOOP"}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8], f32[8,8], f32[8]) tuple(j, p, w, s)
}

ENTRY main {
  a = f32[8] parameter(0)
  wt = f32[8,8] parameter(1)
  at = s32[] parameter(2)
  h = f32[8] multiply(a, a), metadata={op_name="jit(loss)/jvp()/mul"}
  zeros = f32[16] broadcast(f32[] constant(0)), dimensions={}
  @GATHER
  z = s32[] constant(0)
  zero = f32[8] broadcast(f32[] constant(0)), dimensions={}
  t0 = (s32[], f32[8], f32[8,8], f32[8]) tuple(z, h, wt, zero)
  ROOT loop = (s32[], f32[8], f32[8,8], f32[8]) while(t0), condition=cond, body=body,
    metadata={op_name="@LOOP"}
}
"""

_MATVEC = 'fusion(w, x), kind=kLoop, calls=product, metadata={op_name="@LOOP"}'
_DOT = 'dot(w, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="@LOOP"}'
_LOOP = "jit(loss)/jvp()/dot_general"


def _counted(gather: str, product: str = _MATVEC, loop: str = _LOOP) -> set[str]:
    module = hloparse.parse(HLO.replace("@GATHER", gather).replace("@PRODUCT", product).replace("@LOOP", loop))
    ops = [SiteOp((comp.name, inst.name, 0), inst, "", False, False, k, None, None, comp.name)
           for k, (comp, inst) in enumerate(module.instructions())]
    counted, _ = windowed_matvec_loops(module, ops)
    return {f"{key[0]}/{key[1]}" for key in counted}


# The backward's gathers of TPU 293 and 124: the windowed value written into zeros and all-reduced,
# the all-reduce named for the transpose, or read by the weight gradient's product named so.
_FOLDED = ('g = f32[16] fusion(zeros, h, at), kind=kLoop, calls=padding\n'
           '  r = f32[16] all-reduce(g), to_apply=sum,'
           ' metadata={op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/dot_general"}')
_READ = ('g = f32[16] fusion(zeros, h, at), kind=kLoop, calls=padding\n'
         '  g2 = f32[16] fusion(zeros, a, at), kind=kLoop, calls=other_padding\n'
         '  r = (f32[16], f32[16]) all-reduce(g2, g), to_apply=sum\n'
         '  e = f32[16] get-tuple-element(r), index=1\n'
         '  dw = f32[16] multiply(e, e), metadata={op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/dot_general"}')


def test_a_matvec_window_loop_whose_value_the_backward_gathers_again_is_remat():
    for gather in (_FOLDED, _READ):
        counted = _counted(gather)
        assert {"body/s", "body/j", "cond/lt"} <= counted
        assert not {"product/m", "product/r"} & counted  # the product the program without remat runs


def test_a_matvec_window_loop_whose_recompute_gathers_its_operand_is_remat():
    # TPU 191: the recompute all-gathers its own operand under its remat name.
    recompute = ('g = f32[16] all-gather(a), dimensions={0},'
                 ' metadata={op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/dot_general"}')
    assert {"body/s", "body/j"} <= _counted(recompute)
    # haiku (TPU 162): a recomputed relu written into zeros and all-reduced for the weight gradient
    # of the same layer (`jvp(linear_1)` in the forward, `checkpoint/linear_1` in its transpose).
    padded = ('g = f32[16] fusion(zeros, a, at), kind=kLoop, calls=recomputed_padding\n'
              '  r = f32[16] all-reduce(g), to_apply=sum\n'
              '  dw = f32[16] multiply(r, r),'
              ' metadata={op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/linear_1/dot_general"}')
    assert "body/s" in _counted(padded, loop="jit(loss)/jvp(linear_1)/dot_general")
    assert _counted(padded, loop="jit(loss)/jvp(linear_2)/dot_general") == set()


def test_a_matvec_window_loop_the_backward_does_not_gather_again_is_not():
    # Another value gathered; a gather nobody in the backward reads; a loop of dots (the other rules').
    assert _counted(_FOLDED.replace("zeros, h, at", "zeros, a, at")) == set()
    unread = _READ.replace("jit(loss)/transpose(jvp(jvp()))/checkpoint/dot_general", "jit(loss)/jvp()/mul")
    assert _counted(unread) == set()
    assert _counted(_FOLDED, product=_DOT) == set()


def _shares(gather: str, product: str = _MATVEC) -> dict[tuple[str, str], tuple[int, int]]:
    return windowed_product_shares(hloparse.parse(HLO.replace("@GATHER", gather).replace("@PRODUCT", product)
                                                  .replace("@LOOP", _LOOP)))


def test_a_remat_only_matvec_window_loop_reduces_trips_less_one_times_its_outputs_fewer():
    # The twin reduces the whole contraction once (an [8,8] product to 8 outputs: 56 adds); the
    # loop's 2 trips reduce a window each (2 x 56 here, one window per trip in this toy), and the
    # accumulating add sums the parts: the twin adds (2 - 1) x 8 more, a sure negative share of the
    # loop's reduce row (TPU 124: 2 loops x 64 outputs, reduce +128 before; 162: +192; 293: +256).
    assert _shares(_FOLDED) == {("product", "r"): (-8, 2 * 56)}
    # Where the backward does not gather the windowed value again, the twin may run the same loop.
    assert _shares(_FOLDED.replace("zeros, h, at", "zeros, a, at")) == {}
    assert _shares(_FOLDED, product=_DOT) == {}
