"""A recomputed mask TPU packs into bits within a scan's backward loop body (after optimization,
TPU only).

Where one fusion hands a `pred` value to other fusions through memory, TPU may store it packed, a
bit per element: the fusion computing it widens it to an unsigned integer, shifts each element by
its position along one dimension (`shift-left` by an `iota`) and ORs that dimension away (a
`reduce` whose computation is `or`, after a narrow to u8 or u16 where the dimension is short); each
reading fusion unpacks it, `and` of the packed word with `1 << iota`, converted back to `pred`.

Relu's mask `x > 0` is a residual of its jvp. The program without remat computes it in its forward
loop body and stacks it across the trips (a `dynamic-update-slice` into the loop's `pred` stack,
the value leaving the loop as loop state): not packed. With remat the recompute computes the mask
in the backward loop body and hands it to that trip's gradient fusions (the input's and the
weight's convolutions, the bias gradient): packed there, and unpacked in each reader. So where the
packed mask is a recompute's (its compare remat-named) and the packing runs in a scan's backward
loop body (hloflops.remat.fusion_copies.backward_loop_bodies), the packing and the unpacks run because of
remat (held-out TPU 109: shift-left 4 x 401,408, and 3 x 401,408, reduce 387,072 and the packing's
converts; 73 alike). Outside a loop the program without remat hands its forward's mask to the
backward through memory as well, and packs it as this program does (held-out TPU 60: one packing
and one unpack in each program): left to the other rules.

Counted remat but not paired by value, so the range's low end leaves them out: whether the twin
packs too rests on how XLA laid out its buffers, not on arithmetic this program shows.
"""

from __future__ import annotations

from typing import Callable

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.fusion_copies import backward_loop_bodies
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, value_readers
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

_VIEWS = frozenset({"bitcast", "reshape", "copy", "get-tuple-element"})


def packed_masks(module: Module, ops: list[SiteOp], decided) -> None:
    """Count each recomputed mask's packing in a backward loop body, and its unpacks, remat
    (`decided`: hloflops.remat.by_platform's `Decided`)."""
    if not is_tpu_module(module):
        return
    backward_loops = backward_loop_bodies(module, ops)
    if not backward_loops:
        return
    found = packed_mask_keys(module, ops, lambda mask_ops: all(op.named and op.frame in backward_loops
                                                               for op in mask_ops))
    decided.remat |= found
    decided.certain |= found
    decided.stand_ins -= found


def packed_mask_keys(module: Module, ops: list[SiteOp], accept: Callable[[list[SiteOp]], bool],
                     with_mask: bool = True) -> set[SiteKey]:
    """The keys of each mask packing's ops (the widen, shift and OR-reduce) and its unpacks in the
    readers, for the packings whose mask's ops `accept` takes (the mask's own keys only `with_mask`)."""
    keys: dict[tuple[str, str], list[SiteOp]] = {}
    for op in ops:
        keys.setdefault(op.key[:2], []).append(op)
    callers, readers = one_call_site(module), None
    found: set[SiteKey] = set()
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode != "reduce" or not is_or_reduce(module, inst):
                continue
            chain = mask_packing(comp, inst)
            if chain is None:
                continue
            names, mask = chain
            mask_ops = keys.get((comp.name, mask.name), [])
            caller = callers.get(comp.name)
            if not mask_ops or not accept(mask_ops) or caller is None:
                continue
            readers = readers if readers is not None else value_readers(module)
            names = names | mask_unpacks(module, caller, comp, inst, readers)
            for name in names if with_mask else names - {(comp.name, mask.name)}:
                found |= {op.key for op in keys.get(name, ())}
    return found


def is_or_reduce(module: Module, reduce: Instruction) -> bool:
    """Does the reduce OR its elements together (its computation's root an `or`)?"""
    called = reduce.called(CallRole.TO_APPLY)
    body = module.by_name.get(called[0]) if len(called) == 1 else None
    return body is not None and body.root.opcode == "or"


def mask_packing(comp: Computation, reduce: Instruction) -> tuple[set[tuple[str, str]], Instruction] | None:
    """The packing ops (the widen of the mask, its shift by an iota along the reduced dimension,
    a narrow, the reduce) and the compare computing the mask, or None where the reduce is no
    packing of a compare."""
    names = {(comp.name, reduce.name)}
    inst = comp.by_name.get(reduce.operands[0]) if reduce.operands else None
    while inst is not None and inst.opcode in ("convert", "bitcast") and inst.operands:
        names.add((comp.name, inst.name))
        inst = comp.by_name.get(inst.operands[0])
    if inst is None or inst.opcode != "shift-left" or len(inst.operands) != 2:
        return None
    names.add((comp.name, inst.name))
    value, amount = (comp.by_name.get(name) for name in inst.operands)
    if amount is None or amount.opcode != "iota" or reduce.dimensions is None or \
            amount.attributes.get("iota_dimension", "").strip() not in {str(d) for d in reduce.dimensions}:
        return None  # the shift is by the position along the dimension the reduce ORs away
    while value is not None and value.opcode in ("convert", "bitcast") and value.operands:
        names.add((comp.name, value.name))
        value = comp.by_name.get(value.operands[0])
    if value is None or value.opcode != "compare" or value.shape.element_type != "pred":
        return None
    return names, value


def mask_unpacks(module: Module, caller: tuple[Computation, Instruction], comp: Computation, reduce: Instruction,
             readers: dict) -> set[tuple[str, str]]:
    """The unpacking ops (`and` with `1 << iota`, the shift, the converts around the `and`) in each
    fusion reading the packed value, through the tuple element taking it and views."""
    frame, fusion = caller
    root = comp.root
    if root.opcode == "tuple":
        indices = {str(i) for i, name in enumerate(root.operands) if name == reduce.name}
        todo = [r for r in readers.get((frame.name, fusion.name), ())
                if r.opcode == "get-tuple-element" and r.attributes.get("index") in indices]
    else:
        todo = [fusion] if root.name == reduce.name else []
    out: set[tuple[str, str]] = set()
    for value in todo:
        out |= _read_from(module, frame, value, readers, 0)
    return out


def _read_from(module: Module, comp: Computation, value: Instruction, readers: dict, depth: int
               ) -> set[tuple[str, str]]:
    """The unpacking ops among the readers of `value` in `comp`, through views and into the fusions
    reading it (nested ones too: TPU nests a gradient fusion inside an async collective's)."""
    out: set[tuple[str, str]] = set()
    for reader in readers.get((comp.name, value.name), ()):
        if reader.opcode in _VIEWS:
            out |= _read_from(module, comp, reader, readers, depth)
        elif reader.opcode == "fusion" and depth < 4:
            called = reader.called(CallRole.FUSION)
            body = module.by_name.get(called[0]) if len(called) == 1 else None
            numbers = {i for i, name in enumerate(reader.operands) if name == value.name}
            for param in body.instructions if body is not None else ():
                if param.opcode == "parameter" and parameter_number(param) in numbers:
                    out |= _unpack_in(body, param, readers) or _read_from(module, body, param, readers, depth + 1)
    return out


def _unpack_in(body: Computation, param: Instruction, readers: dict) -> set[tuple[str, str]]:
    """From the packed parameter, through broadcasts, widens and views, to an `and` with
    `1 << iota` and on through converts to `pred`: those ops (empty where the chain is other)."""
    names: set[tuple[str, str]] = set()
    inst = param
    for _ in range(8):
        nexts = readers.get((body.name, inst.name), ())
        if len(nexts) != 1:
            return set()
        inst = nexts[0]
        if inst.opcode == "and":
            break
        if inst.opcode not in ("broadcast", "convert", "bitcast", "reshape"):
            return set()
        names.add((body.name, inst.name))
    else:
        return set()
    if inst.opcode != "and" or not any(_is_bit_of_iota(body, name) for name in inst.operands):
        return set()
    names |= {(body.name, inst.name)} | {(body.name, name) for name in inst.operands
                                          if _is_bit_of_iota(body, name)}
    for _ in range(4):
        nexts = readers.get((body.name, inst.name), ())
        if len(nexts) != 1 or nexts[0].opcode not in ("convert", "bitcast", "reshape"):
            return set()
        inst = nexts[0]
        names.add((body.name, inst.name))
        if inst.shape.element_type == "pred":
            return names
    return set()


def _is_bit_of_iota(body: Computation, name: str) -> bool:
    """Is the value `1 << iota` (a shift of a broadcast constant by an iota)?"""
    inst = body.by_name.get(name)
    if inst is None or inst.opcode != "shift-left" or len(inst.operands) != 2:
        return False
    one, amount = (body.by_name.get(operand) for operand in inst.operands)
    while one is not None and one.opcode == "broadcast" and one.operands:
        one = body.by_name.get(one.operands[0])
    return one is not None and one.opcode == "constant" and amount is not None and amount.opcode == "iota"
