"""One hand-written HLO module per rule: our numbers equal the hand formula, and XLA agrees.

Each case gives the module and the hand-computed XLA totals; `_check` asserts that
`xla_estimate` and the integer traversal both give them, and (when jax is installed) that XLA's
own cost analysis of the same text does too.
"""

from __future__ import annotations

import pytest

import hloparse
from hloflops.cost.rules import KNOWN_OPCODES, RULES
from hloflops.engine import own_cost
from hloflops.xla.estimate import loop_once_totals, xla_estimate


def _module(body: str, extra: str = "") -> str:
    return f"HloModule m\n\n{extra}\nENTRY e {{\n{body}\n}}\n"


ADD = "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
GE = "ge {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT c = pred[] compare(x, y), direction=GE\n}\n"


def _check(text: str, flops: int = 0, transcendentals: int = 0, bytes_accessed: int = 0) -> None:
    module = hloparse.parse(text)
    want = {"flops": flops, "transcendentals": transcendentals, "bytes accessed": bytes_accessed}
    totals, uncounted = loop_once_totals(module, view="xla")
    assert not uncounted
    assert (totals.flops, totals.transcendentals, totals.bytes_accessed) == (flops, transcendentals, bytes_accessed)
    estimate = xla_estimate(module)
    for key, value in want.items():
        assert estimate.get(key, 0.0) == float(value), (key, estimate)
    try:
        from hloflops.xla.compare import main_keys, xla_cost_of_text
    except ImportError:  # pragma: no cover
        return
    pytest.importorskip("jax")
    xla = main_keys(xla_cost_of_text(text))
    for key, value in want.items():
        assert xla.get(key, 0.0) == float(value), (key, xla)


def test_every_opcode_xla_knows_has_a_rule():
    from hloparse.opcodes import ARITY

    assert set(ARITY) <= KNOWN_OPCODES
    assert set(RULES) == KNOWN_OPCODES


def test_elementwise_is_one_per_output_element_and_15_plus_transcendentals():
    _check(_module("  a = f32[4,8] parameter(0)\n  b = f32[4,8] parameter(1)\n  ROOT c = f32[4,8] divide(a, b)"),
           flops=32, bytes_accessed=3 * 128)
    for op in ("exponential", "tanh", "erf", "sinh", "acos", "logistic", "power", "atan2"):
        binary = op in ("power", "atan2")
        body = "  a = f32[16] parameter(0)\n" + (
            f"  ROOT r = f32[16] {op}(a, a)" if binary else f"  ROOT r = f32[16] {op}(a)")
        _check(_module(body), transcendentals=16, bytes_accessed=64 * (3 if binary else 2))
    _check(_module("  a = c64[16] parameter(0)\n  ROOT r = c64[16] multiply(a, a)"), flops=16, bytes_accessed=3 * 128)


def test_dot_counts_two_per_multiply_add_and_float32_rounds_the_total():
    _check(_module("  a = f32[8,16,32] parameter(0)\n  b = f32[8,32,24] parameter(1)\n"
                   "  ROOT d = f32[8,16,24] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                   "rhs_batch_dims={0}, rhs_contracting_dims={1}"),
           flops=2 * 8 * 16 * 24 * 32, bytes_accessed=4 * (8 * 16 * 32 + 8 * 32 * 24 + 8 * 16 * 24))
    text = _module("  a = f32[331,331] parameter(0)\n  ROOT d = f32[331,331] dot(a, a), lhs_contracting_dims={1}, "
                   "rhs_contracting_dims={0}")
    assert xla_estimate(hloparse.parse(text))["flops"] == 72529384.0  # float32(2 * 331**3 = 72529382)


def test_float32_running_sum_follows_xlas_post_order():
    # A 2**24-flop dot and two 1-flop adds: 2**24 + 1 + 1 depends on the order of the adds.
    dot = "dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    first_adds = _module(
        "  s = f32[] parameter(0)\n  t = f32[] add(s, s)\n  u = f32[] add(t, t)\n"
        "  p = f32[2048,8] parameter(1)\n  q = f32[8,512] parameter(2)\n"
        f"  d = f32[2048,512] {dot}\n  ROOT r = (f32[], f32[2048,512]) tuple(u, d)")
    dot_first = _module(
        "  s = f32[] parameter(0)\n  p = f32[2048,8] parameter(1)\n  q = f32[8,512] parameter(2)\n"
        f"  d = f32[2048,512] {dot}\n  t = f32[] add(s, s)\n  u = f32[] add(t, t)\n"
        "  ROOT r = (f32[2048,512], f32[]) tuple(d, u)")
    assert xla_estimate(hloparse.parse(first_adds))["flops"] == 16777218.0
    assert xla_estimate(hloparse.parse(dot_first))["flops"] == 16777216.0
    pytest.importorskip("jax")
    from hloflops.xla.compare import xla_cost_of_text

    assert xla_cost_of_text(first_adds)["flops"] == 16777218.0
    assert xla_cost_of_text(dot_first)["flops"] == 16777216.0


def test_convolution_counts_only_taps_on_real_input():
    conv = ("  x = f32[2,16,16,8] parameter(0)\n  w = f32[3,3,8,4] parameter(1)\n"
            "  ROOT c = f32[2,{o},{o},4] convolution(x, w), window={{{win}}}, dim_labels=b01f_01io->b01f{extra}")
    io = 4 * (2 * 16 * 16 * 8 + 3 * 3 * 8 * 4)
    # SAME 3x3: per dim 16 + 15 + 15 = 46 valid (tap, output) pairs instead of 48
    _check(_module(conv.format(o=16, win="size=3x3 pad=1_1x1_1", extra="")),
           flops=2 * 8 * 4 * 2 * 46 * 46, bytes_accessed=io + 4 * 2 * 16 * 16 * 4)
    # stride 2, pad 0_1: 8 + 8 + 7 = 23
    _check(_module(conv.format(o=8, win="size=3x3 stride=2x2 pad=0_1x0_1", extra="")),
           flops=2 * 8 * 4 * 2 * 23 * 23, bytes_accessed=io + 4 * 2 * 8 * 8 * 4)
    # lhs (base) dilation 2: input positions land on every other padded index
    _check(_module(conv.format(o=31, win="size=3x3 pad=1_1x1_1 lhs_dilate=2x2", extra="")),
           flops=2 * 8 * 4 * 2 * 46 * 46, bytes_accessed=io + 4 * 2 * 31 * 31 * 4)
    # feature groups: Cin per group
    grouped = ("  x = f32[2,16,16,8] parameter(0)\n  w = f32[3,3,2,8] parameter(1)\n"
               "  ROOT c = f32[2,16,16,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, "
               "dim_labels=b01f_01io->b01f, feature_group_count=4")
    _check(_module(grouped), flops=2 * 2 * 8 * 2 * 46 * 46, bytes_accessed=4 * (2 * 16 * 16 * 8 * 2 + 3 * 3 * 2 * 8))


def test_reduce_and_reduce_window():
    _check(_module("  a = f32[64,128] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[64] reduce(a, z), dimensions={1}, to_apply=add", ADD),
           flops=64 * 127, bytes_accessed=4 * (64 * 128 + 1 + 64))
    # padded taps are counted: (9 - 1) per output
    _check(_module("  a = f32[2,16,16,8] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[2,8,8,8] reduce-window(a, z), window={size=1x3x3x1 stride=1x2x2x1 "
                   "pad=0_0x0_1x0_1x0_0}, to_apply=add", ADD),
           flops=8 * 2 * 8 * 8 * 8, bytes_accessed=4 * (2 * 16 * 16 * 8 + 1 + 2 * 8 * 8 * 8))
    # the reduce-then-broadcast special case: size 2L-1, pad L-1 on both sides -> N/L + L - 1
    _check(_module("  a = f32[4,10] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[4,10] reduce-window(a, z), window={size=1x19 pad=0_0x9_9}, to_apply=add", ADD),
           flops=40 // 10 + 9, bytes_accessed=4 * (40 + 1 + 40))


def test_select_and_scatter_map_scatter():
    _check(_module("  a = f32[8,8] parameter(0)\n  s = f32[4,4] parameter(1)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[8,8] select-and-scatter(a, s, z), window={size=2x2 stride=2x2}, "
                   "select=ge, scatter=add", ADD + GE),
           flops=16 * 3 + 16, bytes_accessed=4 * (64 + 16 + 1 + 64))
    _check(_module("  a = f32[32] parameter(0)\n  ROOT r = f32[32] map(a, a), dimensions={0}, to_apply=add", ADD),
           flops=32, bytes_accessed=4 * 96)
    scatter = ("  a = f32[100,8] parameter(0)\n  i = s32[5,1] parameter(1)\n  u = f32[5,8] parameter(2)\n"
               "  ROOT r = f32[100,8] scatter(a, i, u), update_window_dims={1}, inserted_window_dims={0}, "
               "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add")
    _check(_module(scatter, ADD), flops=40, bytes_accessed=3 * 160 + 20)


def test_sort_fft_linear_algebra_rng():
    _check(_module("  a = f32[4,100] parameter(0)\n  ROOT s = f32[4,100] sort(a), dimensions={1}, is_stable=true, "
                   "to_apply=lt", "lt {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n"
                   "  ROOT c = pred[] compare(x, y), direction=LT\n}\n"),
           flops=400 * 9, bytes_accessed=3200)
    _check(_module("  a = c64[8,64] parameter(0)\n  ROOT f = c64[8,64] fft(a), fft_type=FFT, fft_length={64}"),
           flops=2 * 4 * 6 * 512, bytes_accessed=8192)
    _check(_module("  a = f32[3,8,8] parameter(0)\n  ROOT c = f32[3,8,8] cholesky(a), lower=true"),
           flops=8 * 192 // 3, bytes_accessed=768)
    _check(_module("  a = f32[8,8] parameter(0)\n  b = f32[8,4] parameter(1)\n"
                   "  ROOT t = f32[8,4] triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE"),
           flops=2 * 8 * 32, bytes_accessed=128 + 128 + 128)
    _check(_module("  s = u64[2] parameter(0)\n"
                   "  ROOT r = (u64[2], u32[16]) rng-bit-generator(s), algorithm=rng_default"),
           transcendentals=18, bytes_accessed=16 + 64 + 16)


def test_tuple_results_charge_leaves_tuple_operands_their_pointer_table():
    _check(_module("  a = f32[2,3] parameter(0)\n  b = f32[2,3] parameter(1)\n  c = f32[2,3] add(a, b)\n"
                   "  s = (f32[2,3], f32[2,3]) tuple(c, a)\n  ROOT o = (f32[2,3], f32[2,3]) opt-barrier(s)"),
           flops=6, bytes_accessed=72 + 16 + 48 + 16)


def test_transpose_is_free_when_it_is_a_bitcast():
    _check(_module("  a = f32[2,1,3]{2,1,0} parameter(0)\n"
                   "  ROOT o = f32[1,2,3]{2,0,1} transpose(a), dimensions={1,0,2}"))
    _check(_module("  a = f32[2,3]{1,0} parameter(0)\n  ROOT o = f32[3,2]{1,0} transpose(a), dimensions={1,0}"),
           bytes_accessed=48)


def test_slices_and_unfused_gather():
    _check(_module("  a = f32[100] parameter(0)\n  ROOT s = f32[10] slice(a), slice={[0:10]}"), bytes_accessed=80)
    _check(_module("  a = f32[100,4] parameter(0)\n  i = s32[] parameter(1)\n"
                   "  ROOT s = f32[10,4] dynamic-slice(a, i, i), dynamic_slice_sizes={10,4}"), bytes_accessed=320 + 4)
    _check(_module("  a = f32[100,4] parameter(0)\n  u = f32[10,4] parameter(1)\n  i = s32[] parameter(2)\n"
                   "  ROOT s = f32[100,4] dynamic-update-slice(a, u, i, i)"), bytes_accessed=320 + 4)


FUSED_GATHER = """fg {
  p = f32[100,64] parameter(0)
  i = s32[5,1] parameter(1)
  ROOT g = f32[5,64] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},
    index_vector_dim=1, slice_sizes={1,64}
}
"""


def test_fusion_boundary_bytes():
    # A gather inside a loop fusion reads its whole operand.
    body = "  a = f32[100,64] parameter(0)\n  i = s32[5,1] parameter(1)\n  ROOT f = f32[5,64] fusion(a, i), "
    _check(_module(body + "kind=kLoop, calls=fg", FUSED_GATHER), bytes_accessed=25600 + 20 + 1280)
    # ... but a kCustom fusion holding a gather is costed as that gather alone.
    _check(_module(body + "kind=kCustom, calls=fg", FUSED_GATHER), bytes_accessed=2 * 1280 + 20)
    # A parameter used by two broadcasts is charged twice; by two elementwise ops once.
    fused = """fb {
  p = f32[8] parameter(0)
  b1 = f32[4,8] broadcast(p), dimensions={1}
  b2 = f32[8,4] broadcast(p), dimensions={0}
  t = f32[4,8] transpose(b2), dimensions={1,0}
  n = f32[8] negate(p)
  e = f32[8] exponential(p)
  a = f32[4,8] add(b1, t)
  ROOT r = (f32[4,8], f32[8], f32[8]) tuple(a, n, e)
}
"""
    _check(_module("  x = f32[8] parameter(0)\n  ROOT f = (f32[4,8], f32[8], f32[8]) fusion(x), kind=kLoop, calls=fb",
                   fused), flops=8 + 32, transcendentals=8, bytes_accessed=(128 + 32 + 32) + 3 * 32)
    # An in-place dynamic-update-slice root writes only the update and does not read its buffer.
    dus = """fd {
  p = f32[1000] parameter(0)
  u = f32[10] parameter(1)
  i = s32[] parameter(2)
  ROOT d = f32[1000] dynamic-update-slice(p, u, i)
}
"""
    _check(_module("  a = f32[1000] parameter(0)\n  u = f32[10] parameter(1)\n  i = s32[] parameter(2)\n"
                   "  ROOT f = f32[1000] fusion(a, u, i), kind=kLoop, calls=fd", dus), bytes_accessed=40 + 40 + 4)


def test_control_flow_loops_once_branches_by_maximum():
    branches = ("big {\n  p = f32[32,32] parameter(0)\n  ROOT d = f32[32,32] dot(p, p), lhs_contracting_dims={1}, "
                "rhs_contracting_dims={0}\n}\nsmall {\n  p = f32[32,32] parameter(0)\n"
                "  ROOT e = f32[32,32] exponential(p)\n}\n")
    _check(_module("  c = pred[] parameter(0)\n  a = f32[32,32] parameter(1)\n"
                   "  ROOT r = f32[32,32] conditional(c, a, a), true_computation=big, false_computation=small",
                   branches), flops=2 * 32**3, transcendentals=1024, bytes_accessed=3 * 4096)
    loop = """body {
  p = (s32[], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[16] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[16] sine(x)
  ROOT t = (s32[], f32[16]) tuple(j, y)
}
cond {
  p = (s32[], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT c = pred[] compare(i, n), direction=LT
}
"""
    _check(_module("  z = s32[] constant(0)\n  x = f32[16] parameter(0)\n  t = (s32[], f32[16]) tuple(z, x)\n"
                   "  ROOT w = (s32[], f32[16]) while(t), condition=cond, body=body", loop),
           flops=1 + 1, transcendentals=16, bytes_accessed=16 + (12 + 128 + 16) + 9)


def test_ragged_dot_xla_drops_a_dimension_exact_does_not():
    text = _module("  a = f32[64,32] parameter(0)\n  b = f32[4,32,16] parameter(1)\n  g = s32[4] parameter(2)\n"
                   "  ROOT r = f32[64,16] ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
                   "lhs_ragged_dims={0}, rhs_group_dims={0}")
    module = hloparse.parse(text)
    comp = module.entry
    inst = comp.root
    assert own_cost(module, comp, inst, view="xla").cost.flops == 2 * 16 * 32  # XLA deletes result dim 0
    assert own_cost(module, comp, inst, view="exact").cost.flops == 2 * 64 * 32 * 16
    pytest.importorskip("jax")
    from hloflops.xla.compare import xla_cost_of_text

    assert xla_cost_of_text(text)["flops"] == 2 * 16 * 32


def test_scan_charges_the_body_per_element_of_operand_one():
    body = ("sb {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  s = f32[] add(x, y)\n"
            "  m = f32[] multiply(s, s)\n  ROOT t = (f32[], f32[]) tuple(m, s)\n}\n")
    _check(_module("  a = f32[16,8] parameter(0)\n  c = f32[8] parameter(1)\n"
                   "  ROOT s = (f32[16,8], f32[8]) scan(a, c), dimensions={0}, num_carries=1, is_associative=true, "
                   "to_apply=sb", body), flops=2 * 8, bytes_accessed=512 + 32 + 512 + 32)


def test_unknown_opcode_and_unbounded_shapes_are_uncounted_in_the_exact_view():
    module = hloparse.parse(_module("  a = f32[?,8] parameter(0)\n  ROOT r = f32[?,8] add(a, a)"))
    inst = module.entry.root
    assert "unbounded" in own_cost(module, module.entry, inst, view="exact").uncounted
    assert own_cost(module, module.entry, inst, view="xla").uncounted is None  # XLA's INT64_MIN arithmetic


def test_kcustom_gather_fusion_xla_view_is_the_gather_alone_exact_view_runs_the_body():
    param = "p = f32[100,64] parameter(0)"
    body = FUSED_GATHER.replace(param, param + "\n  n = f32[100,64] negate(p)")
    body = body.replace("gather(p, i)", "gather(n, i)")
    text = _module("  a = f32[100,64] parameter(0)\n  i = s32[5,1] parameter(1)\n"
                   "  ROOT f = f32[5,64] fusion(a, i), kind=kCustom, calls=fg", body)
    _check(text, bytes_accessed=2 * 1280 + 20)  # XLA: HandleGather on the inner gather, body unseen
    module = hloparse.parse(text)
    exact, uncounted = loop_once_totals(module, view="exact")
    assert not uncounted
    assert (exact.flops, exact.bytes_accessed) == (6400, 25600 + 20 + 1280)  # the negate runs; boundary bytes
