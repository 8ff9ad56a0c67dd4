"""A recomputed cheap chain stored once for two gradient matmuls, rebuilt from an offload policy's
residual read back from the host (hloflops.remat.host_read_residuals, asked by
hloflops.remat.stored_gradient_chains). wtpu 306 (hk_loop attention, tp, offload_dot_with_no_batch_dims,
f32 gelu): the forward's `h @ W` goes to the host (`S(5)`) and comes back as two asynchronous slices
joined by a `ConcatBitcast`; the recompute adds the bias to it in the bias gradient's fusion, which
stores gelu's derivative chain narrowed for the input's and the weight's gradient. The program without
remat copies the chain into both matmuls' fusions (two copies per layer more than this program:
multiply -13.2M, add -3.0M per-opcode truth), and the draw's low end was 18.5M above the truth. As for
an identity rounding's residual (TPU draw 43), the copies are `twin_copies` hinges: the low end drops,
the count does not move."""

from __future__ import annotations

from tests.remat.test_remat_stored_gradient_chains import CHAIN, _accounted, _chain_hinges

# The saved value is the matmul's output itself (no identity rounding), sent to the host and fetched
# back in two halves for the backward.
OFFLOADED = CHAIN.replace(
    '  %saved = f32[8,16] reduce-precision(%d), exponent_bits=8, mantissa_bits=23, metadata={op_name="@S"}\n',
    '  %saved = f32[8,16] negate(%d), metadata={op_name="@F/dense_0/neg"}\n').replace(
    "ROOT %t = (bf16[8,16], f32[8,16]) tuple(%act, %saved)",
    "ROOT %t = (bf16[8,16], f32[8,16]) tuple(%act, %d)").replace(
    "  %g = (f32[16], bf16[8,16]) fusion(%up, %res, %b)",
    "  %cs = (f32[8,16]{1,0:S(5)}, f32[8,16]{1,0}, u32[]) copy-start(%res)\n"
    "  %cd = f32[8,16]{1,0:S(5)} copy-done(%cs)\n"
    "  %cs2 = (f32[8,16]{1,0}, f32[8,16]{1,0:S(5)}, u32[]) copy-start(%cd)\n"
    "  %cd2 = f32[8,16]{1,0} copy-done(%cs2)\n"
    "  %ss0 = ((f32[8,16]{1,0}), f32[4,16]{1,0:S(1)}, s32[]) slice-start(%cd2), slice={[0:4], [0:16]}\n"
    "  %sd0 = f32[4,16]{1,0:S(1)} slice-done(%ss0)\n"
    "  %ss1 = ((f32[8,16]{1,0}), f32[4,16]{1,0:S(1)}, s32[]) slice-start(%cd2), slice={[4:8], [0:16]}\n"
    "  %sd1 = f32[4,16]{1,0:S(1)} slice-done(%ss1)\n"
    '  %back = f32[8,16]{1,0:S(1)} custom-call(%sd0, %sd1), custom_call_target="ConcatBitcast"\n'
    "  %g = (f32[16], bf16[8,16]) fusion(%up, %back, %b)").replace(
    # gelu's chain holds a tanh: only a chain with an expensive recompute opens the offload gate
    # (hloflops.remat.offloaded_chain_residuals)
    '%rsq = f32[8,16] multiply(%rh, %rh), metadata={op_name="@R/mlp/integer_pow"}',
    '%rsq = f32[8,16] tanh(%rh), metadata={op_name="@R/mlp/tanh"}')


def test_a_chain_rebuilt_from_a_residual_read_back_from_the_host_may_be_copied_into_each_matmul():
    assert "%cs2" in OFFLOADED and "reduce-precision" not in OFFLOADED and "tanh(%rh)" in OFFLOADED
    acc = _accounted(OFFLOADED)
    # the chain's cheap ops, 2 copies each (the tanh counts transcendentals, no FLOPs)
    assert _chain_hinges(acc) == [("dh", 2), ("dx", 2), ("dy", 2), ("rh", 2)]
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops - 4 * 128 * 2 and high >= acc.remat_flops  # the count does not move


def test_a_round_trip_that_stays_on_the_device_is_no_saved_residual():
    # the same moves within device memory (a prefetch, not an offload): no policy's residual, left alone
    on_device = OFFLOADED.replace(":S(5)}", ":S(1)}")
    assert on_device != OFFLOADED
    assert _chain_hinges(_accounted(on_device)) == []
