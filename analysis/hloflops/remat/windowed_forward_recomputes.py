"""A recompute's matmul run whole in the frame where the partitioner windowed its forward
(`windowed_forward_recomputes`; after optimization, TPU, partitioned).

Under FSDP the partitioner gathers a batch-sharded activation `x` whole for a matmul with a
feature-sharded weight, either with one all-gather and one matmul, or as a windowed einsum unrolled
in place: each device passes its rows on by `collective-permute`, concatenates them with its own
(`maximum` of `-inf` pads) and runs one matmul per window of rows (hloflops.remat.twice_windowed_gathers).
It decides for each copy of the einsum apart. Where the checkpoint's recompute reads `x` and
gathers it for itself and the weight gradient, the forward's copy may come out as two windows,
`f32[2,32] x bf16[32,128]` twice, and the recompute as one `f32[4,32] x bf16[32,128]` after an
all-gather (utpu draws 196, scan_unrolled, and 209, eqx_list, both FSDP with every layer unrolled
into ENTRY: three such recomputes each, 98,304 FLOPs, all of them run beyond the program without
remat). The copies have other shapes, so neither their values nor their signatures meet; and
they share one frame, where hloflops.remat.windowed_matmuls, which pairs windows across frames
only, leaves them: a name-only pairing in one frame could take another layer's windows (every
layer's einsum is `dot_general`, and the second matmul's windows run as many FLOPs as the first's).

So the sign here is the weight itself: a recompute-named matmul left unpaired is the recompute of a
forward group of windows in its frame (matmuls of one op_name, call-site signature and shape, two
or more, outside the backward, in a frame that collective-permutes under that op_name) where every
window reads the very weight the recompute reads (the same slice of the same parameter, through
moves, casts and views: one layer's, not another's) and the windows' FLOPs sum to the recompute's.
A matmul named in the recompute is the primal's (jvp transposes its tangent's matmuls into the
backward), so with its forward in sight it runs once more than in the program without remat.
Each group serves one recompute per remat level. The windows' concatenations and the offsets'
scalar arithmetic are left: whether the program without remat windows its forward too is not in
sight here."""

from __future__ import annotations

from hloflops.remat.names import REMAT_SCOPE, remat_level
from hloflops.remat.op_kinds import MATMUL_OPCODES, shape_key
from hloflops.remat.partitioned import is_partitioned, partitioned_key
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# What hands a weight on unchanged in value but for layout, type or the device's memory.
_MOVES = frozenset({"bitcast", "copy", "copy-start", "copy-done", "convert", "reshape", "transpose",
                    "all-gather-start", "all-gather-done", "get-tuple-element"})


def windowed_forward_recomputes(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The unpaired recompute-named matmuls whose forward twin is a group of windows in their own
    frame reading the same weight (module docstring)."""
    if not is_partitioned(module):
        return set()
    permuted: dict[str, set[str]] = {}
    for comp, inst in module.instructions():
        if inst.opcode.startswith("collective-permute") and inst.op_name:
            permuted.setdefault(comp.name, set()).add(inst.op_name)
    if not permuted:
        return set()
    shapes = {inst.name: inst.shape for _, inst in module.instructions()}
    callers = one_call_site(module)
    groups: dict[tuple, list[SiteOp]] = {}
    for op in ops:
        if op.inst.opcode not in MATMUL_OPCODES or op.marked or phase(op.op_name) == "backward":
            continue
        if op.inst.op_name not in permuted.get(op.frame, ()):
            continue
        key = partitioned_key(op.inst, shapes)
        if key is not None:
            groups.setdefault((op.frame, op.key[2], op.inst.op_name, key, shape_key(op.inst.shape)), []).append(op)
    windows: list[tuple[str, tuple, int, frozenset]] = []  # frame, (opcode, FLOPs of all), group, weights
    for (frame, _, _, (opcode, n), _), members in groups.items():
        # The windows of one einsum read one weight: every layer's windows share the signature.
        readers: dict[tuple, list[SiteOp]] = {}
        for op in members:
            for origin in _weights(module, callers, op):
                readers.setdefault(origin, []).append(op)
        seen: set[frozenset[SiteKey]] = set()
        for origin, group in readers.items():
            keys = frozenset(op.key for op in group)
            if len(group) < 2 or keys in seen:
                continue
            seen.add(keys)
            shared = frozenset.intersection(*(_weights(module, callers, op) for op in group))
            windows.append((frame, (opcode, n * len(group)), len(windows), shared))
    if not windows:
        return set()
    found: set[SiteKey] = set()
    used: set[tuple[int, tuple[int, int]]] = set()
    for op in sorted(ops, key=lambda o: o.order):
        if op.key in remat or op.inst.opcode not in MATMUL_OPCODES or not op.named or op.inherited \
                or REMAT_SCOPE not in op.op_name:
            continue
        key = partitioned_key(op.inst, shapes)
        if key is None:
            continue
        level = remat_level(op.op_name)
        weights = _weights(module, callers, op)
        for frame, whole, number, shared in windows:
            if frame != op.frame or whole != key or (number, level) in used or not (weights & shared):
                continue
            used.add((number, level))
            found.add(op.key)
            break
    return found


def _weights(module: Module, callers: dict, op: SiteOp) -> frozenset:
    """Where each operand of a matmul comes from: (instruction, slices) at the first op that is no
    move, traced out of its fusion to the fusion's operands in the caller."""
    comp = module.by_name[op.key[0]]
    return frozenset(_origin(module, callers, comp, name, ()) for name in op.inst.operands)


def _origin(module: Module, callers: dict, comp: Computation, name: str, slices: tuple) -> tuple:
    for _ in range(64):
        inst: Instruction | None = comp.by_name.get(name)
        if inst is None:
            break
        if inst.opcode == "fusion":  # a nested fusion: its root, read in its own computation
            called = [c for c in inst.called(CallRole.FUSION) if c in module.by_name]
            if not called or module.by_name[called[0]].root is None:
                break
            comp = module.by_name[called[0]]
            name = comp.root.name
            continue
        if inst.opcode == "parameter":
            site = callers.get(comp.name)
            number = parameter_number(inst)
            if site is None or number is None or number >= len(site[1].operands):
                break
            comp, name = site[0], site[1].operands[number]
            continue
        if inst.opcode == "slice":
            slices += (inst.attributes.get("slice", ""),)
        elif inst.opcode not in _MOVES or not inst.operands:
            break
        name = inst.operands[0]
    return comp.name, name, slices
