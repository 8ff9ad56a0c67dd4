"""An activation gathered twice in windows, for a forward matmul and for its weight gradient, because
the checkpoint's barrier kept the two readers apart (after optimization; TPU, partitioned).

Under FSDP the partitioner gathers a batch-sharded activation `x` whole for a matmul with a
feature-sharded weight. It may gather it with one all-gather, or as a windowed einsum unrolled in
place: each device passes its rows to its neighbours (`collective-permute` both ways), writes the
rows it holds next to those it received as a concatenation (`maximum` of `-inf` pads), runs the
matmul on each window of rows, and for a weight gradient `dW = x^T dy`, which contracts the rows,
takes the matching rows of `dy` the same way (`maximum` of `-inf` pads sliced at the window's
offset) and sums the windows' partial products (an `add` of each partial `dW` into the last).
The program without remat reads one `x` in its forward matmul and in the weight gradient, in one
frame, and gathers it once for both (one all-gather, one matmul each: no windows). With remat the
weight gradient reads `x` through the checkpoint's barrier (or the recompute's copy of it, a
checkpoint around the whole model), another value while the partitioner runs: each reader has a
gather of its own, and TPU windows both (TPU draw 19, a whole-model checkpoint under FSDP: the
three layers' first matmuls and their weight gradients, `add` 12,288 and `maximum` 2,304 the
program without remat does not run; held-out draw 159, haiku's per-layer checkpoints, `add`
3,072, `maximum` 384 + 768). The windows' matmuls run the FLOPs of the one matmul (model); their
concatenations, their row selections and the weight gradient's partial sums run because of remat.

Told by the program itself: a forward matmul and a backward matmul in one frame, each reading a
concatenation of rows received by collective-permute, whose rows come (through the permutes,
copies and views) from one value, or the backward's from a recompute. Where the forward and its
weight gradient read values the program without remat does not share (a scan's backward loop
reads a stacked activation: TPU draw 113 windows the weight gradient without remat), the frames
differ and nothing is counted.

Where the rows travel as bf16 (ytpu 422 and 436, utpu 224, vtpu 298, wtpu 329: python and
haiku loops under offload or `dots_saveable`), TPU runs each bf16 `maximum` and `add` in f32 between
converts, which run with them, and each gather narrows its own copy of `x` before its permutes: a
backward window's narrow that no forward window shares is remat too (the program without remat
narrows once, for its one all-gather). The window offsets' scalar arithmetic (`and`, `clamp`, one each)
is left: XLA shares it between windows, with remat as without, and which copy is the extra one is
not in sight.
"""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.names import is_remat_named
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.partitioned import is_partitioned
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.scopes import model_components
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

_VIEWS = frozenset({"bitcast", "reshape", "copy"})
# What passes a shard on unchanged to another device or memory (a window's rows).
_PERMUTES = frozenset({"collective-permute", "collective-permute-start", "collective-permute-done"})
# ... and a narrowing of the rows to bf16 before they travel (each gather narrows its own copy).
_MOVES = _VIEWS | _PERMUTES | {"copy-start", "copy-done", "convert"}

Place = tuple[str, str]  # (computation, instruction)


def twice_windowed_gathers(module: Module, ops: list[SiteOp]) -> set[SiteKey]:
    """The concatenations, row selections and partial sums of windowed matmuls that gather an
    activation again for its weight gradient (remat, sure), per the module docstring."""
    if not is_tpu_module(module) or not is_partitioned(module):
        return set()
    callers = one_call_site(module)
    windowed: list[tuple[Instruction, str, set[Place], set[Place], dict[Place, tuple[Place, set[Place]]],
                         set[Place]]] = []
    for comp, inst in module.instructions():
        if inst.opcode not in MATMUL_OPCODES:
            continue
        found = _windows(module, callers, comp, inst)
        if found is not None:
            windowed.append((inst, _frame(callers, comp), *found))
    products = {(inst.name, frame) for inst, frame, *_ in windowed}
    # Each gather narrows its own copy of the rows to bf16 before the permutes; the program without
    # remat narrows once for its one gather: a backward's narrow that no forward window shares.
    forward_narrows = {place for inst, frame, *_, narrows in windowed if "transpose(" not in inst.op_name
                       for place in narrows}
    counted: set[Place] = set()
    for fwd, frame, maxima, origins, sums, _ in windowed:
        if "transpose(" in fwd.op_name or is_remat_named(fwd):
            continue
        for bwd, other_frame, bwd_maxima, bwd_origins, bwd_sums, bwd_narrows in windowed:
            if other_frame != frame or "transpose(" not in bwd.op_name:
                continue
            # The backward gathers the forward's value again (through the barrier, gone after
            # optimization), or a recompute of a matmul of the same kind (`dot_general`).
            recomputed = bool(bwd_origins) and all(_remat_place(module, p) for p in bwd_origins) and \
                model_components(fwd.op_name)[-1:] == model_components(bwd.op_name)[-1:]
            if origins & bwd_origins or recomputed:
                counted |= maxima | bwd_maxima | {place for add, (other, casts) in (sums | bwd_sums).items()
                                                  if (other[1], frame) in products for place in {add} | casts}
                counted |= bwd_narrows - forward_narrows
    return {op.key for op in ops if (op.key[0], op.key[1]) in counted}


def _frame(callers: dict, comp: Computation) -> str:
    """The computation a fusion body runs in (its call site's), else the computation itself."""
    site = callers.get(comp.name)
    return site[0].name if site is not None else comp.name


def _remat_place(module: Module, place: Place) -> bool:
    comp = module.by_name.get(place[0])
    inst = comp.by_name.get(place[1]) if comp is not None else None
    return inst is not None and is_remat_named(inst)


def _windows(module: Module, callers: dict, comp: Computation, matmul: Instruction
             ) -> tuple[set[Place], set[Place], dict[Place, tuple[Place, set[Place]]], set[Place]] | None:
    """For a matmul reading a window of gathered rows (a concatenation of `-inf` pads one of whose
    pieces came by collective-permute): the maxima building its operands, the origins of the
    gathered rows, and the adds summing its product with another value (-> that value's producer,
    and the converts of a float-type-corrected sum).
    None for another matmul."""
    maxima: set[Place] = set()
    origins: set[Place] = set()
    narrowed: set[Place] = set()  # the gathered rows' narrows to bf16 on their way to the permutes
    gathered = False
    for operand in matmul.operands:
        place = _producer(module, callers, comp, operand)
        if place is None:
            continue
        body, inst = module.by_name[place[0]], module.by_name[place[0]].by_name[place[1]]
        narrows: set[Place] = set()
        # TPU runs a bf16 maximum in f32 (float-type correction, `original_type: BF16`): the
        # concatenation is then `convert(maximum(convert(pad), convert(pad)))`, converts and all.
        inner = body.by_name.get(inst.operands[0]) if inst.opcode == "convert" and inst.operands else None
        if inner is not None and inner.opcode == "maximum":
            narrows.add(place)
            inst, place = inner, (body.name, inner.name)
        if inst.opcode != "maximum":
            continue
        found = _pieces(body, inst)
        if found is None:
            continue
        pieces, widens = found
        maxima |= {place} | narrows | {(body.name, widen) for widen in widens}
        casts: set[Place] = set()
        traced = [_origin(module, callers, body, piece, casts) for piece in pieces]
        if any(moved for moved, _ in traced):  # a concatenation of gathered rows, not a row selection
            gathered = True
            origins |= {origin for _, origin in traced if origin is not None}
            narrowed |= casts
    if not gathered:
        return None
    # A partial sum: `add` of this window's product and another window's (read as a parameter).
    # The product may reach its add through a view (`add(bitcast(acc), bitcast(conv))` in a fusion),
    # and a bf16 add runs in f32 (float-type correction): `convert(add(convert(acc), convert(conv)))`,
    # whose converts run with the sum.
    casts: set[Place] = set()
    readers, product = list(comp.users.get(matmul.name, ())), matmul.name
    while len(readers) == 1 and readers[0].opcode in _VIEWS | {"convert"}:
        if readers[0].opcode == "convert":
            casts.add((comp.name, readers[0].name))
        product = readers[0].name
        readers = list(comp.users.get(product, ()))
    sums: dict[Place, tuple[Place, set[Place]]] = {}
    for inst in readers:
        if inst.opcode != "add" or len(inst.operands) != 2:
            continue
        other = next((name for name in inst.operands if name != product), None)
        widen = comp.by_name.get(other) if other is not None else None
        if widen is not None and widen.opcode == "convert" and widen.operands:
            other = widen.operands[0]
        place = _producer(module, callers, comp, other) if other is not None else None
        if place is None:
            continue
        narrows = [user for user in comp.users.get(inst.name, ()) if user.opcode == "convert"]
        sums[(comp.name, inst.name)] = place, casts | {(comp.name, cast.name) for cast in narrows} \
            | ({(comp.name, widen.name)} if widen is not None and widen.opcode == "convert" else set())
    return maxima, origins, sums, narrowed


def _pieces(body: Computation, maximum: Instruction) -> tuple[list[str], list[str]] | None:
    """The pieces a `maximum` of `-inf` pads (each maybe sliced at a window's offset, and widened
    for a float-type-corrected maximum) concatenates, and those widens; None for another maximum."""
    pieces: list[str] = []
    widens: list[str] = []
    for operand in maximum.operands:
        inst = body.by_name.get(operand)
        while inst is not None and inst.opcode in _VIEWS | {"dynamic-slice", "slice", "convert"} and inst.operands:
            if inst.opcode == "convert":
                widens.append(inst.name)
            inst = body.by_name.get(inst.operands[0])
        if inst is None or inst.opcode != "pad" or len(inst.operands) != 2 or not _minus_inf(body, inst.operands[1]):
            return None
        pieces.append(inst.operands[0])
    return pieces, widens


def _minus_inf(body: Computation, name: str) -> bool:
    inst = body.by_name.get(name)
    while inst is not None and inst.opcode in _VIEWS | {"broadcast"} and inst.operands:
        inst = body.by_name.get(inst.operands[0])
    return inst is not None and inst.opcode == "constant" and inst.attributes.get("literal", "").strip("{} ") == "-inf"


def _producer(module: Module, callers: dict, comp: Computation, name: str, depth: int = 12) -> Place | None:
    """The instruction computing the value `name`: through views, a fusion's parameter to its call
    site's operand, and into a fusion to its root (a multi-output fusion's through its tuple)."""
    index: int | None = None
    for _ in range(depth):
        inst = comp.by_name.get(name)
        if inst is None:
            return None
        if inst.opcode in _VIEWS and inst.operands:
            name = inst.operands[0]
        elif inst.opcode == "get-tuple-element" and inst.operands:
            index, name = int(inst.attributes.get("index", "0")), inst.operands[0]
        elif inst.opcode == "parameter":
            if comp.name not in callers:  # the entry's or a loop body's: the value itself
                return comp.name, inst.name
            site = callers.get(comp.name)
            number = parameter_number(inst)
            if site is None or number is None or number >= len(site[1].operands):
                return None
            comp, name = site[0], site[1].operands[number]
        elif inst.opcode == "fusion":
            bodies = [module.by_name[c] for c in inst.called(CallRole.FUSION) if c in module.by_name]
            if len(bodies) != 1 or bodies[0].root is None:
                return None
            comp, root = bodies[0], bodies[0].root
            if root.opcode == "tuple":
                if index is None or index >= len(root.operands):
                    return None
                name, index = root.operands[index], None
            else:
                name = root.name
        elif inst.opcode == "tuple" and index is not None and index < len(inst.operands):
            name, index = inst.operands[index], None
        else:
            return comp.name, inst.name
    return None


def _origin(module: Module, callers: dict, comp: Computation, name: str, casts: set[Place], depth: int = 24
            ) -> tuple[bool, Place | None]:
    """(whether the rows passed a collective-permute, where they came from): through permutes,
    copies and views, fusion parameters and fusions that only pass a value on; the converts passed
    go into `casts`."""
    moved = False
    for _ in range(depth):
        place = _producer(module, callers, comp, name)
        if place is None:
            return moved, None
        comp = module.by_name[place[0]]
        inst = comp.by_name[place[1]]
        if inst.opcode not in _MOVES or not inst.operands:
            return moved, place
        moved |= inst.opcode in _PERMUTES
        if inst.opcode == "convert":
            casts.add(place)
        name = inst.operands[0]
    return moved, None
