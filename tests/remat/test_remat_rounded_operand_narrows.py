"""A forward matmul reading relu wide behind a policy's saved-residual rounding, whose recompute
copy TPU narrows for the weight gradient's matmul (hloflops.remat.rounded_operand_narrows): the
program without remat has no rounding, and may narrow its forward copy as this program narrows the
recompute's. The recompute's narrow is a hinge both ways: weak (the twin's weight gradient narrows
its copy too) and one `twin_copies` (the twin's forward narrow), lowering the range's low end only.

Hand-written after TPU draw 237 of the generator (an unrolled gradient accumulation of relu MLPs
under `save_only_these_names`, FSDP: convert truth -24,576 against +24,576 counted, the range's
low end 8,192 above a truth of 0).
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

UNROLLED = """HloModule unrolled_relu, is_scheduled=true, entry_computation_layout=@L

fwd_relu {
  p = f32[8,16] parameter(0)
  r = f32[8,16] reduce-precision(p), exponent_bits=8, mantissa_bits=23, metadata={op_name="@F/reduce_precision"}
  z = f32[] constant(0)
  zs = f32[8,16] broadcast(z), dimensions={}
  ROOT m = f32[8,16] maximum(@ROUNDED, zs), metadata={op_name="@F/jit(relu)/max"}
}

rec_relu {
  q = f32[8,16] parameter(0)
  z2 = f32[] constant(0)
  zs2 = f32[8,16] broadcast(z2), dimensions={}
  m2 = f32[8,16] maximum(q, zs2), metadata={op_name="@R/jit(relu)/max"}
  ROOT n2 = bf16[8,16] convert(m2)
}

ENTRY main {
  x = bf16[8,4] parameter(0)
  w1 = bf16[4,16] parameter(1)
  w2 = bf16[16,8] parameter(2)
  dy = bf16[8,8] parameter(3)
  h = f32[8,16] dot(x, w1), @D, metadata={op_name="@F/dot_general"}, @T
  a = f32[8,16] fusion(h), kind=kLoop, calls=fwd_relu
  y = f32[8,8] dot(a, w2), @D, metadata={op_name="@F/dot_general"}
  ar = bf16[8,16] fusion(h), kind=kLoop, calls=rec_relu
  dw = f32[16,8] dot(ar, dy), @G, metadata={op_name="@B/dot_general"}
  ROOT out = (f32[8,8], f32[16,8]) tuple(y, dw)
}
"""


def _parsed(text: str = UNROLLED, rounded: str = "r"):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D, @G a matmul's and a weight gradient's dimension numbers, @L
    the entry's layout and @T TPU's backend config (what makes it a TPU module); @ROUNDED what the
    forward's relu reads (the rounding, or the parameter under it)."""
    text = text.replace("@ROUNDED", rounded)
    for short, long in (("@R", "jit(step)/transpose(jvp())/closed_call/checkpoint/rematted_computation"),
                        ("@B", "jit(step)/transpose(jvp())/closed_call"), ("@F", "jit(step)/jvp()/closed_call"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(bf16[8,4]{1,0:T(8,128)(2,1)})->f32[8,8]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def _hinged(index) -> dict:
    return {key[:2]: n for key, n in index.twin_copies.items() if key[0] == "rec_relu"}


def test_recompute_narrow_carries_the_twins_forward_narrow():
    index = find_remat(_parsed())
    assert _hinged(index) == {("rec_relu", "n2"): 1}
    assert ("rec_relu", "n2") not in index.remat or ("rec_relu", "n2") in index.weak


def test_nothing_without_the_rounding():
    # The forward's relu reads `h` itself: nothing in this program tells the forward copy from
    # the recompute's, and the program without remat fuses it alike.
    assert _hinged(find_remat(_parsed(rounded="p"))) == {}


def test_nothing_where_the_forward_narrows_too():
    # The forward hands its matmul relu narrowed: the twin's narrow has its counterpart here.
    relu = 'maximum(@ROUNDED, zs), metadata={op_name="@F/jit(relu)/max"}\n'
    narrowed = UNROLLED.replace(f"  ROOT m = f32[8,16] {relu}}}",
                                f"  m = f32[8,16] {relu}  ROOT mn = bf16[8,16] convert(m)\n}}") \
        .replace("  a = f32[8,16] fusion(h)", "  a = bf16[8,16] fusion(h)")
    assert _hinged(find_remat(_parsed(text=narrowed))) == {}


def test_nothing_where_the_recompute_is_read_wide():
    # tanh-like: the recompute's copy is not narrowed either (TPU draws 62, 68): no sign.
    wide = UNROLLED.replace("  m2 = f32[8,16] maximum(q, zs2), metadata={op_name=\"@R/jit(relu)/max\"}\n"
                            "  ROOT n2 = bf16[8,16] convert(m2)\n",
                            "  ROOT m2 = f32[8,16] maximum(q, zs2), metadata={op_name=\"@R/jit(relu)/max\"}\n") \
        .replace("  ar = bf16[8,16] fusion(h)", "  ar = f32[8,16] fusion(h)")
    assert _hinged(find_remat(_parsed(text=wide))) == {}


def test_nothing_before_optimization():
    assert _hinged(find_remat(_parsed(text=UNROLLED.replace(", is_scheduled=true", "")))) == {}
