"""An activation TPU gathers in windows twice, for a forward matmul and for its weight gradient,
where the program without remat gathers it once for both (hloflops.remat.twice_windowed_gathers).

Hand-written after TPU draw 19 (a whole-model checkpoint under FSDP) and held-out draw 159
(haiku's per-layer checkpoints under FSDP): the checkpoint's barrier makes the weight gradient's
`x` another value than the forward's while the partitioner runs, so each gets a gather of its own,
and TPU unrolls both as windowed einsums: rows passed on by collective-permute, concatenated as a
`maximum` of `-inf` pads, a matmul per window, and for the weight gradient the matching rows of
`dy` selected the same way and the partial products summed (`add`). Those concatenations,
selections and sums were model FLOPs (draw 19: add -12,288, maximum -2,304 after optimization,
truth above the high end). Here `x` (rows sharded over 4 devices) is gathered in two windows for
the forward `x @ w` and again for `dW = x^T dy`.
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

FWD = "jit(loss)/jvp(linear)/dot_general"
BWD = "jit(loss)/transpose(jvp(jvp()))/checkpoint/linear/dot_general"
REMAT = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/add"
CONFIG = 'backend_config={"flag_configs":[],"scoped_memory_configs":[]}'
RING = "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}"


def _module(backward_rows: str = "x", partitions: int = 4) -> hloparse.Module:
    """The forward's two windows of `x` and the weight gradient's two, of `backward_rows`' rows."""
    return hloparse.parse(f"""HloModule m, is_scheduled=true, num_partitions={partitions}, \
entry_computation_layout={{(f32[1,16]{{1,0:T(1,128)}}, f32[16,64]{{1,0:T(8,128)}}, f32[4,64]{{1,0:T(4,128)}})\
->(f32[2,64]{{1,0:T(2,128)}}, f32[2,64]{{1,0:T(2,128)}}, f32[16,64]{{1,0:T(8,128)}})}}

concat {{
  a = f32[1,16] parameter(0)
  b = f32[1,16] parameter(1)
  ninf = f32[] constant(-inf)
  pa = f32[2,16] pad(a, ninf), padding=0_1x0_0, metadata={{op_name="{FWD}"}}
  pb = f32[2,16] pad(b, ninf), padding=1_0x0_0, metadata={{op_name="{FWD}"}}
  ROOT m = f32[2,16] maximum(pa, pb), metadata={{op_name="{FWD}"}}
}}

concat.1 {{
  a.1 = f32[1,16] parameter(0)
  b.1 = f32[1,16] parameter(1)
  ninf.1 = f32[] constant(-inf)
  pa.1 = f32[2,16] pad(a.1, ninf.1), padding=0_1x0_0, metadata={{op_name="{FWD}"}}
  pb.1 = f32[2,16] pad(b.1, ninf.1), padding=1_0x0_0, metadata={{op_name="{FWD}"}}
  ROOT m.1 = f32[2,16] maximum(pa.1, pb.1), metadata={{op_name="{FWD}"}}
}}

concat.2 {{
  a.2 = f32[1,16] parameter(0)
  b.2 = f32[1,16] parameter(1)
  ninf.2 = f32[] constant(-inf)
  pa.2 = f32[2,16] pad(a.2, ninf.2), padding=0_1x0_0, metadata={{op_name="{BWD}"}}
  pb.2 = f32[2,16] pad(b.2, ninf.2), padding=1_0x0_0, metadata={{op_name="{BWD}"}}
  ROOT m.2 = f32[2,16] maximum(pa.2, pb.2), metadata={{op_name="{BWD}"}}
}}

concat.3 {{
  a.3 = f32[1,16] parameter(0)
  b.3 = f32[1,16] parameter(1)
  ninf.3 = f32[] constant(-inf)
  pa.3 = f32[2,16] pad(a.3, ninf.3), padding=0_1x0_0, metadata={{op_name="{BWD}"}}
  pb.3 = f32[2,16] pad(b.3, ninf.3), padding=1_0x0_0, metadata={{op_name="{BWD}"}}
  ROOT m.3 = f32[2,16] maximum(pa.3, pb.3), metadata={{op_name="{BWD}"}}
}}

rows {{
  d = f32[4,64] parameter(0)
  ninf.4 = f32[] constant(-inf)
  pd = f32[6,64] pad(d, ninf.4), padding=0_2x0_0, metadata={{op_name="{BWD}"}}
  sd = f32[2,64] slice(pd), slice={{[0:2], [0:64]}}, metadata={{op_name="{BWD}"}}
  qd = f32[6,64] pad(d, ninf.4), padding=2_0x0_0, metadata={{op_name="{BWD}"}}
  td = f32[2,64] slice(qd), slice={{[4:6], [0:64]}}, metadata={{op_name="{BWD}"}}
  ROOT s = f32[2,64] maximum(sd, td), metadata={{op_name="{BWD}"}}
}}

rows.1 {{
  d.1 = f32[4,64] parameter(0)
  ninf.5 = f32[] constant(-inf)
  pd.1 = f32[6,64] pad(d.1, ninf.5), padding=0_2x0_0, metadata={{op_name="{BWD}"}}
  sd.1 = f32[2,64] slice(pd.1), slice={{[2:4], [0:64]}}, metadata={{op_name="{BWD}"}}
  qd.1 = f32[6,64] pad(d.1, ninf.5), padding=2_0x0_0, metadata={{op_name="{BWD}"}}
  td.1 = f32[2,64] slice(qd.1), slice={{[2:4], [0:64]}}, metadata={{op_name="{BWD}"}}
  ROOT s.1 = f32[2,64] maximum(sd.1, td.1), metadata={{op_name="{BWD}"}}
}}

partial {{
  acc = f32[16,64] parameter(0)
  xr = f32[2,16] parameter(1)
  dr = f32[2,64] parameter(2)
  dw = f32[16,64] dot(xr, dr), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}, metadata={{op_name="{BWD}"}}
  ROOT sum = f32[16,64] add(acc, dw), metadata={{op_name="{BWD}"}}
}}

ENTRY main {{
  x = f32[1,16] parameter(0)
  w = f32[16,64] parameter(1)
  dy = f32[4,64] parameter(2)
  xr0 = f32[1,16] negate(x), metadata={{op_name="{REMAT}"}}
  xo = f32[1,16] negate(x), metadata={{op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/neg"}}
  cp0 = f32[1,16] collective-permute(x), {RING}, metadata={{op_name="{FWD}"}}
  cp1 = f32[1,16] collective-permute(cp0), {RING}, metadata={{op_name="{FWD}"}}
  c0 = f32[2,16] fusion(cp0, x), kind=kLoop, calls=concat, {CONFIG}
  c1 = f32[2,16] fusion(cp1, cp0), kind=kLoop, calls=concat.1
  y0 = f32[2,64] dot(c0, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_name="{FWD}"}}
  y1 = f32[2,64] dot(c1, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_name="{FWD}"}}
  cp2 = f32[1,16] collective-permute({backward_rows}), {RING}, metadata={{op_name="{BWD}"}}
  cp3 = f32[1,16] collective-permute(cp2), {RING}, metadata={{op_name="{BWD}"}}
  c2 = f32[2,16] fusion(cp2, {backward_rows}), kind=kLoop, calls=concat.2
  c3 = f32[2,16] fusion(cp3, cp2), kind=kLoop, calls=concat.3
  r0 = f32[2,64] fusion(dy), kind=kLoop, calls=rows
  r1 = f32[2,64] fusion(dy), kind=kLoop, calls=rows.1
  dw0 = f32[16,64] dot(c2, r0), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}, metadata={{op_name="{BWD}"}}
  dw1 = f32[16,64] fusion(dw0, c3, r1), kind=kOutput, calls=partial
  ROOT out = (f32[2,64], f32[2,64], f32[16,64]) tuple(y0, y1, dw1)
}}
""")


WINDOWS = {("concat", "m"), ("concat.1", "m.1"), ("concat.2", "m.2"), ("concat.3", "m.3"),
           ("rows", "s"), ("rows.1", "s.1"), ("partial", "sum")}


def test_the_windows_of_an_activation_gathered_again_for_its_weight_gradient_are_remat():
    index = find_remat(_module())
    assert WINDOWS <= index.remat
    assert not WINDOWS & index.weak  # sure: the program without remat gathers once
    # The windows' matmuls run the one matmul's FLOPs, as the program without remat does.
    assert not {("main", "y0"), ("main", "y1"), ("main", "dw0"), ("partial", "dw")} & index.remat


def test_a_recomputed_activation_gathered_for_the_weight_gradient_counts_too():
    # A whole-model checkpoint's weight gradient gathers the recompute's copy of x (draw 19).
    assert WINDOWS <= find_remat(_module(backward_rows="xr0")).remat


def test_not_where_the_weight_gradient_gathers_another_value_or_unpartitioned():
    # Another value, not a recompute: not the forward's activation gathered again.
    module = _module(backward_rows="xo")
    assert not WINDOWS & find_remat(module).remat
    assert not WINDOWS & find_remat(_module(partitions=1)).remat
