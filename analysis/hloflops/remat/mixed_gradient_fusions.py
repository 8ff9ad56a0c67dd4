"""Gradient fusions that also hand out a recomputed matmul's output (hloflops.remat.fusion_copies
asks `gradient_sides` which of their ops run for the gradient alone).

Where the forward and the backward run in one computation (no loop between them), TPU may fuse
a recomputed matmul, with its epilogue (the bias add), into the fusion computing the gradient
that reads it: one multi-output fusion hands out the gradient's values and the matmul's output
`h = x @ w + b`, which the weight's gradient reads. The program without remat stores `h` from its
forward matmul's fusion and builds the same gradient fusion reading it, into which XLA copies
the cheap chain computed from `h` (gelu's `x * x * x`, `1 + tanh`, `0.5 * (1 + tanh)`), as it
copies it into every fusion reading it. So only the matmul and its epilogue run there because of
remat; the chain from `h` and the values of it the fusion hands out to the rest of the gradient
(gelu's `0.5 * (1 + tanh)`, sent through an all-to-all to the fusion multiplying it by the
cotangent) run in the program without remat too (TPU draws 50, an nnx scan of one layer XLA
unrolled, and 52, an equinox list of one layer under FSDP: gelu MLPs whose forward stores nothing
of the layer). Only where a kept output is such an epilogue: a fusion handing out a recomputed
chain value and no matmul output has no stored value of that program behind it. Where the pairing
by value counted a gradient side's copy against its forward, the count moves to a sibling copy in
a top-level fusion whose outputs are recompute (TPU draw 26, tensor parallel: gelu recomputed and
narrowed for the all-gather of a weight gradient's input, which that program reads stored from its
forward), never to one nested in a backward matmul's fusion, which that program nests alike."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES
from hloflops.remat.rounding import computed_from
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import CallRole, Computation, Module

# What a matmul's epilogue may hold between the matmul and the fusion's output: views, and ops
# whose other operands are broadcasts (a bias add, a scale) or converts of the output.
_VIEWS = frozenset({"bitcast", "copy", "reshape", "transpose"})
_EPILOGUE = frozenset({"add", "subtract", "multiply", "convert"})


def gradient_sides(module: Module, fused: Mapping[str, frozenset[str]], by_key: Mapping[SiteKey, SiteOp],
                   remat: set[SiteKey], gradient: Mapping[tuple[str, int], bool],
                   backward_loops: set[str]) -> dict[tuple[str, int], frozenset[str]]:
    """Per fusion (computation, call site) that hands out a recomputed matmul's epilogue (a remat
    output computed from a marked matmul of the fusion through epilogue ops) beside a gradient
    (`gradient`: an output of the backward's own), the names of its ops that run for the gradient
    alone: all but what the kept outputs (the epilogues) are computed from, the other remat outputs
    included. Not in a backward loop body, whose program without remat reads stored residuals."""
    out: dict[tuple[str, int], frozenset[str]] = {}
    sites = {(key[0], key[2]) for key in remat if key[0] in fused and key[1] in fused[key[0]]}
    for comp_name, site in sites:
        if not gradient.get((comp_name, site)):
            continue
        comp = module.by_name[comp_name]
        outputs = [by_key[key] for key in ((comp_name, name, site) for name in fused[comp_name]) if key in by_key]
        if any(op.frame in backward_loops for op in outputs):
            continue
        kept = [op.inst.name for op in outputs if op.key in remat and _epilogue_of_matmul(comp, op, by_key)]
        if not kept:
            continue
        out[(comp_name, site)] = frozenset(comp.by_name) - computed_from(comp, kept)
    return out


def _epilogue_of_matmul(comp: Computation, op: SiteOp, by_key: Mapping[SiteKey, SiteOp]) -> bool:
    """Is the output a marked matmul of its fusion, through views and ops reading nothing else
    whole (a bias add's broadcast, a constant)?"""
    inst = op.inst
    for _ in range(16):
        if inst.opcode in MATMUL_OPCODES:
            found = by_key.get((op.key[0], inst.name, op.key[2]))
            return found is not None and found.marked
        if inst.opcode not in _VIEWS | _EPILOGUE:
            return False
        whole = [comp.by_name.get(name) for name in inst.operands]
        whole = [i for i in whole if i is not None and i.opcode not in ("broadcast", "constant")]
        if len(whole) != 1:
            return False
        inst = whole[0]
    return False


def gradient_side_outputs(module: Module, mixed: Mapping[tuple[str, int], frozenset[str]],
                          fused: Mapping[str, frozenset[str]], by_key: Mapping[SiteKey, SiteOp],
                          remat: set[SiteKey], out: set[SiteKey], by_value: set[SiteKey],
                          decided: Mapping[tuple[str, int], bool | None]) -> tuple[set[SiteKey], set[SiteKey]]:
    """The cheap remat outputs of the fusions' gradient sides (`mixed`, `gradient_sides`): the program
    without remat hands them out of its gradient fusion too (a reduce or other op XLA never copies
    keeps its pairing). And where the pairing by value counted a copy on a gradient side against
    its forward (`by_value`), the sibling copy (same value, name, frame and call site) that takes
    its count: one in a top-level fusion whose outputs are recompute (`decided`), which the
    recompute stores where the program without remat reads its forward's stored value (TPU draw 26:
    gelu recomputed and narrowed for the all-gather of the weight gradient's input); none in a
    fusion nested in a backward matmul's, which the program without remat nests as well."""
    handed = {(comp_name, name, site) for (comp_name, site), names in mixed.items()
              for name in names & fused[comp_name]} & out
    handed = {key for key in handed if by_key[key].inst.opcode in DUPLICATED - EXPENSIVE}
    dropped: dict[tuple, int] = {}
    for key, op in by_key.items():
        if key in remat and key in by_value and op.marked and key[1] in mixed.get((key[0], key[2]), ()) \
                and (key not in out or key in handed):
            group = (op.exact, op.op_name, op.frame, key[2])
            dropped[group] = dropped.get(group, 0) + 1
    passed: set[SiteKey] = set()
    if not dropped:
        return handed, passed
    inner = {callee for comp in fused for inst in module.by_name[comp].instructions if inst.opcode == "fusion"
             for callee in inst.called(CallRole.FUSION)}
    for key, op in sorted(by_key.items(), key=lambda item: item[1].order):
        group = (op.exact, op.op_name, op.frame, key[2])
        if dropped.get(group) and op.marked and key not in remat and key not in out and key[0] not in inner \
                and decided.get((key[0], key[2])) is True and key[1] not in mixed.get((key[0], key[2]), ()):
            passed.add(key)
            dropped[group] -= 1
    return handed, passed
