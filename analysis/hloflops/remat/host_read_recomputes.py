"""A recompute's matmul that reads a residual the program offloaded to the host (`host_read_recomputes`).

An offload policy (`save_and_offload_only_these_names`) sends the residuals it names to the host's
memory space in the forward, and the backward's recompute reads them back. A remat-named matmul
computed from such a read-back value reads what no forward op reads (the forward computed the
value and wrote it away), so XLA's CSE cannot have merged it into its forward: it runs besides
the forward's copy, a recompute. Yet it may find no twin: in one frame the pairing by signature
(hloflops.remat.by_signature) asks that the two read the same frame inputs, and the read-back
residual is computed from more of them than the forward's operand (a layer stack's later layers
all read the stacked weights: TPU draw 75, haiku's layer_stack under an offload policy, the second
layer's attention projections and output matmul, recomputed in the backward, left unpaired).

Such a matmul pairs with a forward twin left over: an unmarked op outside the backward of its
signature (opcode, shapes, dimension numbers: the same FLOPs) and of its name inside the
checkpoint, one remat level deeper at most, that serves no other recompute of its level (those the
other rules paired take theirs first). A matmul named in the recompute is the primal's (jvp
transposes its tangent's matmuls into the backward). Only a host value the program wrote itself
counts (a device value copied into a host buffer), not one it was handed on the host (a weight
kept there, which the forward reads too).
"""

from __future__ import annotations

from hloflops.remat.moved_values import lies_on_host
from hloflops.remat.names import ends_with, inner_tail, remat_depth, remat_level
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.signature import signature
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.scopes import phase
from hloparse.ir import Computation, Instruction, Module


def _written_to_host(comp: Computation, inst: Instruction) -> bool:
    """Is a host value computed in this frame from a device value (an offload), host ops between?"""
    pending, seen = [inst], set()
    while pending:
        cur = pending.pop()
        if cur.name in seen:
            continue
        seen.add(cur.name)
        for name in cur.operands:
            operand = comp.by_name.get(name)
            if operand is None:
                continue
            if lies_on_host(operand.shape):
                pending.append(operand)
            elif operand.shape.dims and operand.opcode != "parameter":
                return True  # a device array written into the host value
    return False


def _read_from_host(comp: Computation, start: Instruction, memo: dict[str, bool]) -> bool:
    """Is `start` computed, in its frame, from a host value the program wrote (`_written_to_host`)?"""
    pending, seen = [start], set()
    while pending:
        cur = pending.pop()
        if cur.name in seen:
            continue
        seen.add(cur.name)
        for name in cur.operands:
            operand = comp.by_name.get(name)
            if operand is None:
                continue
            if lies_on_host(operand.shape):
                if name not in memo:
                    memo[name] = _written_to_host(comp, operand)
                if memo[name]:
                    return True
                continue
            pending.append(operand)
    return False


def host_read_recomputes(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The unpaired remat-named matmuls computed from a residual read back from the host that a
    forward twin left over pairs with (module docstring)."""
    if not any(lies_on_host(inst.shape) for _, inst in module.instructions()):
        return set()
    callers = one_call_site(module)
    memo: dict[str, bool] = {}
    shapes = {inst.name: inst.shape for _, inst in module.instructions()}
    unpaired = []
    for op in ops:
        if op.inst.opcode not in MATMUL_OPCODES or not op.named or op.inherited or not op.op_name \
                or op.key in remat:
            continue
        site = callers.get(op.key[0])
        comp, inst = site if site is not None else (module.by_name[op.key[0]], op.inst)
        if _read_from_host(comp, inst, memo):
            unpaired.append(op)
    if not unpaired:
        return set()
    sigs = {op.key: signature(op, shapes) for op in ops if op.inst.opcode in MATMUL_OPCODES}
    twins = [op for op in ops if op.key in sigs and not op.marked and phase(op.op_name) != "backward"]
    paired = [op for op in ops if op.key in sigs and op.named and not op.inherited and op.op_name and op.key in remat]
    used: set[tuple[SiteKey, tuple[int, int]]] = set()
    found: set[SiteKey] = set()
    for op in paired + unpaired:
        tail, level, depth = inner_tail(op.op_name), remat_level(op.op_name), remat_depth(op.op_name)
        for twin in twins:
            if sigs[twin.key] != sigs[op.key] or (twin.key, level) in used or remat_depth(twin.op_name) >= depth:
                continue
            if twin.op_name and not ends_with(twin.op_name, tail):
                continue
            used.add((twin.key, level))
            if op.key not in remat:
                found.add(op.key)
            break
    return found
