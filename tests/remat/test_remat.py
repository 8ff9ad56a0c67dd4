"""Remat detection (real recomputation only) and the forward / backward / other phase.

The modules here are hand-written HLO: each layer has its own weight parameter, so ops compute
different values unless the test means them to be the same.
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat, inner_tail, model_path, phase, scope, split_components, value_numbers

FWD = "jit(step)/jvp(Net)/blocks_0/dense/dot_general"
BWD = "jit(step)/transpose(jvp(Net))/jvp(Net)/checkpoint/blocks_0/dense/dot_general"
REMAT = "jit(step)/transpose(jvp(Net))/jvp(Net)/checkpoint/rematted_computation/blocks_0/dense/dot_general"
REMAT_1 = REMAT.replace("blocks_0", "blocks_1")
FWD_1 = FWD.replace("blocks_0", "blocks_1")
DOT = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
DOT_T = "lhs_contracting_dims={1}, rhs_contracting_dims={1}"


def test_phase_and_scope_from_op_name():
    assert phase(FWD) == "forward"
    assert phase(BWD) == "backward" and phase(REMAT) == "backward"  # recompute runs in the backward pass
    assert phase("jit(step)/mul") == "other" and phase("") == "other"
    assert scope(FWD) == "jit(step)/jvp(Net)/blocks_0/dense"


def test_model_path_strips_transformation_wrappers():
    assert split_components("jit(f)/transpose(jvp(a/b))/dot") == ["jit(f)", "transpose(jvp(a/b))", "dot"]
    assert model_path(FWD) == model_path(REMAT) == "blocks_0/dense/dot_general"
    scan_fwd = "jit(t)/jvp(S)/while/body/closed_call/closed_call/while/body/closed_call/stack/Dense_0/dot_general"
    scan_remat = ("jit(t)/transpose(jvp(S))/while/body/closed_call/checkpoint/rematted_computation/while/body/"
                  "closed_call/stack/Dense_0/dot_general")
    assert model_path(scan_fwd) == model_path(scan_remat) == "stack/Dense_0/dot_general"


def module_with(ops: list[tuple[str, str, str, str]], params: int = 3, extra: tuple[str, ...] = ()) -> hloparse.Module:
    """An optimized module (scheduled: CSE and simplification may have run): ENTRY with
    parameters p0..p{n-1} (f32[4,4]), the `extra` instruction lines, and one dot
    per (name, lhs, rhs, op_name), `DOT` dimension numbers unless the name ends in `_t` (then
    `DOT_T`)."""
    lines = ["HloModule m, is_scheduled=true", "", "ENTRY main {"]  # as XLA prints an optimized module
    lines += [f"  p{i} = f32[4,4] parameter({i})" for i in range(params)]
    lines += [f"  {line}" for line in extra]
    for name, lhs, rhs, op_name in ops:
        dims = DOT_T if name.endswith("_t") else DOT
        lines.append(f'  {name} = f32[4,4] dot({lhs}, {rhs}), {dims}, metadata={{op_name="{op_name}"}}')
    shape = "(" + ", ".join("f32[4,4]" for _ in ops) + ")"
    lines.append(f"  ROOT t = {shape} tuple({', '.join(op[0] for op in ops)})")
    lines.append("}")
    return hloparse.parse("\n".join(lines))


def test_recompute_of_a_value_the_forward_computed_is_remat():
    index = find_remat(module_with([("f", "p0", "p1", FWD), ("b_t", "p0", "p1", BWD), ("r", "p0", "p1", REMAT)]))
    assert index.remat == {("main", "r")} and index.remat_named == 1 and index.merged == ()


def test_recompute_merged_by_cse_is_model_flops():
    # Seed 004's situation: the forward dot of blocks_0 is gone (CSE kept the remat-named
    # copy), while blocks_1 still has its forward dot and its recompute.
    index = find_remat(module_with([("r0", "p0", "p1", REMAT), ("f1", "p0", "p2", FWD_1),
                                    ("r1", "p0", "p2", REMAT_1)]))
    assert index.remat == {("main", "r1")}
    assert index.merged == (("main", "r0"),)


def test_a_backward_op_named_like_the_forward_is_not_a_twin():
    # Same operands, other dimension numbers: another value and another signature.
    index = find_remat(module_with([("b_t", "p0", "p1", BWD), ("r", "p0", "p1", REMAT)]))
    assert index.remat == frozenset() and index.merged == (("main", "r"),)


def test_remat_name_alone_is_not_enough():
    # A remat-named dot whose value nothing else computes, and no forward op of its name.
    index = find_remat(module_with([("f1", "p0", "p2", FWD_1), ("r", "p0", "p1", REMAT)]))
    assert index.remat == frozenset() and index.merged == (("main", "r"),)


def test_names_that_repeat_a_module_still_pair_by_the_name_inside_the_checkpoint():
    # The transformer: the recompute's name stack repeats `decoder` and the class name;
    # what is inside the checkpoint is the end of the forward's name. XLA simplified the two
    # differently (here: the forward reads p0, the recompute p0 + p2 * 0, which XLA did not fold),
    # so only the signature, that name and the same inputs (p0, p1, p2 both) pair them.
    fwd = "jit(f)/jvp(TransformerLM)/decoder/encoderdecoderblock_0/mlp/Dense_0/dot_general"
    rem = ("jit(f)/transpose(jvp(TransformerLM))/decoder/jvp(TransformerLM)/decoder/checkpoint/"
           "rematted_computation/encoderdecoderblock_0/mlp/Dense_0/dot_general")
    assert inner_tail(rem) == ("encoderdecoderblock_0", "mlp", "Dense_0", "dot_general")
    assert model_path(fwd) != model_path(rem)
    extra = ("z = f32[] constant(0)", "zb = f32[4,4] broadcast(z), dimensions={}", "m = f32[4,4] multiply(p2, zb)",
             "a = f32[4,4] add(p0, m)", "fm = f32[4,4] multiply(p2, zb)", "fa = f32[4,4] subtract(p0, fm)")
    index = find_remat(module_with([("f", "fa", "p1", fwd), ("r", "a", "p1", rem)], extra=extra))
    assert index.remat == {("main", "r")}


def test_each_forward_twin_serves_one_recompute():
    # Layers that share names (a checkpointed plain function in a Python loop): three
    # remat-named dots, two forward dots of that name, all of different values but r1 and r2
    # reading what f1 and f2 read (XLA simplified them differently: a + 0 left unfolded).
    fwd, rem = "jit(f)/jvp()/dot_general", "jit(f)/transpose(jvp())/checkpoint/rematted_computation/dot_general"
    extra = ("z = f32[] constant(0)", "zb = f32[4,4] broadcast(z), dimensions={}", "q1 = f32[4,4] add(p1, zb)",
             "q2 = f32[4,4] add(p2, zb)")
    index = find_remat(module_with([("r0", "p0", "p0", rem), ("f1", "p1", "p1", fwd), ("f2", "p2", "p2", fwd),
                                    ("r1", "q1", "p1", rem), ("r2", "q2", "p2", rem)], extra=extra))
    assert index.remat == {("main", "r1"), ("main", "r2")} and index.merged == (("main", "r0"),)
    assert index.remat_named == 3


def test_signature_never_pairs_ops_of_different_layers():
    # Issue 28's nnx model: names without module paths (`.../rematted_computation/dot_general`).
    # CSE merged each layer's recompute with its forward: layer 0's kept the remat name, layer
    # 1's the forward's. Same signature, same name inside the checkpoint, but layer 1's dot
    # reads layer 1's weights (p2): not the value layer 0's computes, so nothing is remat.
    fwd, rem = "jit(f)/jvp()/dot_general", "jit(f)/transpose(jvp(jvp()))/checkpoint/rematted_computation/dot_general"
    index = find_remat(module_with([("r0", "p0", "p1", rem), ("f1", "r0", "p2", fwd)]))
    assert index.remat == frozenset() and index.merged == (("main", "r0"),)


def test_same_value_pairs_before_names_do():
    # Same three layers, but this time the recomputes compute exactly their forwards' values
    # and CSE merged layer 0: the value tells which remat-named op has no twin.
    fwd, rem = "jit(f)/jvp()/dot_general", "jit(f)/transpose(jvp())/checkpoint/rematted_computation/dot_general"
    index = find_remat(module_with([("r0", "p0", "p0", rem), ("f1", "p1", "p1", fwd), ("f2", "p2", "p2", fwd),
                                    ("r1", "p1", "p1", rem), ("r2", "p2", "p2", rem)]))
    assert index.remat == {("main", "r1"), ("main", "r2")} and index.merged == (("main", "r0"),)


BARRIER = """
HloModule lowered

ENTRY main {
  x = f32[4,4] parameter(0)
  w = f32[4,4] parameter(1)
  f = f32[4,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = (f32[4,4], f32[4,4]) tuple(x, w)
  ob = (f32[4,4], f32[4,4]) opt-barrier(t)
  x2 = f32[4,4] get-tuple-element(ob), index=0
  w2 = f32[4,4] get-tuple-element(ob), index=1
  c = f32[4,4] copy(w2)
  r = f32[4,4] dot(x2, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g = f32[4,4] dot(x2, w2), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT out = (f32[4,4], f32[4,4], f32[4,4]) tuple(f, r, g)
}
"""


def test_a_module_without_names_pairs_by_value_through_the_barrier():
    # jax's lowered text carries no op_name: the optimization barrier on the recompute's inputs
    # and the equal value (through the barrier, the tuple and a layout copy) find the recompute.
    module = hloparse.parse(BARRIER)
    values = value_numbers(module)
    assert values.exact[("main", "r")] == values.exact[("main", "f")]
    assert ("main", "r") in values.tainted and ("main", "f") not in values.tainted
    index = find_remat(module)
    assert index.remat == {("main", "r")} and index.remat_named == 0


def test_xla_remat_clone_needs_its_original():
    index = find_remat(module_with([("fusion.3", "p0", "p1", "x"), ("fusion.3.remat", "p0", "p1", "x"),
                                    ("dot.7.remat2", "p2", "p1", "y")]))
    assert index.remat == {("main", "fusion.3.remat")}
    assert index.merged == (("main", "dot.7.remat2"),)


XLA_CLONE = """
HloModule clone

fused {
  a = f32[8] parameter(0)
  ROOT m = f32[8] multiply(a, a)
}

fused.clone {
  a = f32[8] parameter(0)
  ROOT m.1 = f32[8] multiply(a, a)
}

ENTRY main {
  x = f32[8] parameter(0)
  fusion.1 = f32[8] fusion(x), kind=kLoop, calls=fused
  n = f32[8] negate(fusion.1)
  fusion.1.remat = f32[8] fusion(x), kind=kLoop, calls=fused.clone
  ROOT s = f32[8] add(n, fusion.1.remat)
}
"""


def test_xla_remat_clone_of_a_fusion_counts_its_whole_body():
    from hloflops.accounting import account

    acc = account(hloparse.parse(XLA_CLONE), xla={"flops": 0.0})
    # multiply 8 (original) + negate 8 + multiply 8 (the clone recomputes it) + add 8.
    assert acc.total.flops == 32
    assert acc.remat_flops == 8  # the clone's fused multiply
    assert {r.name for r in acc.rows if r.remat and r.opcode != "parameter"} == {"fusion.1.remat", "m.1"}


def _gemm(name: str, rhs_contracting: int) -> str:
    config = ('{\\"dot_dimension_numbers\\":{\\"lhs_contracting_dimensions\\":[\\"1\\"],'
              f'\\"rhs_contracting_dimensions\\":[\\"{rhs_contracting}\\"]}}}}')
    return f'  {name} = f32[4,4] custom-call(a, b), custom_call_target="__cublas$gemm", backend_config="{config}"'


GEMMS = "\n".join([
    "HloModule gemms", "", "ENTRY main {", "  a = f32[4,4] parameter(0)", "  b = f32[4,4] parameter(1)",
    _gemm("g0", 0), _gemm("g1", 1), _gemm("g2", 0),
    "  ROOT t = (f32[4,4], f32[4,4], f32[4,4]) tuple(g0, g1, g2)", "}",
])


def test_a_library_gemm_keeps_its_dimension_numbers_in_its_value():
    values = value_numbers(hloparse.parse(GEMMS))
    assert values.exact[("main", "g0")] == values.exact[("main", "g2")] != values.exact[("main", "g1")]
