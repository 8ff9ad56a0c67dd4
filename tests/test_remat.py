"""Remat detection (real recomputation only) and the forward / backward / other phase."""

from __future__ import annotations

import hloparse
from analysis.remat import find_remat, model_path, phase, scope, split_components

FWD = "jit(step)/jvp(Net)/blocks_0/dense/dot_general"
BWD = "jit(step)/transpose(jvp(Net))/jvp(Net)/checkpoint/blocks_0/dense/dot_general"
REMAT = "jit(step)/transpose(jvp(Net))/jvp(Net)/checkpoint/rematted_computation/blocks_0/dense/dot_general"
REMAT_1 = REMAT.replace("blocks_0", "blocks_1")


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


def module_with(ops: list[tuple[str, str]], extra: str = "") -> hloparse.Module:
    """ENTRY with one dot per (name, op_name)."""
    lines = ["HloModule m", "", "ENTRY main {", "  a = f32[4,4] parameter(0)"]
    for name, op_name in ops:
        lines.append(f'  {name} = f32[4,4] dot(a, a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, '
                     f'metadata={{op_name="{op_name}"}}')
    shape = "(" + ", ".join("f32[4,4]" for _ in ops) + ")"
    lines.append(extra or f"  ROOT t = {shape} tuple({', '.join(n for n, _ in ops)})")
    lines.append("}")
    return hloparse.parse("\n".join(lines))


def test_recompute_with_its_forward_twin_is_remat():
    index = find_remat(module_with([("f", FWD), ("b", BWD), ("r", REMAT)]))
    assert index.remat == {("main", "r")} and index.remat_named == 1 and index.merged == ()


def test_recompute_merged_by_cse_is_model_flops():
    # Seed 004's situation: the forward dot of blocks_0 is gone (CSE kept the remat-named
    # copy), while blocks_1 still has its forward dot: only a same-scope twin counts.
    index = find_remat(module_with([("r0", REMAT), ("f1", FWD.replace("blocks_0", "blocks_1")), ("r1", REMAT_1)]))
    assert index.remat == {("main", "r1")}
    assert index.merged == (("main", "r0"),)


def test_backward_op_of_the_same_scope_is_not_a_twin():
    index = find_remat(module_with([("b", BWD), ("r", REMAT)]))
    assert index.remat == frozenset() and index.merged == (("main", "r"),)


def test_xla_remat_clone_needs_its_original():
    index = find_remat(module_with([("fusion.3", "x"), ("fusion.3.remat", "x"), ("dot.7.remat2", "y")]))
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
    from analysis.accounting import account

    acc = account(hloparse.parse(XLA_CLONE), xla={"flops": 0.0})
    # multiply 8 (original) + negate 8 + multiply 8 (the clone recomputes it) + add 8.
    assert acc.total.flops == 32
    assert acc.remat_flops == 8  # the clone's fused multiply
    assert {r.name for r in acc.rows if r.remat and r.opcode != "parameter"} == {"fusion.1.remat", "m.1"}


def test_twins_pair_one_to_one_when_layers_share_names():
    # A checkpointed plain function in a Python loop names every layer's dot alike. Three
    # layers: CSE merged layer 0's recompute into its forward and the op kept the remat name;
    # layers 1 and 2 kept both. Forward-named: 2; remat-named: 3; recomputation: 2.
    fwd = "jit(f)/jvp()/dot_general"
    rem = "jit(f)/transpose(jvp())/checkpoint/rematted_computation/dot_general"
    index = find_remat(module_with([("r0", rem), ("f1", fwd), ("f2", fwd), ("r1", rem), ("r2", rem)]))
    assert len(index.remat) == 2 and len(index.merged) == 1 and index.remat_named == 3
