"""A recompute chain TPU nests in a backward matmul's fusion shares one fate, op by op
(analysis/hloflops/remat/offloaded_residuals.py `nested_offloaded_recomputes`, `_whole_copies`).

XLA copies a producer's fusion into its reader's whole: where the forward computes a chain only
nested in its matmuls' fusions, the program without remat nests the whole chain in its weight
gradient's fusion too, and every op of the recompute's nested copy is model FLOPs. The rule judges
each op by the forward ops of its name; an op named only by its primitive at the checkpoint's root
(gelu's `z + 0.044715 z^3` and `1 + tanh` in a Haiku block: `add`) shares that name with the
block's residual adds, which the forward hands out of fusions of their own. Those say nothing of
gelu's chain: TPU draw 273 (vtpu) counted gelu's two adds as remat beside its multiplies as model
FLOPs (add +2,048, out of range)."""

from __future__ import annotations

from hloflops.remat import find_remat
from tests.remat.test_remat_nested_unmatched_recomputes import NESTED, _parsed

# The relu chain gains a root-scope op after the maximum (named `add` at the checkpoint's root, as
# gelu's are), and the forward a residual add of that name and shape in a fusion of its own.
ROOTED = NESTED \
    .replace('  ROOT m = f32[8,16] maximum(a, zb), metadata={op_name="@F/relu/max"}',
             '  m = f32[8,16] maximum(a, zb), metadata={op_name="@F/relu/max"}\n'
             '  o = f32[8,16] broadcast(z), dimensions={}\n'
             '  ROOT s = f32[8,16] add(m, o), metadata={op_name="jit(loss)/jvp()/add"}') \
    .replace('  ROOT rm = f32[8,16] maximum(ra, rzb), metadata={op_name="@R/relu/max"}',
             '  rm = f32[8,16] maximum(ra, rzb), metadata={op_name="@R/relu/max"}\n'
             '  ro = f32[8,16] broadcast(rz), dimensions={}\n'
             '  ROOT rs = f32[8,16] add(rm, ro), metadata={op_name="jit(loss)/transpose(jvp(jvp()))/'
             'checkpoint/rematted_computation/add"}') \
    .replace('ENTRY main {',
             'residual_fwd {\n'
             '  t0 = f32[8,16] parameter(0)\n'
             '  t1 = f32[8,16] parameter(1)\n'
             '  ROOT t = f32[8,16] add(t0, t1), metadata={op_name="jit(loss)/jvp()/add"}\n'
             '}\n\n'
             'ENTRY main {\n'
             '  e0 = f32[8,16] parameter(5)\n'
             '  e1 = f32[8,16] parameter(6)\n'
             '  res = f32[8,16] fusion(e0, e1), kind=kLoop, calls=residual_fwd') \
    .replace('ROOT out = (f32[8,8], f32[16,8]) tuple(y, dw)',
             'ROOT out = (f32[8,8], f32[16,8], f32[8,16]) tuple(y, dw, res)')


def test_the_fixture_keeps_its_shape():
    assert ROOTED.count("rematted_computation/add") == 1 and "residual_fwd" in ROOTED


def test_a_root_named_op_of_a_nested_chain_shares_the_chains_fate():
    remat = find_remat(_parsed(ROOTED)).remat
    assert ("relu_bwd", "rm") not in remat  # judged by its name's forward ops: all nested
    assert ("relu_bwd", "rs") not in remat  # its name's forward ops include a residual add: the chain decides


def test_the_bias_add_of_the_recomputed_product_stays_as_paired():
    remat = find_remat(_parsed(ROOTED)).remat
    assert ("relu_bwd", "ra") in remat


def test_without_an_op_of_the_chain_found_the_root_named_op_stays_counted():
    # The maximum's forward materialized in a fusion of its own: nothing of the chain is model
    # FLOPs by its name, and the root-named add is not either.
    stored = ROOTED.replace("  f = f32[8,16] fusion(q0, q1), kind=kLoop, calls=relu_fwd\n", "") \
        .replace("matmul_fwd_1 {\n  q0 = bf16[8,16] parameter(0)", "matmul_fwd_1 {\n  f = f32[8,16] parameter(0)") \
        .replace("  y = f32[8,8] fusion(h, b, w)", "  fr = f32[8,16] fusion(h, b), kind=kLoop, calls=relu_fwd\n"
                 "  y = f32[8,8] fusion(fr, b, w)")
    remat = find_remat(_parsed(stored)).remat
    assert ("relu_bwd", "rm") in remat and ("relu_bwd", "rs") in remat
