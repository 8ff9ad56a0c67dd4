"""A value the forward never stores, rebuilt inside a backward matmul's fusion (after optimization,
TPU).

TPU nests a matmul's elementwise producers inside the matmul's output fusion. Where the forward
computes a value only there (attention's probabilities `p = exp(x - max) / s`, nested in the fusion
of `p @ v`), no fusion of the forward hands it out, and the program without remat cannot read it
in its backward: the fusion of the backward matmul that reads it (`dv = p^T @ do`) rebuilds it from
what that program stores (`x`, `max`, `s`), nesting the whole chain. The program with remat nests
the same chain in the same gradient fusion, reading the recompute's `max` and `s` instead: every op
of that nested fusion is one both programs run, model FLOPs.

hloflops.remat.fusion_copies asks the same of each op's own value (`_nested_in_gradient_matmuls`:
the forward computes that value only nested). Here the question is the nested fusion's: its outputs
are values the forward computes only nested, and no op of its chain is one the forward hands out of
a fusion (where one is, the program without remat reads it stored and rebuilds less). The forward's
ops are those of the recompute's signature: opcode, shape but for unit dimensions, frame, and the
name the recompute has inside its checkpoint. Not its value number: the recompute keeps a unit
dimension its forward drops (one head's `[b, 1, q, k]` scores against `[b, q, k]`, and so the
reductions over them) and reads a policy's saved scores where the forward reads their rounding
(TPU draw 45, a one-head attention layer under `dots_saveable`).

Not in a program with loops (a scan's backward loop: the program without remat reads the
residuals its forward loop stacked, TPU draw 10, also in a layer XLA peeled off the loop into the
entry, TPU draw 49), nor for a chain holding the bias add of a matmul's output, saved
or recomputed (`saved_matmul_epilogues`, `offloaded_residuals.adds_to_matmul`: the program without
remat may fuse it into the matmul's output fusion and store the sum, as on TPU draws 39 and 58)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.fusion_copies import outermost_fusions, saved_matmul_epilogues
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, MATMUL_OPCODES, unit_free_shape
from hloflops.remat.offloaded_residuals import adds_to_matmul
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloparse.ir import CallRole, Module


def rebuilt_in_gradient_matmuls(module: Module, ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                                remat: set[SiteKey], model: set[SiteKey]) -> set[SiteKey]:
    """The counted recomputes of nested fusions that rebuild, inside a backward matmul's fusion, a
    value the forward never hands out (see the module docstring): model FLOPs."""
    homes = outermost_fusions(module)
    if not homes or any(inst.opcode == "while" for inst in module.entry.instructions):
        return set()
    by_key = {op.key: op for op in ops if op.key[0] in fused}
    callers = {callee: comp.name for comp, inst in module.instructions() if inst.opcode == "fusion"
               for callee in inst.called(CallRole.FUSION) if comp.name in fused}
    chains: dict[tuple[str, int], list[SiteOp]] = {}
    for op in by_key.values():
        if op.key[0] in homes:
            chains.setdefault((op.key[0], op.key[2]), []).append(op)
    forward: dict[tuple, list[SiteOp]] = {}  # the forward's ops, by opcode, unit-free shape and frame
    for op in ops:
        if not op.marked and op.op_name:
            forward.setdefault(_kind(op), []).append(op)
    epilogues = saved_matmul_epilogues(module, ops)
    all_by_key, one_site = {op.key: op for op in ops}, one_call_site(module)
    found: set[SiteKey] = set()
    for (comp_name, site), chain in chains.items():
        counted = {op.key for op in chain if op.key in remat and op.inst.opcode not in MATMUL_OPCODES}
        if any(op.key in epilogues or adds_to_matmul(module, one_site, all_by_key, op) for op in chain):
            continue
        outputs = [op for op in chain if op.inst.name in fused[comp_name]]
        if not counted or not outputs or any(not op.named for op in outputs) or \
                not _in_gradient_matmul(module, callers, comp_name, site, fused, by_key, remat, model):
            continue
        twins = {op.key: _twins(op, forward) for op in chain if op.named and op.inst.opcode in DUPLICATED}
        if all(twins.get(op.key) and all(t.key[0] in homes for t in twins[op.key]) for op in outputs) and \
                not any(_handed_out(t, fused, homes) for copies in twins.values() for t in copies):
            found |= counted
    return found


def _kind(op: SiteOp) -> tuple:
    return op.inst.opcode, unit_free_shape(op.inst.shape), op.frame


def _twins(op: SiteOp, forward: Mapping[tuple, list[SiteOp]]) -> list[SiteOp]:
    """The forward's ops of the recompute's signature and name inside its checkpoint."""
    tail = inner_tail(op.op_name)
    return [t for t in forward.get(_kind(op), ()) if tail and ends_with(t.op_name, tail)]


def _in_gradient_matmul(module: Module, callers: Mapping[str, str], comp_name: str, site: int,
                        fused: Mapping[str, frozenset[str]], by_key: Mapping[SiteKey, SiteOp],
                        remat: set[SiteKey], model: set[SiteKey]) -> bool:
    """Is the fusion around the nested one a backward matmul's: a matmul reads it, none of the
    fusions around it computes a recomputed matmul (that one reads the value for the recompute: TPU
    draw 58's `p @ v`, recomputed for the output projection's weight gradient inside that gradient's
    fusion), and none of the outermost one's outputs is recompute (each unmarked, or the model's
    own)?"""
    matmuls, home = [], comp_name
    while home in callers:
        home = callers[home]
        matmuls += [(home, inst.name, site) for inst in module.by_name[home].instructions
                    if inst.opcode in MATMUL_OPCODES]
    keys = [key for key in ((home, name, site) for name in fused.get(home, ())) if key in by_key]
    return bool(keys) and bool(matmuls) and not any(key in remat for key in keys + matmuls) and \
        all(not by_key[key].marked or key in model for key in keys)


def _handed_out(op: SiteOp, fused: Mapping[str, frozenset[str]], homes: Mapping[str, str]) -> bool:
    """Does the forward op's value leave the fusions it is computed in (or is it unfused)?"""
    outputs = fused.get(op.key[0])
    return outputs is None or (op.inst.name in outputs and op.key[0] not in homes)
