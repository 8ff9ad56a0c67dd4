"""An FSDP weight gathered twice within one variadic all-reduce (analysis/hloflops/remat/
collectives.py, `repeated_gathers`). TPU gathers a small weight's shards with an all-reduce of each
shard written into zeros at the device's offset; a checkpoint's recompute reads its weights through
the barrier on its inputs, so it gathers the weight again, and where XLA's combiner puts that gather
in the same all-reduce as the forward's own, the shard is gathered twice by one instruction. The
program without remat gathers it once (held-out xtpu 363 and ntpu 143, whole-model checkpoints
under FSDP: all-reduce -64 after optimization). Here `ar` gathers the bias shard `b` for the
forward's bias add `y` and again for the recompute's `y.r`: half its elements are remat."""

from __future__ import annotations

from tests.remat.judge import by_opcode
from tests.remat.test_remat_repeated_gathers import _parsed

import hloflops.accounting as accounting
from hloflops.remat import find_remat

HLO = """HloModule gathered_twice, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,8] parameter(1)
  b = f32[2] parameter(2)
  g = f32[8,8] parameter(3)
  id = u32[] partition-id()
  two = u32[] constant(2)
  off = u32[] multiply(id, two)
  zero = f32[] constant(0)
  zeros = f32[8] broadcast(zero), dimensions={}
  dus = f32[8] dynamic-update-slice(zeros, b, off)
  zeros.r = f32[8] broadcast(zero), dimensions={}
  dus.r = f32[8] dynamic-update-slice(zeros.r, b, off)
  ar = (f32[8], f32[8]) all-reduce(dus, dus.r), to_apply=sum
  gf = f32[8] get-tuple-element(ar), index=0
  gr = f32[8] get-tuple-element(ar), index=1
  h = f32[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  bb = f32[8,8] broadcast(gf), dimensions={1}, metadata={op_name="@F/Dense_0/add"}
  y = f32[8,8] add(h, bb), metadata={op_name="@F/Dense_0/add"}
  t = f32[8,8] tanh(y), metadata={op_name="@F/tanh"}
  h.r = f32[8,8] dot(x, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  bb.r = f32[8,8] broadcast(gr), dimensions={1}, metadata={op_name="@R/Dense_0/add"}
  y.r = f32[8,8] add(h.r, bb.r), metadata={op_name="@R/Dense_0/add"}
  t.r = f32[8,8] tanh(y.r), metadata={op_name="@R/tanh"}
  m = f32[8,8] multiply(t.r, g), metadata={op_name="@B/mul"}
  ROOT out = (f32[8,8], f32[8,8]) tuple(t, m)
}
"""


def test_a_shard_gathered_twice_by_one_all_reduce_is_remat_for_the_second_gather():
    module = _parsed(HLO)
    index = find_remat(module)
    assert ("main", "y.r") in index  # the recompute reading the second gather
    assert ("main", "ar") in index and index.partial[("main", "ar")] == (8, 16)
    assert ("main", "ar") not in index.weak
    assert by_opcode(accounting.account(module, xla={"flops": 0.0}), remat=True)["all-reduce"] == 8


FUSED = """HloModule gathered_again_after_a_fused_write, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

write {
  into = f32[8] parameter(0)
  at = u32[] parameter(1)
  shard = f32[1,2] parameter(2)
  flat = f32[2] bitcast(shard)
  ROOT w = f32[8] dynamic-update-slice(into, flat, at)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,8] parameter(1)
  b = f32[1,2] parameter(2)
  g = f32[8,8] parameter(3)
  id = u32[] partition-id()
  two = u32[] constant(2)
  off = u32[] multiply(id, two)
  zero = f32[] constant(0)
  zeros = f32[8] broadcast(zero), dimensions={}
  dus = f32[8] fusion(zeros, off, b), kind=kLoop, calls=write
  ar = f32[8] all-reduce(dus), to_apply=sum
  h = f32[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  bb = f32[8,8] broadcast(ar), dimensions={1}, metadata={op_name="@F/Dense_0/add"}
  y = f32[8,8] add(h, bb), metadata={op_name="@F/Dense_0/add"}
  t = f32[8,8] tanh(y), metadata={op_name="@F/tanh"}
  flat.r = f32[2] bitcast(b)
  zeros.r = f32[8] broadcast(zero), dimensions={}
  dus.r = f32[8] dynamic-update-slice(zeros.r, flat.r, off)
  ar.r = f32[8] all-reduce(dus.r), to_apply=sum
  h.r = f32[8,8] dot(x, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  bb.r = f32[8,8] broadcast(ar.r), dimensions={1}, metadata={op_name="@R/Dense_0/add"}
  y.r = f32[8,8] add(h.r, bb.r), metadata={op_name="@R/Dense_0/add"}
  t.r = f32[8,8] tanh(y.r), metadata={op_name="@R/tanh"}
  m = f32[8,8] multiply(t.r, g), metadata={op_name="@B/mul"}
  ROOT out = (f32[8,8], f32[8,8]) tuple(t, m)
}
"""


def test_a_shard_the_forward_gathered_through_a_fused_write_is_gathered_again_by_the_recompute():
    """The forward's gather writes its shard into zeros inside a loop fusion (its bitcast fused
    with the write), the recompute's gather does not (held-out wtpu 353, FSDP: all-reduce -128
    after optimization): the recompute's all-reduce gathers that shard again, all of it remat."""
    module = _parsed(FUSED)
    index = find_remat(module)
    assert ("main", "y.r") in index
    assert ("main", "ar.r") in index and ("main", "ar.r") not in index.partial
    assert ("main", "ar.r") not in index.weak and ("main", "ar") not in index
    assert by_opcode(accounting.account(module, xla={"flops": 0.0}), remat=True)["all-reduce"] == 8


NESTED = """HloModule gathered_again_for_a_nested_recompute, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

bias {
  h.p = f32[8,8] parameter(0)
  g.p = f32[8] parameter(1)
  bb.r = f32[8,8] broadcast(g.p), dimensions={1}, metadata={op_name="@R/Dense_0/add"}
  ROOT y.r = f32[8,8] add(h.p, bb.r), metadata={op_name="@R/Dense_0/add"}
}

gradient {
  h.o = f32[8,8] parameter(0)
  g.o = f32[8] parameter(1)
  d.o = f32[8,8] parameter(2)
  f.r = f32[8,8] fusion(h.o, g.o), kind=kLoop, calls=bias, metadata={op_name="@R/Dense_0/add"}
  ROOT m = f32[8,8] multiply(f.r, d.o), metadata={op_name="@B/mul"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,8] parameter(1)
  b = f32[2] parameter(2)
  g = f32[8,8] parameter(3)
  id = u32[] partition-id()
  two = u32[] constant(2)
  off = u32[] multiply(id, two)
  zero = f32[] constant(0)
  zeros = f32[8] broadcast(zero), dimensions={}
  dus = f32[8] dynamic-update-slice(zeros, b, off)
  ar = f32[8] all-reduce(dus), to_apply=sum
  h = f32[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  bb = f32[8,8] broadcast(ar), dimensions={1}, metadata={op_name="@F/Dense_0/add"}
  y = f32[8,8] add(h, bb), metadata={op_name="@F/Dense_0/add"}
  t = f32[8,8] tanh(y), metadata={op_name="@F/tanh"}
  zeros.r = f32[8] broadcast(zero), dimensions={}
  dus.r = f32[8] dynamic-update-slice(zeros.r, b, off)
  ar.r = f32[8] all-reduce(dus.r), to_apply=sum
  h.r = f32[8,8] dot(x, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  m = f32[8,8] fusion(h.r, ar.r, g), kind=kOutput, calls=gradient, metadata={op_name="@B/mul"}
  ROOT out = (f32[8,8], f32[8,8]) tuple(t, m)
}
"""


def test_a_gather_read_by_a_recompute_nested_in_a_fusion_is_gathered_again():
    """The recompute's bias add that reads the gathered weight sits in a loop fusion nested in the
    backward's fusion (an async collective fusion nests it so: xtpu 394, a loop under FSDP,
    all-reduce -256 after optimization): the recompute's gather is remat."""
    module = _parsed(NESTED)
    index = find_remat(module)
    assert ("bias", "y.r") in index and ("gradient", "m") not in index
    assert ("main", "ar.r") in index and ("main", "ar") not in index
    assert by_opcode(accounting.account(module, xla={"flops": 0.0}), remat=True)["all-reduce"] == 8


CAST = """HloModule gathered_again_as_a_cast, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cast {
  shard = f32[1,2] parameter(0)
  flat = f32[2] bitcast(shard)
  ROOT c = bf16[2] convert(flat)
}

ENTRY main {
  x = bf16[8,16] parameter(0)
  w = bf16[16,8] parameter(1)
  b = f32[1,2] parameter(2)
  g = bf16[8,8] parameter(3)
  id = u32[] partition-id()
  two = u32[] constant(2)
  off = u32[] multiply(id, two)
  zero = bf16[] constant(0)
  zeros = bf16[8] broadcast(zero), dimensions={}
  cb = bf16[2] fusion(b), kind=kLoop, calls=cast
  dus = bf16[8] dynamic-update-slice(zeros, cb, off)
  ar = bf16[8] all-reduce(dus), to_apply=sum
  h = bf16[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  bb = bf16[8,8] broadcast(ar), dimensions={1}, metadata={op_name="@F/Dense_0/add"}
  y = bf16[8,8] add(h, bb), metadata={op_name="@F/Dense_0/add"}
  t = bf16[8,8] tanh(y), metadata={op_name="@F/tanh"}
  flat.r = f32[2] bitcast(b)
  cb.r = bf16[2] convert(flat.r)
  zeros.r = bf16[8] broadcast(zero), dimensions={}
  dus.r = bf16[8] dynamic-update-slice(zeros.r, cb.r, off)
  ar.r = bf16[8] all-reduce(dus.r), to_apply=sum
  h.r = bf16[8,8] dot(x, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  bb.r = bf16[8,8] broadcast(ar.r), dimensions={1}, metadata={op_name="@R/Dense_0/add"}
  y.r = bf16[8,8] add(h.r, bb.r), metadata={op_name="@R/Dense_0/add"}
  t.r = bf16[8,8] tanh(y.r), metadata={op_name="@R/tanh"}
  m = bf16[8,8] multiply(t.r, g), metadata={op_name="@B/mul"}
  ROOT out = (bf16[8,8], bf16[8,8]) tuple(t, m)
}
"""


def test_a_cast_of_a_shard_gathered_again_is_the_same_shard_gathered_again():
    """A bf16 program gathers its weights' bf16 casts, each gather casting the shard itself: the
    forward's cast fused, the recompute's not (utpu 186, FSDP: all-reduce -256 after optimization).
    The same cast of the same shard is the same value: the recompute's gather of it is remat."""
    module = _parsed(CAST)
    index = find_remat(module)
    assert ("main", "y.r") in index
    assert ("main", "ar.r") in index and ("main", "ar") not in index
    assert by_opcode(accounting.account(module, xla={"flops": 0.0}), remat=True)["all-reduce"] == 8
