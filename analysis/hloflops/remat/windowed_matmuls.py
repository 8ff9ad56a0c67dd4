"""A recompute's matmul whose forward the partitioner split into a windowed loop (`windowed_recomputes`).

Under SPMD (tensor parallelism) XLA's partitioner may compute a sharded einsum as a windowed
loop: a `while` of its own, named by the einsum (its op_name is the `dot_general`'s), whose body
multiplies one window of the sharded operand per trip and passes the window on to the next device
with a collective permute. It decides so for each copy of the einsum apart: the forward's
`Dense_0` may run as two trips of `bf16[4,16] x bf16[16,128]` in such a loop while its recompute
in the backward loop gathers the weight and runs one `bf16[4,32] x bf16[32,128]` (TPU draw 77,
flax's remat_scan under tensor parallelism; draw 99, haiku, the same with the recompute outside
every loop). The copies have other local shapes and other FLOPs per execution, so neither their
values, their signatures (hloflops.remat.by_signature) nor their per-device FLOPs
(hloflops.remat.partitioned) meet, and they lie in other frames; yet the window loop's trips
together run the FLOPs of the whole local matmul, which is what the other copy runs at once.

So a remat-named matmul left unpaired pairs with an unmarked matmul outside the backward of its
opcode and of its name inside the checkpoint (`inner_tail`), in another frame, where one of the
two runs in a window loop and both run the same FLOPs per whole matmul (per execution, times the
window loop's trip count). Each twin serves one recompute per level, those that other rules paired
with twins of the same whole FLOPs first. A window loop is told by its structure: a `while` whose
op_name is that of the matmul in its body (no jax loop is named like an einsum). CSE cannot merge
a copy in one frame with one in another, so the pairing is no name-only count; and a matmul named
in the recompute is the primal's (jvp transposes its tangent's matmuls into the backward).
"""

from __future__ import annotations

from collections import Counter

from hloflops.loops.tripcount import trip_count
from hloflops.remat.names import ends_with, inner_tail, remat_depth, remat_level
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.partitioned import partitioned_key
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module


def window_loops(module: Module) -> dict[str, tuple[str, int]]:
    """Body computation -> (op_name, trip count) of each `while` named by a matmul of its body."""
    bodies: dict[str, tuple[str, int]] = {}
    for comp, inst in module.instructions():
        if inst.opcode != "while" or not inst.op_name:
            continue
        for body in inst.called(CallRole.WHILE_BODY):
            if body not in module.by_name:
                continue
            if not any(_named_matmul(module, callee, inst.op_name) for callee in _with_fused(module, body)):
                continue
            trips = trip_count(module, comp, inst).value
            if trips and trips > 1:
                bodies[body] = (inst.op_name, trips)
    return bodies


def _with_fused(module: Module, body: str) -> list[str]:
    comp = module.by_name[body]
    return [body] + [callee for inst in comp.instructions if inst.opcode == "fusion"
                     for callee in inst.called(CallRole.FUSION) if callee in module.by_name]


def _named_matmul(module: Module, comp: str, op_name: str) -> bool:
    return any(inst.opcode in MATMUL_OPCODES and inst.op_name == op_name for inst in module.by_name[comp].instructions)


def windowed_recomputes(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The unpaired remat-named matmuls that a window loop's matmul is the forward twin of
    (module docstring)."""
    loops = window_loops(module)
    if not loops:
        return set()
    shapes = {inst.name: inst.shape for _, inst in module.instructions()}

    def whole(op: SiteOp) -> tuple | None:  # opcode and FLOPs of the whole local matmul
        key = partitioned_key(op.inst, shapes)
        if key is None:
            return None
        loop = loops.get(op.frame)
        windowed = loop is not None and op.inst.op_name == loop[0]
        return key[0], key[1] * (loop[1] if windowed else 1), windowed

    matmuls = [op for op in ops if op.inst.opcode in MATMUL_OPCODES and not op.inst.shape.is_tuple]
    twins = [(op, w) for op in matmuls if not op.marked and phase(op.op_name) != "backward"
             for w in (whole(op),) if w is not None]
    if not any(w[2] for _, w in twins):
        return set()
    recomputes = [(op, w) for op in matmuls if op.named and not op.inherited and op.op_name
                  for w in (whole(op),) if w is not None]
    found: set[SiteKey] = set()
    used: Counter = Counter()  # (twin key, level): recomputes it serves
    # Recomputes other rules paired take their twins first, then the unpaired ones in order.
    for op, w in sorted(recomputes, key=lambda pair: (pair[0].key not in remat, pair[0].order)):
        tail, level = inner_tail(op.op_name), remat_level(op.op_name)
        depth = remat_depth(op.op_name)
        for twin, tw in twins:
            if tw[:2] != w[:2] or (twin.key, level) in used or remat_depth(twin.op_name) >= depth:
                continue
            if twin.op_name and not ends_with(twin.op_name, tail):
                continue
            if op.key not in remat and (twin.frame == op.frame or not (tw[2] or w[2])):
                continue  # an unpaired one only across a window loop, in another frame
            used[(twin.key, level)] += 1
            if op.key not in remat:
                found.add(op.key)
            break
    return found
