"""An offload policy's saved residual as hloflops.remat.stored_gradient_chains's gate reads it
(hloflops.remat.offloaded_chain_residuals): the recomputed chain rebuilds the activation's input
from a matmul output the policy wrote to host memory and read back (no identity rounding), and the
program without remat, which offloads nothing and stores the activation, may copy the cheap chain
into each matmul reader (held-out TPU 321, nnx_loop MLP under offload_dot_with_no_batch_dims, tp:
truth -7,168, below the low end 2,048 before). Only where the chain holds an expensive recompute
(the tanh), which is why this program stores the chain where the twin may copy it."""

from __future__ import annotations

from tests.remat.test_remat_stored_gradient_chains import CHAIN, _accounted, _chain_hinges

# The forward's fusion hands out the matmul output itself; the caller offloads it and reads it back.
OFFLOADED = CHAIN.replace(
    '  %saved = f32[8,16] reduce-precision(%d), exponent_bits=8, mantissa_bits=23, '
    'metadata={op_name="@S"}\n', "").replace(
    "%h = f32[8,16] add(%saved, %bb)", "%h = f32[8,16] add(%d, %bb)").replace(
    "ROOT %t = (bf16[8,16], f32[8,16]) tuple(%act, %saved)",
    "ROOT %t = (bf16[8,16], f32[8,16]) tuple(%act, %d)").replace(
    "  %res = f32[8,16] get-tuple-element(%f), index=1\n",
    "  %out0 = f32[8,16]{1,0} get-tuple-element(%f), index=1\n"
    "  %cs0 = (f32[8,16]{1,0:S(5)}, f32[8,16]{1,0}, u32[]{:S(2)}) copy-start(%out0)\n"
    "  %cd0 = f32[8,16]{1,0:S(5)} copy-done(%cs0)\n"
    "  %cs1 = (f32[8,16]{1,0}, f32[8,16]{1,0:S(5)}, u32[]{:S(2)}) copy-start(%cd0)\n"
    "  %res = f32[8,16]{1,0} copy-done(%cs1)\n")
# The recomputed activation expensive (a tanh where the chain squares): XLA copies no expensive op
# into several consumers, so this program had to store the chain; the twin's chain reads the stored
# activation and is cheap.
EXPENSIVE = OFFLOADED.replace('%rsq = f32[8,16] multiply(%rh, %rh), metadata={op_name="@R/mlp/integer_pow"}',
                              '%rsq = f32[8,16] tanh(%rh), metadata={op_name="@R/mlp/tanh"}')


def test_a_chain_rebuilt_from_an_offloaded_matmul_output_may_be_copied_by_the_program_without_remat():
    assert "reduce-precision" not in EXPENSIVE and "S(5)" in EXPENSIVE and "tanh(%rh)" in EXPENSIVE
    acc = _accounted(EXPENSIVE)
    # the chain's cheap ops, 2 copies each (the tanh counts transcendentals, no FLOPs)
    assert _chain_hinges(acc) == [("dh", 2), ("dx", 2), ("dy", 2), ("rh", 2)]
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops - 4 * 128 * 2 and high >= acc.remat_flops


def test_a_device_copy_is_no_offload():
    # the same round trip within device memory: no policy's residual, the gate stays shut
    device = EXPENSIVE.replace(":S(5)", "")
    assert _chain_hinges(_accounted(device)) == []


def test_an_offloaded_chain_of_cheap_recomputes_alone_is_left_alone():
    # XLA stored a chain it could have copied (relu's select under the bias add, TPU 51, 90, 176):
    # the program without remat stored its own alike
    assert _chain_hinges(_accounted(OFFLOADED)) == []
