"""An activation gathered in windows twice whose windows TPU concatenates in bf16 through float-type
correction (hloflops.remat.twice_windowed_gathers).

Hand-written after TPU draws 422 (python loop, offload policy) and 436 (haiku loop) under FSDP: the
rows travel as bf16, and TPU runs a bf16 `maximum` in f32, so each concatenation of `-inf` pads is
`convert(maximum(convert(pad), convert(pad)))`; each gather narrows its own copy of `x` before the
permutes; and the weight gradient's partial sum sits in the matmul's fusion behind views
(`add(bitcast(acc), bitcast(conv))`). The program without remat gathers `x` once with an all-gather
for both readers: no concatenation, no partial sum. Before, the rule saw none of it (422: convert
-10,945, add -6,144, maximum -3,072, the truth above the high end).
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

FWD = "jit(loss)/jvp()/dot_general"
BWD = "jit(loss)/transpose(jvp(jvp()))/checkpoint/dot_general"
RING = "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}"
CONFIG = 'backend_config={"flag_configs":[],"scoped_memory_configs":[]}'


def _concat(name: str, op_name: str) -> str:
    return f"""{name} {{
  a.{name} = bf16[1,16] parameter(0)
  b.{name} = bf16[1,16] parameter(1)
  ninf.{name} = f32[] constant(-inf)
  pa.{name} = bf16[2,16] pad(a.{name}, ninf.{name}), padding=0_1x0_0, metadata={{op_name="{op_name}"}}
  wa.{name} = f32[2,16] convert(pa.{name})
  pb.{name} = bf16[2,16] pad(b.{name}, ninf.{name}), padding=1_0x0_0, metadata={{op_name="{op_name}"}}
  wb.{name} = f32[2,16] convert(pb.{name})
  m.{name} = f32[2,16] maximum(wa.{name}, wb.{name}), metadata={{op_name="{op_name}"}}
  ROOT n.{name} = bf16[2,16] convert(m.{name})
}}
"""


def _module(backward_rows: str = "x", partitions: int = 4) -> hloparse.Module:
    """The forward's two windows of `x` and the weight gradient's two, of `backward_rows`' rows."""
    return hloparse.parse(f"""HloModule m, is_scheduled=true, num_partitions={partitions}, \
entry_computation_layout={{(f32[1,16]{{1,0:T(1,128)}}, bf16[16,64]{{1,0:T(8,128)}}, bf16[2,64]{{1,0:T(2,128)}})\
->(f32[2,64]{{1,0:T(2,128)}}, f32[2,64]{{1,0:T(2,128)}}, f32[1,16,64]{{2,1,0:T(8,128)}})}}

narrow {{
  v = f32[1,16] parameter(0)
  ROOT nv = bf16[1,16] convert(v)
}}

narrow.1 {{
  v.1 = f32[1,16] parameter(0)
  ROOT nv.1 = bf16[1,16] convert(v.1)
}}

{_concat("c", FWD)}
{_concat("c1", FWD)}
{_concat("c2", BWD)}
{_concat("c3", BWD)}
partial {{
  acc = f32[16,64] parameter(0)
  xa = bf16[1,16] parameter(1)
  xb = bf16[1,16] parameter(2)
  dr = bf16[2,64] parameter(3)
  cx = bf16[2,16] fusion(xa, xb), kind=kLoop, calls=c3
  dw = f32[16,64] dot(cx, dr), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}, metadata={{op_name="{BWD}"}}
  bacc = f32[16,64] bitcast(acc)
  bdw = f32[16,64] bitcast(dw)
  sum = f32[16,64] add(bacc, bdw), metadata={{op_name="{BWD}"}}
  ROOT out = f32[1,16,64] bitcast(sum)
}}

ENTRY main {{
  x = f32[1,16] parameter(0)
  w = bf16[16,64] parameter(1)
  dy = bf16[2,64] parameter(2)
  xr0 = f32[1,16] negate(x), metadata={{op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/neg"}}
  xo = f32[1,16] negate(x), metadata={{op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/neg"}}
  n0 = bf16[1,16] fusion(x), kind=kLoop, calls=narrow
  cp0 = bf16[1,16] collective-permute(n0), {RING}, metadata={{op_name="{FWD}"}}
  cp1 = bf16[1,16] collective-permute(cp0), {RING}, metadata={{op_name="{FWD}"}}
  c0 = bf16[2,16] fusion(cp0, n0), kind=kLoop, calls=c, {CONFIG}
  c1 = bf16[2,16] fusion(cp1, cp0), kind=kLoop, calls=c1
  y0 = f32[2,64] dot(c0, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_name="{FWD}"}}
  y1 = f32[2,64] dot(c1, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_name="{FWD}"}}
  n1 = bf16[1,16] fusion({backward_rows}), kind=kLoop, calls=narrow.1
  cp2 = bf16[1,16] collective-permute(n1), {RING}, metadata={{op_name="{BWD}"}}
  cp3 = bf16[1,16] collective-permute(cp2), {RING}, metadata={{op_name="{BWD}"}}
  c2 = bf16[2,16] fusion(cp2, n1), kind=kLoop, calls=c2
  dw0 = f32[16,64] dot(c2, dy), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}, metadata={{op_name="{BWD}"}}
  dw1 = f32[1,16,64] fusion(dw0, cp3, cp2, dy), kind=kOutput, calls=partial
  ROOT out = (f32[2,64], f32[2,64], f32[1,16,64]) tuple(y0, y1, dw1)
}}
""")


def _concatenation(name: str) -> set[tuple[str, str]]:
    return {(name, f"{op}.{name}") for op in ("wa", "wb", "m", "n")}


WINDOWS = _concatenation("c") | _concatenation("c1") | _concatenation("c2") | _concatenation("c3") \
    | {("partial", "sum")}


def test_float_type_corrected_windows_of_an_activation_gathered_again_are_remat():
    index = find_remat(_module())
    assert WINDOWS <= index.remat
    assert not WINDOWS & index.weak  # sure: the program without remat gathers once
    # The windows' matmuls run the one matmul's FLOPs, as the program without remat does.
    assert not {("main", "y0"), ("main", "y1"), ("main", "dw0"), ("partial", "dw")} & index.remat
    # The backward's own narrow of x for its permutes is remat; the forward's is the one narrow the
    # program without remat runs for its all-gather.
    assert ("narrow.1", "nv.1") in index.remat and ("narrow", "nv") not in index.remat


def test_not_where_the_weight_gradient_gathers_another_value():
    assert not WINDOWS & find_remat(_module(backward_rows="xo")).remat
    assert not WINDOWS & find_remat(_module(partitions=1)).remat
