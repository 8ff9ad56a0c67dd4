"""A select this program computes once and stores, which the program without remat copies into
each of its readers (hloflops.remat.stored_selects): the embedding lookup's out-of-range fill
`select(in_range, gather(table, ids), 0)`, stored here because the checkpointed blocks' recomputes
read it too, and a scan's ReLU gradient `select(x > 0, ct, 0)` over a recomputed mask, where the
program without remat reads the mask from its forward's stack. The per-opcode truth of select is
then negative, which no split of this program's ops reaches: the copies are `twin_copies` hinges
that lower the range's low end, never the count (TPU 26 out of the range before: select +131,072)."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.accounting import account

LOOKUP = """
HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%embed (p0: f32[4,8], p1: pred[4]) -> (f32[4], f32[4,8]) {
  %p0 = f32[4,8] parameter(0)
  %p1 = pred[4] parameter(1)
  %mask = pred[4,8] broadcast(%p1), dimensions={0}, metadata={op_name="TAKE/broadcast_in_dim"}
  %zero = f32[] constant(0)
  %zeros = f32[4,8] broadcast(%zero), dimensions={}
  %x = f32[4,8] select(%mask, %p0, %zeros), metadata={op_name="TAKE/select_n"}
  %mean = f32[4] reduce(%x, %zero), dimensions={1}, to_apply=%add, metadata={op_name="LN/reduce_sum"}
  ROOT %t = (f32[4], f32[4,8]) tuple(%mean, %x)
}

%fwd (q0: f32[4,8], q1: f32[4]) -> f32[4,8] {
  %q0 = f32[4,8] parameter(0)
  %q1 = f32[4] parameter(1)
  %b = f32[4,8] broadcast(%q1), dimensions={0}
  ROOT %y = f32[4,8] subtract(%q0, %b), metadata={op_name="FWD"}
}

%rec (r0: f32[4,8], r1: f32[4]) -> f32[4,8] {
  %r0 = f32[4,8] parameter(0)
  %r1 = f32[4] parameter(1)
  %b = f32[4,8] broadcast(%r1), dimensions={0}
  ROOT %y = f32[4,8] subtract(%r0, %b), metadata={op_name="REC"}
}

%grad (s0: f32[4,8], s1: f32[4,8]) -> f32[4,8] {
  %s0 = f32[4,8] parameter(0)
  %s1 = f32[4,8] parameter(1)
  ROOT %g = f32[4,8] multiply(%s0, %s1), metadata={op_name="BWD"}
}

ENTRY %main (table: f32[16,8], ids: s32[4,1], inb: pred[4], ct: f32[4,8]) -> (f32[4,8], f32[4,8], f32[4,8]) {
  %table = f32[16,8] parameter(0)
  %ids = s32[4,1] parameter(1)
  %inb = pred[4] parameter(2)
  %ct = f32[4,8] parameter(3)
  %rows = f32[4,8] gather(%table, %ids), DIMS, metadata={op_name="TAKE/gather"}
  %e = (f32[4], f32[4,8]) fusion(%rows, %inb), kind=kLoop, calls=%embed, metadata={op_name="LN/reduce_sum"}
  %mean = f32[4] get-tuple-element(%e), index=0
  %x = f32[4,8] get-tuple-element(%e), index=1
  %f = f32[4,8] fusion(%x, %mean), kind=kLoop, calls=%fwd, metadata={op_name="FWD"}
  %r = f32[4,8] fusion(%x, %mean), kind=kLoop, calls=%rec, metadata={op_name="REC"}
  %g = f32[4,8] fusion(%x, %ct), kind=kLoop, calls=%grad, metadata={op_name="BWD"}
  ROOT %out = (f32[4,8], f32[4,8], f32[4,8]) tuple(%f, %r, %g)
}
""".replace("FWD", "LN/sub").replace("BWD", "jit(f)/transpose(jvp(M))/ln/mul") \
    .replace("REC", "jit(f)/transpose(jvp(M))/checkpoint/rematted_computation/ln/sub") \
    .replace("TAKE", "jit(f)/jvp(M)/Embed_0/jit(_take)").replace("LN", "jit(f)/jvp(M)/ln") \
    .replace("DIMS", "offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, "
                     "slice_sizes={1,8}")


def _select_hinges(text: str):
    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    return acc, [h for h in acc.remat_hinges if h.twin_copies and h.opcode == "select"]


def test_a_stored_lookup_fill_is_copied_by_the_twin_into_each_reader_but_the_recompute():
    acc, hinges = _select_hinges(LOOKUP)
    # its fusion's own reduce and two readers (the forward's, the gradient's): three copies, one here
    assert [(h.name, h.flops, h.twin_copies, h.counted) for h in hinges] == [("x", 64, 2, False)]
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops - 64 and high >= acc.remat_flops  # the count itself does not move


def test_a_lookup_fill_no_recompute_reads_is_stored_by_the_program_without_remat_too():
    plain = LOOKUP.replace("jit(f)/transpose(jvp(M))/checkpoint/rematted_computation/ln/sub", "jit(f)/jvp(M)/ln2/sub")
    assert _select_hinges(plain)[1] == []


def test_a_select_of_no_lookup_is_left_alone():
    # the select picks from a program input, not a gather: no embedding fill
    other = LOOKUP.replace("fusion(%rows, %inb), kind=kLoop", "fusion(%ct, %inb), kind=kLoop")
    assert _select_hinges(other)[1] == []


@pytest.mark.parametrize("seed, opcode", [(3, "select"), (26, "select")])
def test_drawn_tpu_lookup_fill_copies_put_the_truth_inside_the_range(seed, opcode, monkeypatch):
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.test_remat_tpu_generated import _checked
    outcome = _checked(seed, monkeypatch)
    verdict = next(v for v in outcome.verdicts if v.stage == "after")
    assert verdict.truth.get(opcode, 0) < 0, verdict.describe()  # not attainable
    assert verdict.in_bounds, verdict.describe()


def test_drawn_tpu_scan_relu_gradient_over_a_recomputed_mask_has_its_twin_copies(monkeypatch):
    # TPU 40 (hk_layer_stack, relu): the program without remat stacks the mask and copies the
    # select into the bias gradient's reduce and both gradient matmuls' fusions, three per layer
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.test_remat_tpu_generated import _checked
    outcome = _checked(40, monkeypatch)
    verdict = next(v for v in outcome.verdicts if v.stage == "after")
    assert verdict.truth.get("select", 0) == -3072, verdict.describe()
    low = verdict.bounds[0]
    assert low <= sum(verdict.reported.values()) - 3072 - 1536, verdict.describe()  # select copies, rounding


# The recompute reads the stored fill through a chain: (x - mean) * (rstd * gamma), the scale a
# product of two broadcasts.
CHAIN = LOOKUP.replace("""  %b = f32[4,8] broadcast(%r1), dimensions={0}
  ROOT %y = f32[4,8] subtract(%r0, %b), metadata={op_name="REC"}""".replace(
    "REC", "jit(f)/transpose(jvp(M))/checkpoint/rematted_computation/ln/sub"),
    """  %b = f32[4,8] broadcast(%r1), dimensions={0}
  %d = f32[4,8] subtract(%r0, %b), metadata={op_name="REC/sub"}
  %s = f32[4,8] multiply(%b, %b), metadata={op_name="REC/mul"}
  ROOT %y = f32[4,8] multiply(%d, %s), metadata={op_name="REC/mul"}""".replace(
    "REC", "jit(f)/transpose(jvp(M))/checkpoint/rematted_computation/ln"))


def test_a_stored_lookup_fills_recomputed_chain_is_copied_with_it():
    # the program without remat copies the fill with the chain its readers run on it: the
    # recompute's chain counted as remat (its subtract) may be the twin's too, one copy
    assert CHAIN != LOOKUP
    acc = account(hloparse.parse(CHAIN), xla={"flops": 0.0})
    chain = sorted((h.name, h.opcode, h.twin_copies) for h in acc.remat_hinges
                   if h.twin_copies and h.opcode != "select")
    assert chain == [("d", "subtract", 1)]
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops - 64 - 32 and high >= acc.remat_flops


def test_drawn_tpu_scan_relu_mask_chain_is_copied_into_the_twins_mask_stack(monkeypatch):
    # held-out TPU 77 (linen_remat_scan, relu): the recompute fuses the matmul, the bias add, its
    # widens and the mask; the program without remat stacks the mask in its forward by a fusion
    # copying the bias add and widens: the chain's twin copies put the truth inside the range
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.test_remat_tpu_generated import _checked
    outcome = _checked(77, monkeypatch)
    verdict = next(v for v in outcome.verdicts if v.stage == "after")
    assert verdict.in_bounds, verdict.describe()


# On TPU: the stored fill read by two matmuls through the layer norm's chain (the q, k
# projections), by a residual add (the fill plus another full value), by the recompute and by its
# own fusion's reduce. The program without remat may compute the normalized value once for both
# matmuls (TPU 182: `LayerNorm_0` narrowed to bf16, stored, read by the q, k, v matmuls and their
# weight gradients; the fill copied 5 times, not 10), but the residual add and the fusion's reduce
# compute from the fill itself: it copies the fill into each of those.
_MATMUL_READER = """
%proj_N (m0: f32[4,8], m1: f32[4], m2: f32[8,8]) -> f32[4,8] {
  %m0 = f32[4,8] parameter(0)
  %m1 = f32[4] parameter(1)
  %m2 = f32[8,8] parameter(2)
  %b = f32[4,8] broadcast(%m1), dimensions={0}
  %n = f32[4,8] subtract(%m0, %b), metadata={op_name="jit(f)/jvp(M)/ln/sub"}
  ROOT %y = f32[4,8] dot(%n, %m2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="PROJ"}
}

%residual (a0: f32[4,8], a1: f32[4,8]) -> f32[4,8] {
  %a0 = f32[4,8] parameter(0)
  %a1 = f32[4,8] parameter(1)
  ROOT %y = f32[4,8] add(%a0, %a1), metadata={op_name="jit(f)/jvp(M)/block/add"}
}
"""
TPU_LOOKUP = LOOKUP.replace("HloModule m, is_scheduled=true",
                            "HloModule m, is_scheduled=true, entry_computation_layout="
                            "{(f32[16,8]{1,0:T(8,128)})->f32[4,8]{1,0:T(8,128)}}") \
    .replace("%fwd (q0", _MATMUL_READER.replace("_N", "_q").replace("PROJ", "jit(f)/jvp(M)/q/dot_general")
             + _MATMUL_READER.split("%residual")[0].replace("_N", "_k").replace("PROJ", "jit(f)/jvp(M)/k/dot_general")
             + "%fwd (q0") \
    .replace("ENTRY %main (table: f32[16,8], ids: s32[4,1], inb: pred[4], ct: f32[4,8]) "
             "-> (f32[4,8], f32[4,8], f32[4,8]) {",
             "ENTRY %main (table: f32[16,8], ids: s32[4,1], inb: pred[4], ct: f32[4,8], w: f32[8,8]) "
             "-> (f32[4,8], f32[4,8], f32[4,8], f32[4,8], f32[4,8], f32[4,8]) {\n  %w = f32[8,8] parameter(4)") \
    .replace("calls=%embed,", 'calls=%embed, backend_config={"scoped_memory_configs":[]},') \
    .replace("  ROOT %out = (f32[4,8], f32[4,8], f32[4,8]) tuple(%f, %r, %g)",
             "  %pq = f32[4,8] fusion(%x, %mean, %w), kind=kOutput, calls=%proj_q, "
             "metadata={op_name=\"jit(f)/jvp(M)/q\"}\n"
             "  %pk = f32[4,8] fusion(%x, %mean, %w), kind=kOutput, calls=%proj_k, "
             "metadata={op_name=\"jit(f)/jvp(M)/k\"}\n"
             "  %res = f32[4,8] fusion(%x, %ct), kind=kLoop, calls=%residual, "
             "metadata={op_name=\"jit(f)/jvp(M)/add\"}\n"
             "  ROOT %out = (f32[4,8], f32[4,8], f32[4,8], f32[4,8], f32[4,8], f32[4,8]) "
             "tuple(%f, %r, %g, %pq, %pk, %res)")


def test_tpu_lookup_fill_copies_into_readers_computing_from_it_are_sure_matmul_ones_a_hinge():
    assert "dot(" in TPU_LOOKUP and "scoped_memory_configs" in TPU_LOOKUP
    acc, hinges = _select_hinges(TPU_LOOKUP)
    # readers outside the recompute: the forward's sub and the gradient's product (each computes
    # from the fill), the residual add, two matmuls; with the fusion's own reduce six copies in
    # the twin at most, one here: five more. Sure: the three computing from the fill, one for the
    # two matmuls together, the reduce's, less this program's one: four; one (a matmul's) a hinge.
    stores = [(t.name, t.opcode, t.executions, t.flops) for t in acc.remat_twin_stores]
    assert stores == [("x", "select", 4, 128)]
    assert [(h.name, h.flops, h.twin_copies) for h in hinges] == [("x", 32, 1)]
    low, high = acc.remat_flops_bounds
    # the sure copies are in the count (a negative share of the select's row), the hinge below it
    assert sum(r.remat_flops for r in acc.rows if r.opcode == "select" and r.remat) == -128
    assert low <= acc.remat_flops - 32 <= acc.remat_flops <= high
