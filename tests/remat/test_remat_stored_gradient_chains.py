"""A recomputed cheap chain that a TPU loop fusion computes once from a policy's saved matmul output
and stores narrowed for k matmul readers (the input's and the weight's gradient), which the program
without remat may copy into each reader's fusion instead (hloflops.remat.stored_gradient_chains).
TPU draw 43 (hk_loop attention, dots_saveable, gelu's derivative chain): the twin runs the chain
in the bias gradient's fusion and in both matmuls' fusions, three copies per layer against this
program's one, so the per-opcode truth of multiply and add is negative (-11.4M, -3.0M) and the
draw was out of the range. The k copies beyond this program's (the reduce needs the chain too) are
`twin_copies` hinges: the low end drops, the count and the high end do not move."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

CHAIN = """HloModule chain, is_scheduled=true, entry_computation_layout=@L

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fwd (x0: bf16[8,4], w0: bf16[4,16], b0: f32[16]) -> (bf16[8,16], f32[8,16]) {
  %x0 = bf16[8,4] parameter(0)
  %w0 = bf16[4,16] parameter(1)
  %b0 = f32[16] parameter(2)
  %d = f32[8,16] dot(%x0, %w0), @D, metadata={op_name="@F/dense_0/dot_general"}, @T
  %saved = f32[8,16] reduce-precision(%d), exponent_bits=8, mantissa_bits=23, metadata={op_name="@S"}
  %bb = f32[8,16] broadcast(%b0), dimensions={1}
  %h = f32[8,16] add(%saved, %bb), metadata={op_name="@F/dense_0/add"}
  %sq = f32[8,16] multiply(%h, %h), metadata={op_name="@F/mlp/integer_pow"}
  %act = bf16[8,16] convert(%sq)
  ROOT %t = (bf16[8,16], f32[8,16]) tuple(%act, %saved)
}

%grad (g0: f32[8,16], g1: f32[8,16], g2: f32[16]) -> (f32[16], bf16[8,16]) {
  %g0 = f32[8,16] parameter(0)
  %g1 = f32[8,16] parameter(1)
  %g2 = f32[16] parameter(2)
  %gb = f32[8,16] broadcast(%g2), dimensions={1}
  %rh = f32[8,16] add(%g1, %gb), metadata={op_name="@R/dense_0/add"}
  %rsq = f32[8,16] multiply(%rh, %rh), metadata={op_name="@R/mlp/integer_pow"}
  %two = f32[] constant(2)
  %twos = f32[8,16] broadcast(%two), dimensions={}
  %dh = f32[8,16] multiply(%rh, %twos), metadata={op_name="@B/mlp/mul"}
  %dx = f32[8,16] multiply(%g0, %dh), metadata={op_name="@B/mlp/mul"}
  %dy = f32[8,16] multiply(%dx, %rsq), metadata={op_name="@B/mlp/mul"}
  %z = f32[] constant(0)
  %db = f32[16] reduce(%dy, %z), dimensions={0}, to_apply=%add, metadata={op_name="@B/dense_0/reduce_sum"}
  %n = bf16[8,16] convert(%dy)
  ROOT %gt = (f32[16], bf16[8,16]) tuple(%db, %n)
}

%dw (q0: bf16[8,16], q1: bf16[8,4]) -> f32[4,16] {
  %q0 = bf16[8,16] parameter(0)
  %q1 = bf16[8,4] parameter(1)
  ROOT %w = f32[4,16] dot(%q1, %q0), @W, metadata={op_name="@M"}, @T
}

%dxin (r0: bf16[8,16], r1: bf16[4,16]) -> f32[8,4] {
  %r0 = bf16[8,16] parameter(0)
  %r1 = bf16[4,16] parameter(1)
  ROOT %x = f32[8,4] dot(%r0, %r1), @X, metadata={op_name="@M"}, @T
}

ENTRY %main (x: bf16[8,4], w: bf16[4,16], b: f32[16], up: f32[8,16]) -> (bf16[8,16], f32[16], f32[4,16], f32[8,4]) {
  %x = bf16[8,4] parameter(0)
  %w = bf16[4,16] parameter(1)
  %b = f32[16] parameter(2)
  %up = f32[8,16] parameter(3)
  %f = (bf16[8,16], f32[8,16]) fusion(%x, %w, %b), kind=kOutput, calls=%fwd
  %act = bf16[8,16] get-tuple-element(%f), index=0
  %res = f32[8,16] get-tuple-element(%f), index=1
  %g = (f32[16], bf16[8,16]) fusion(%up, %res, %b), kind=kLoop, calls=%grad
  %db = f32[16] get-tuple-element(%g), index=0
  %dh = bf16[8,16] get-tuple-element(%g), index=1
  %gw = f32[4,16] fusion(%dh, %x), kind=kOutput, calls=%dw
  %gx = f32[8,4] fusion(%dh, %w), kind=kOutput, calls=%dxin
  ROOT %out = (bf16[8,16], f32[16], f32[4,16], f32[8,4]) tuple(%act, %db, %gw, %gx)
}
"""

_NAMES = (("@S", "jit(loss)/jvp()/dense_0/dot_general"),
          ("@M", "jit(loss)/transpose(jvp(jvp()))/checkpoint/dense_0/dot_general"),
          ("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation"),
          ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint"), ("@F", "jit(loss)/jvp()"),
          ("@W", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
          ("@X", "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
          ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
          ("@L", "{(bf16[8,4]{1,0:T(8,128)(2,1)})->bf16[8,16]{1,0:T(8,128)(2,1)}}"),
          ("@T", 'backend_config={"scoped_memory_configs":[]}'))


def _accounted(text: str):
    for short, long in _NAMES:
        text = text.replace(short, long)
    return account(hloparse.parse(text), xla={"flops": 0.0})


def _chain_hinges(acc):
    return sorted((h.name, h.twin_copies) for h in acc.remat_hinges if h.twin_copies)


def test_a_recomputed_chain_stored_for_two_matmuls_may_be_copied_into_each_by_the_program_without_remat():
    acc = _accounted(CHAIN)
    # every cheap op under the stored narrow, 2 copies each (the reduce needs the chain too); not the narrow
    assert _chain_hinges(acc) == [("dh", 2), ("dx", 2), ("dy", 2), ("rh", 2), ("rsq", 2)]
    low, high = acc.remat_flops_bounds
    chain = sum(h.flops for h in acc.remat_hinges if h.twin_copies)
    assert chain == 5 * 128 * 2
    assert low <= acc.remat_flops - chain and high >= acc.remat_flops  # the count itself does not move


def test_without_the_reduce_the_chain_has_one_copy_fewer():
    alone = CHAIN.replace("  ROOT %gt = (f32[16], bf16[8,16]) tuple(%db, %n)\n",
                          "  ROOT %gt = (f32[16], bf16[8,16]) tuple(%g2, %n)\n")
    assert _chain_hinges(_accounted(alone)) == [("dh", 1), ("dx", 1), ("dy", 1), ("rh", 1), ("rsq", 1)]


def test_a_chain_not_reading_a_saved_residual_is_left_alone():
    # rebuilt from a recomputed matmul (nothing saveable): the programs' fusions of it agreed (TPU 2, 24)
    plain = CHAIN.replace('%saved = f32[8,16] reduce-precision(%d), exponent_bits=8, mantissa_bits=23, ',
                          '%saved = f32[8,16] negate(%d), ')
    assert _chain_hinges(_accounted(plain)) == []


def test_a_chain_read_by_one_matmul_has_no_copies_to_make():
    one = CHAIN.replace("%gx = f32[8,4] fusion(%dh, %w)", "%gx = f32[8,4] fusion(%act, %w)")
    assert _chain_hinges(_accounted(one)) == []


def test_only_on_tpu():
    cpu = CHAIN.replace(', @T', '')
    assert _chain_hinges(_accounted(cpu)) == []


# The chain in the output fusion of the matmul that computes the cotangent it scales (the input
# gradient of the next layer, `up @ w2`): held-out TPU 102 and 115 (f32 MLPs under dots_saveable, gelu),
# where the program without remat copies gelu's derivative chain into the weight gradient's fusion
# and the input gradient's, and this program stores it narrowed once.
IN_MATMUL = CHAIN.replace(
    "%grad (g0: f32[8,16], g1: f32[8,16], g2: f32[16]) -> (f32[16], bf16[8,16]) {\n"
    "  %g0 = f32[8,16] parameter(0)\n",
    "%grad (u0: f32[8,8], g1: f32[8,16], g2: f32[16], w2: f32[8,16]) -> (f32[16], bf16[8,16]) {\n"
    "  %u0 = f32[8,8] parameter(0)\n  %w2 = f32[8,16] parameter(3)\n"
    "  %g0 = f32[8,16] dot(%u0, %w2), @D, metadata={op_name=\"@M\"}, @T\n").replace(
    "up: f32[8,16]) ->", "up: f32[8,8], w2: f32[8,16]) ->").replace(
    "  %up = f32[8,16] parameter(3)\n", "  %up = f32[8,8] parameter(3)\n  %w2 = f32[8,16] parameter(4)\n").replace(
    "fusion(%up, %res, %b), kind=kLoop", "fusion(%up, %res, %b, %w2), kind=kOutput")


def test_a_chain_stored_by_the_cotangents_matmul_fusion_may_be_copied_too():
    acc = _accounted(IN_MATMUL)
    # the cheap ops under the narrow, not the matmul computing the cotangent (not copied: XLA
    # copies only cheap producers into readers)
    assert _chain_hinges(acc) == [("dh", 2), ("dx", 2), ("dy", 2), ("rh", 2), ("rsq", 2)]
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops - 5 * 128 * 2 and high >= acc.remat_flops


def test_a_chain_whose_recomputes_do_not_read_the_saved_residual_is_left_alone():
    # TPU 41 (save_only_these_names, no prevent_cse): the policy saves the activation's input itself,
    # the twin stores that value too, and CSE merged the recomputed gelu with the forward's: the chain
    # reads the saved value through forward-named ops, and its only remat-named ops are the
    # linearization's own (`1 - tanh`, `3 * x**2`). Both programs' chains start from the same stored
    # value, so this one's fusion is the twin's: nothing to copy.
    for text in (CHAIN, IN_MATMUL):
        same_start = text.replace('%rh = f32[8,16] add(%g1, %gb), metadata={op_name="@R/dense_0/add"}',
                                  '%rh = f32[8,16] add(%g1, %gb), metadata={op_name="@F/dense_0/add"}')
        assert _chain_hinges(_accounted(same_start)) == []


def test_a_chain_whose_saved_value_is_the_activations_input_is_left_alone():
    # TPU 0 (whole-model attention, no bias, dots_with_no_batch_dims_saveable): the saved matmul
    # output is gelu's input itself, the value the twin stores too; the recomputes read it with
    # constants and each other only, and both programs stored the chain alike (three copies each)
    for text in (CHAIN, IN_MATMUL):
        no_bias = text.replace("  %gb = f32[8,16] broadcast(%g2), dimensions={1}\n",
                               "  %one = f32[] constant(1)\n  %gb = f32[8,16] broadcast(%one), dimensions={}\n")
        assert no_bias != text
        assert _chain_hinges(_accounted(no_bias)) == []
