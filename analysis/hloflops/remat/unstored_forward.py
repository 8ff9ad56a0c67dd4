"""Forward copies of a value only the recompute stores (after optimization, TPU).

XLA copies a cheap elementwise value into each fusion that reads it only where it need not store
it: a value some reader cannot fuse is stored once, and every reader reads it stored. With
remat, the backward reads the recompute's copy of a checkpointed value, not the forward's, so the
forward may never store it: XLA copies it, and the cheap chain under it, into each forward fusion
that reads it (TPU draw 47, a nested remat conv net: block 0's output `x + (conv + b)` inside the
next block's conv fusion and again inside the fusion adding block 1's output). Where the
recompute's copy is stored (a fusion's output, through converts and views, or unfused: a backward
reader reads it whole), the program without remat's backward reads the forward's value there, so
that forward stores it once, and its other readers read it stored: each forward copy beyond one,
with what only it needs in its fusion, runs because of remat. Not where the value is computed
from parameters and constants alone (an embedding's index `where(i < 0, i + n, i)`): the program
without remat's backward builds such a value itself where it reads it, and its forward copies it
as the program with remat does. How many copies the forward without remat makes rests on how XLA
fused it: the pairing's range keeps the answer without them (`RematIndex.weak`)."""

from __future__ import annotations

from hloflops.remat.fusion_copies import outputs_through
from hloflops.remat.op_kinds import DUPLICATED
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# What hands a fusion's value out as it is (a bf16 store of an f32 sum too).
_HANDS_OUT = frozenset({"tuple", "bitcast", "copy", "reshape", "convert"})
# What hands a stored value on without computing anything from it.
_PASSES_ON = frozenset({"bitcast", "copy", "get-tuple-element", "copy-start", "copy-done", "reshape",
                        "transpose", "broadcast", "convert", "slice"})


def unstored_forward_copies(module: Module, ops: list[SiteOp], classes: list[list[SiteOp]],
                            remat: set[SiteKey]) -> set[SiteKey]:
    """The forward copies (and the cheap chains only they need in their fusions) that run because
    the recompute, not the forward, stores a value (the module docstring); `classes` are the ops
    of equal values, `remat` what the pairing found so far."""
    callers = {callee: (comp, inst) for comp, inst in module.instructions() if inst.opcode == "fusion"
               for callee in inst.called(CallRole.FUSION)}
    if not callers:
        return set()
    outputs: dict[str, frozenset[str]] = {}

    def stored(op: SiteOp) -> bool:
        comp_name = op.key[0]
        caller = callers.get(comp_name)
        if caller is None:
            return True  # unfused
        if caller[0].name in callers:
            return False  # nested in another fusion: never leaves it
        if comp_name not in outputs:
            outputs[comp_name] = outputs_through(module.by_name[comp_name], _HANDS_OUT)
        return op.inst.name in outputs[comp_name]

    out: set[SiteKey] = set()
    by_key: dict[SiteKey, SiteOp] | None = None
    for members in classes:
        if not any(m.marked and m.key in remat and stored(m) for m in members):
            continue
        forward = sorted((m for m in members if not m.marked and phase(m.op_name) == "forward"),
                         key=lambda m: m.order)
        if len(forward) < 2 or len({(m.key[0], m.key[2]) for m in forward}) < len(forward):
            continue  # one copy per fusion: XLA's copies into its readers
        if any(stored(m) for m in forward):
            continue  # the forward stores it: the program without remat reads that
        if not _reads_stored_values(module, forward[0].key[0], forward[0].inst, callers):
            continue
        if by_key is None:
            by_key = {op.key: op for op in ops if op.key[0] in callers}
        for copy in forward[1:]:
            out |= _chain(module.by_name[copy.key[0]], copy, by_key)
    return out


def _chain(comp: Computation, copy: SiteOp, by_key: dict[SiteKey, SiteOp]) -> set[SiteKey]:
    """The copy and the cheap forward ops under it in its fusion that nothing else there reads."""
    users: dict[str, set[str]] = {}
    for inst in comp.instructions:
        for operand in inst.operands:
            users.setdefault(operand, set()).add(inst.name)
    chain = {copy.inst.name}
    pending = list(copy.inst.operands)
    while pending:
        name = pending.pop()
        op = by_key.get((copy.key[0], name, copy.key[2]))
        if name in chain or op is None or op.marked or op.inst.opcode not in DUPLICATED \
                or phase(op.op_name) != "forward" or not users[name] <= chain:
            continue
        chain.add(name)
        pending += op.inst.operands
    return {(copy.key[0], name, copy.key[2]) for name in chain}


def _reads_stored_values(module: Module, comp_name: str, inst: Instruction, callers: dict) -> bool:
    """Is the value computed from anything but parameters and constants (a value some op stored)?"""
    pending = [(comp_name, inst.name)]
    seen: set[tuple[str, str]] = set()
    while pending:
        key = pending.pop()
        if key in seen:
            continue
        seen.add(key)
        comp = module.by_name[key[0]]
        inst = comp.by_name.get(key[1])
        if inst is None:
            return True
        fused = key[0] in callers
        if inst.opcode == "parameter":
            if fused:  # the fusion's operand, in its caller
                outer, fusion = callers[key[0]]
                pending.append((outer.name, fusion.operands[parameter_number(inst)]))
        elif inst.opcode in ("constant", "iota"):
            continue
        elif inst.opcode == "fusion" and fused:  # a nested fusion: what its root computes
            callee = module.by_name[inst.called(CallRole.FUSION)[0]]
            pending.append((callee.name, callee.root.name))
        elif fused or inst.opcode in _PASSES_ON:
            pending += [(key[0], operand) for operand in inst.operands]
        else:
            return True  # an unfused op's or a fusion's stored value
    return False
