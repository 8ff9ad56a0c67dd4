"""A checkpoint policy's saved residual after XLA's float normalization (CPU): jax's identity
reduce-precision on the bfloat16 value, widened to f32 for it (`convert(convert(y, bf16), f32)`),
runs only because of remat, and so does that round trip (hloflops.remat.rounding). XLA may fuse
the round trip into the library fusion computing the matmul, its root, and leave the rounding
alone in the next fusion: the round trip is the marker's all the same (more seed 17, attention's
`bhqk,bkhd->bqhd` under `dots_saveable`: convert -1,048,576 and reduce-precision -524,288 before).
Handwritten: no jax needed."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

FORWARD = "jit(loss)/jvp(LM)/block_0/attn"
RECOMPUTE = "jit(loss)/transpose(jvp(LM))/checkpoint/rematted_computation/block_0/attn"


def _module(trip_in_producer: bool) -> str:
    """A saved matmul output (`pv`) rounded to bfloat16's bits: the round trip into f32 either at
    the root of the library fusion computing the matmul, or in the rounding's own fusion."""
    if trip_in_producer:
        library_root = """  d = f32[8,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, \
metadata={op_name="FWD/pv/dot_general"}
  n = bf16[8,16]{1,0} convert(d)
  ROOT w = f32[8,16]{1,0} convert(n)"""
        rounding = """  p = f32[8,16]{1,0} parameter(0)
  r = f32[8,16]{1,0} reduce-precision(p), exponent_bits=8, mantissa_bits=7, metadata={op_name="FWD/pv/reduce_precision"}
  ROOT s = bf16[8,16]{1,0} convert(r)"""
    else:
        library_root = """  ROOT d = f32[8,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, \
metadata={op_name="FWD/pv/dot_general"}"""
        rounding = """  p = f32[8,16]{1,0} parameter(0)
  n = bf16[8,16]{1,0} convert(p)
  w = f32[8,16]{1,0} convert(n)
  r = f32[8,16]{1,0} reduce-precision(w), exponent_bits=8, mantissa_bits=7, metadata={op_name="FWD/pv/reduce_precision"}
  ROOT s = bf16[8,16]{1,0} convert(r)"""
    text = f"""
HloModule rounding_round_trip, is_scheduled=true

library {{
  a = f32[8,32]{{1,0}} parameter(0)
  b = f32[32,16]{{1,0}} parameter(1)
{library_root}
}}

saving {{
{rounding}
}}

recompute_fusion {{
  a = f32[8,32]{{1,0}} parameter(0)
  b = f32[32,16]{{1,0}} parameter(1)
  ROOT rd = f32[8,16]{{1,0}} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, \
metadata={{op_name="REC/scores/dot_general"}}
}}

ENTRY main {{
  x = f32[8,32]{{1,0}} parameter(0)
  y = f32[32,16]{{1,0}} parameter(1)
  g = bf16[8,16]{{1,0}} parameter(2)
  f = f32[8,16]{{1,0}} fusion(x, y), kind=kCustom, calls=library
  saved = bf16[8,16]{{1,0}} fusion(f), kind=kLoop, calls=saving
  rs = f32[8,16]{{1,0}} fusion(x, y), kind=kCustom, calls=recompute_fusion
  fs = f32[8,16]{{1,0}} fusion(x, y), kind=kCustom, calls=forward_scores
  gr = bf16[8,16]{{1,0}} multiply(g, saved), metadata={{op_name="jit(loss)/transpose(jvp(LM))/block_0/attn/mul"}}
  ROOT out = (bf16[8,16]{{1,0}}, f32[8,16]{{1,0}}, f32[8,16]{{1,0}}) tuple(gr, rs, fs)
}}

forward_scores {{
  a = f32[8,32]{{1,0}} parameter(0)
  b = f32[32,16]{{1,0}} parameter(1)
  ROOT fd = f32[8,16]{{1,0}} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, \
metadata={{op_name="FWD/scores/dot_general"}}
}}
"""
    return text.replace("FWD", FORWARD).replace("REC", RECOMPUTE)


def _remat(text: str) -> dict[str, int]:
    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    return {r.name: r.total.flops for r in acc.rows if r.remat and r.total.flops}


def test_round_trip_inside_the_rounding_fusion_is_the_markers():
    remat = _remat(_module(trip_in_producer=False))
    assert {"r", "w", "n"} <= remat.keys() and "s" not in remat, remat


def test_round_trip_at_the_root_of_the_producing_fusion_is_the_markers():
    remat = _remat(_module(trip_in_producer=True))
    # the rounding, and the narrow and widen the library fusion ends with only to feed it; the
    # convert after the rounding is the narrowing the program without remat makes too
    assert {"r", "w", "n"} <= remat.keys() and "s" not in remat, remat
    assert "d" not in remat  # the forward's matmul itself
