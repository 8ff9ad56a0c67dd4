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
window loop's trip count). The partitioner may also unroll the windows into one frame (TPU draw
113, FSDP): matmuls of one op_name and signature at one call site, sharing an operand (the weight),
in a frame that collective-permutes under their op_name; together they are one twin, of their
FLOPs summed. Each twin serves one recompute per level, those that other rules paired
with twins of the same whole FLOPs first. A window loop is told by its structure: a `while` whose
op_name is that of the matmul in its body (no jax loop is named like an einsum). CSE cannot merge
a copy in one frame with one in another, so the pairing is no name-only count; and a matmul named
in the recompute is the primal's (jvp transposes its tangent's matmuls into the backward).
"""

from __future__ import annotations

from hloflops.loops.tripcount import trip_count
from hloflops.remat.names import ends_with, inner_tail, remat_depth, remat_level
from hloflops.remat.op_kinds import MATMUL_OPCODES, shape_key
from hloflops.remat.partitioned import partitioned_key
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
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
    """The unpaired remat-named matmuls that a window loop's matmul, or a frame's unrolled windows
    of one matmul, is the forward twin of (module docstring)."""
    loops = window_loops(module)
    permuted = _permuted_names(module)
    if not loops and not permuted:
        return set()
    shapes = {inst.name: inst.shape for _, inst in module.instructions()}
    flops = {op.key: key for op in ops if op.inst.opcode in MATMUL_OPCODES and not op.inst.shape.is_tuple
             for key in (partitioned_key(op.inst, shapes),) if key is not None}

    def whole(op: SiteOp) -> tuple[str, int, bool]:  # opcode, FLOPs of the whole local matmul, windowed
        opcode, n = flops[op.key]
        loop = loops.get(op.frame)
        windowed = loop is not None and op.inst.op_name == loop[0]
        return opcode, n * (loop[1] if windowed else 1), windowed

    forward = [op for op in ops if op.key in flops and not op.marked and phase(op.op_name) != "backward"]
    twins: list[tuple[SiteOp, tuple[str, int, bool]]] = [(op, whole(op)) for op in forward]
    twins += _unrolled_windows(module, forward, flops, permuted)
    if not any(w[2] for _, w in twins):
        return set()
    recomputes = [(op, whole(op)) for op in ops if op.key in flops and op.named and not op.inherited and op.op_name]
    found: set[SiteKey] = set()
    used: set[tuple[int, tuple[int, int]]] = set()  # (twin, level): one recompute each
    # Recomputes other rules paired take their twins first, then the unpaired ones in order.
    for op, w in sorted(recomputes, key=lambda pair: (pair[0].key not in remat, pair[0].order)):
        tail, level, depth = inner_tail(op.op_name), remat_level(op.op_name), remat_depth(op.op_name)
        # A paired one takes a twin run whole first: it paired by shapes, a window's twin is not its own.
        for number, (twin, tw) in sorted(enumerate(twins), key=lambda t: op.key in remat and t[1][1][2]):
            if tw[:2] != w[:2] or (number, level) in used or remat_depth(twin.op_name) >= depth:
                continue
            if twin.op_name and not ends_with(twin.op_name, tail):
                continue
            if op.key not in remat and (twin.frame == op.frame or not (tw[2] or w[2])):
                continue  # an unpaired one only across windows, in another frame
            used.add((number, level))
            if op.key not in remat:
                found.add(op.key)
            break
    return found


def _permuted_names(module: Module) -> dict[str, set[str]]:
    """Frame -> the op_names of the collective permutes in it (a window passed on)."""
    out: dict[str, set[str]] = {}
    for comp, inst in module.instructions():
        if inst.opcode.startswith("collective-permute") and inst.op_name:
            out.setdefault(comp.name, set()).add(inst.op_name)
    return out


def _unrolled_windows(module: Module, forward: list[SiteOp], flops: dict[SiteKey, tuple],
                      permuted: dict[str, set[str]]) -> list[tuple[SiteOp, tuple[str, int, bool]]]:
    """Windows of one matmul the partitioner unrolled into one frame (TPU draw 113, FSDP: the
    forward's `[4,16] x [16,32]` as two `[2,16] x [16,32]`, the activation's second window
    collective-permuted in): matmuls of one op_name, signature and call site, sharing an operand
    (the weight) at their fusions' call sites, in a frame that collective-permutes under that
    op_name. One twin each group, of the group's FLOPs together."""
    callers = one_call_site(module)
    groups: dict[tuple, list[SiteOp]] = {}
    for op in forward:
        if op.inst.op_name not in permuted.get(op.frame, ()):
            continue
        groups.setdefault((op.frame, op.key[2], op.inst.op_name, flops[op.key], shape_key(op.inst.shape)),
                          []).append(op)
    out: list[tuple[SiteOp, tuple[str, int, bool]]] = []
    for (_, _, _, (opcode, n), _), members in groups.items():
        if len(members) < 2:
            continue
        shared: set[str] | None = None
        for op in members:
            site = callers.get(op.key[0])
            operands = set(site[1].operands) if site is not None else set(op.inst.operands)
            shared = operands if shared is None else shared & operands
        if shared:
            out.append((members[0], (opcode, n * len(members), True)))
    return out
