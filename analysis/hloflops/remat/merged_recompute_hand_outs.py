"""A recomputed activation a scan's backward loop hands out of the fusion that also computes the
gradient through it: the program without remat may copy its chain once more (TPU;
hloflops.remat.tpu_twin_hinges adds `merged_hand_out_copies` to the hinges, the range's low end).

With remat, TPU's fusion in the backward loop body may compute the recomputed activation `y`
(gelu's `h * 0.5 * (1 + tanh(...))`, which the next layer's weight gradient reads) and the gradient
through the activation (`dh = g * gelu'(h)`) in one multi-output fusion: both read the same
recomputed chain. The program without remat computes that chain in its forward loop instead, for
three consumers: the next matmul's operand, the stack saving `y` for the weight gradient, and the
stacks saving the derivative's residuals (`tanh`, `1 - tanh`, `3 * h * h`). Whether it writes
`y`'s stack in the fusion writing the residuals' stacks, and whether the matmul's operand is that
fusion's output or a copy of its own, rests on how XLA fused that program: wtpu 349 (nnx.scan,
gelu, fsdp) computes `y`'s chain three times there (one fusion writes `y`'s stack and hands out
`h`, a second computes `y` again from `h` for the matmul, a third writes the five residual
stacks), where this program computes it twice (the forward's fusion for the matmul, the merged
backward fusion), and htpu 80 (dots_saveable, tp) alike. hloflops.remat.backward_loop_copies
counts one saving copy per chain value, as it must where the recompute's fusions split as the
twin's saving fusions do; a merged fusion says nothing of that split, so the twin's extra copy is
a hinge, not a sure share: each remat-named cheap op on the handed-out value's chain in that
fusion may run once more in the program without remat. Lowers the range's low end only (the
count stays the rule's); on the TPU draws 0-419 the sign fires on htpu 71, 80, 113, ntpu 173,
utpu 235, vtpu 270, wtpu 349, xtpu 380, 405 and 407 (nnx.scan, hk.layer_stack, flax's remat_scan
and a fori_loop), none of them exact."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.fusion_copies import backward_loop_bodies
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import Module

# What a fusion copies into each reader: cheap elementwise ops (the chain's tanh is not copied
# by count: an expensive op's copies are the expensive-op rules').
_CHEAP = DUPLICATED - EXPENSIVE - {"convert"}
# Ops between a fusion's value and its output that compute nothing.
_MOVES = frozenset({"bitcast", "reshape", "copy"})


def merged_hand_out_copies(module: Module, ops: list[SiteOp], fused: Mapping[str, frozenset[str]]
                           ) -> dict[SiteKey, int]:
    """For each fusion in a backward loop body (`backward_loop_bodies`) whose outputs hold both a
    remat-named cheap value (the recomputed activation it hands out) and a cheap op of the
    backward's own (the gradient it computes from the same recompute), the remat-named cheap ops
    on the handed-out value's chain in the fusion: one copy more each that the program without
    remat may make (module docstring)."""
    loops = backward_loop_bodies(module, ops)
    if not loops:
        return {}
    sites: dict[tuple[str, int], dict[str, SiteOp]] = {}
    for op in ops:
        if op.frame in loops and op.key[0] in fused:
            sites.setdefault((op.key[0], op.key[2]), {})[op.key[1]] = op
    found: dict[SiteKey, int] = {}
    for (comp_name, _), members in sites.items():
        outputs = [members[name] for name in fused[comp_name] if name in members]
        handed = [op for op in outputs if op.named and op.inst.opcode in _CHEAP]
        gradient = [op for op in outputs if not op.named and op.inst.opcode in _CHEAP
                    and op.op_name and phase(op.op_name) == "backward"]
        if not handed or not gradient:
            continue
        comp = module.by_name[comp_name]
        chain: set[str] = set()
        todo = [op.inst.name for op in handed]
        while todo:
            name = todo.pop()
            if name in chain or name not in comp.by_name:
                continue
            inst = comp.by_name[name]
            op = members.get(name)
            if inst.opcode in _MOVES or inst.opcode == "broadcast" or (op is not None and op.named):
                chain.add(name)
                todo.extend(inst.operands)
        for name in chain:
            op = members.get(name)
            if op is not None and op.named and op.inst.opcode in _CHEAP:
                found[op.key] = found.get(op.key, 0) + 1
    return found
