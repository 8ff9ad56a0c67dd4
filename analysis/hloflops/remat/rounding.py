"""jax's marker on a residual that a checkpoint policy saves (`dots_saveable`,
`save_only_these_names`, ...): a reduce-precision that rounds nothing, put there to keep XLA from
moving the saved value into the backward pass. It runs because of remat (the program without
remat has none), though it recomputes nothing: remat FLOPs by the definition (the difference to
that program). Only looked for in a module with remat markers (`find_remat` returns earlier in
one without)."""

from __future__ import annotations

from typing import Iterable

from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number
from hloflops.remat.stack_readers import stack_readers
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, OWN_BITS, is_identity_rounding, rounding_bits
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site


def widened_roundings(module: Module, ops: Iterable[tuple[SiteKey, Instruction]]) -> set[SiteKey]:
    """The marker on a bfloat16 residual after XLA's float normalization (CPU): the value is
    widened to f32 (`convert(convert(x, bf16), f32)`) and rounded to bfloat16's bits, which rounds
    nothing. The rounding and the round trip into f32 that feeds it run only because of the
    marker: remat FLOPs (the program without remat narrows the value to bfloat16 once, the convert
    that follows the rounding; seed 126 of the generator: convert -1,536, reduce-precision -768
    before this rule). The round trip may end the fusion that hands the rounding its operand
    (`_round_trip_of`): a CPU library fusion computing a matmul and narrowing and widening its
    result, the rounding alone in the next fusion; it runs there only for the rounding too."""
    found: set[SiteKey] = set()
    callers = one_call_site(module)
    for (comp_name, name, site), inst in ops:
        if inst.opcode != "reduce-precision" or not inst.operands:
            continue
        comp = module.by_name[comp_name]
        trip = _round_trip_of(module, comp, comp.by_name.get(inst.operands[0]), callers)
        if trip is None:
            continue
        home, widen, narrow = trip
        if OWN_BITS.get(narrow.shape.element_type) != rounding_bits(inst):
            continue
        found |= {(comp_name, name, site), (home, widen.name, site)}
        if narrow.opcode == "convert":
            found.add((home, narrow.name, site))
    return found


def _round_trip_of(module: Module, comp: Computation, operand: Instruction | None,
                   callers: dict[str, tuple[Computation, Instruction] | None]
                   ) -> tuple[str, Instruction, Instruction] | None:
    """The widen into f32 of a rounding's operand and what it widens (the narrowed value), with
    the computation holding them: the operand itself, or, where the operand is a parameter of the
    rounding's fusion read by nothing else, the root of the fusion its call site reads there and
    nothing else reads (a library fusion's `convert(convert(dot, bf16), f32)`: more seed 17, the
    attention's `bhqk,bkhd->bqhd` under `dots_saveable`, convert -1,048,576 and reduce-precision
    -524,288 before)."""
    if operand is not None and operand.opcode == "parameter" and callers.get(comp.name) is not None:
        if len(comp.users.get(operand.name, ())) != 1:
            return None
        outer_comp, call = callers[comp.name]
        number = parameter_number(operand)
        producer = outer_comp.by_name.get(call.operands[number]) if number < len(call.operands) else None
        callee = producer.called(CallRole.FUSION) if producer is not None and producer.opcode == "fusion" else ()
        if not callee or len(outer_comp.users.get(producer.name, ())) != 1 or call.operands.count(producer.name) != 1:
            return None
        comp = module.by_name[callee[0]]
        operand = comp.root
    if operand is None or operand.opcode != "convert" or not operand.operands:
        return None
    narrow = comp.by_name.get(operand.operands[0])
    return None if narrow is None else (comp.name, operand, narrow)


class LoopFusions:
    """What the rules on a loop body's saving fusions look up: the ops of each fused computation
    called from a loop body (per call site), each value's sites, ops by key, the forward's
    unmarked named ops of loop bodies by opcode, and each fused computation's caller."""

    def __init__(self, module: Module, ops: list[SiteOp]) -> None:
        entry = module.entry.name
        self.comps: dict[tuple[str, int], list[SiteOp]] = {}
        self.values: dict[object, set[tuple[str, int]]] = {}
        for op in ops:
            self.values.setdefault(op.exact, set()).add((op.key[0], op.key[2]))
            if op.frame != entry and op.frame != op.key[0]:
                self.comps.setdefault((op.key[0], op.key[2]), []).append(op)
        self.by_key = {op.key[:2]: op for op in ops}
        self.forward: dict[str, list[SiteOp]] = {}  # unmarked ops of a loop body, by opcode
        for op in ops:
            if not op.marked and op.op_name and op.frame != entry:
                self.forward.setdefault(op.inst.opcode, []).append(op)
        self.callers = {callee: (comp.name, inst.name) for comp, inst in module.instructions()
                        if inst.opcode == "fusion" for callee in inst.called(CallRole.FUSION)}


def copied_into_saves(module: Module, ops: list[SiteOp], remat: set[SiteKey]
                      ) -> tuple[set[SiteKey], set[SiteKey]]:
    """Forward ops XLA copied into the fusion that stores a policy's saved residual into a loop's
    stack (a fusion of a loop body holding a dynamic-update-slice and the residual's identity
    rounding): the cheap unmarked ops under the rounding whose value the forward computes in
    another fusion too. The program with remat makes that copy because the policy saves this value;
    the program without remat saves the linearization's residuals, this value only where its
    backward reads it itself (gelu's `h`, not tanh's). Where the other loops read the stored value
    only in the recompute (remat-named ops: tanh's `h` feeds only the recomputed tanh, whose
    derivative `1 - t * t` reads `t`; base seed 110, `tanh(x @ w + b)` under
    `save_only_these_names`, the bias add copied into the saving fusion, +40,960 add), the program
    without remat saves `t` and never copies `h` into a saving fusion: the copy is remat, sure.
    Only a recompute of the forward counts so (an op of its opcode and inner name in another loop
    body): jvp's own ops are named in the recompute too, and the program without remat saves what
    they read (relu's `h > 0`, held-out more seed 209: its forward has no such compare).
    Elsewhere whether it does is its fusion's business: unsure, not counted. Returns the copies
    unsure and those counted."""
    fusions = LoopFusions(module, ops)
    comps, values, by_key, forward, callers = (fusions.comps, fusions.values, fusions.by_key, fusions.forward,
                                               fusions.callers)
    found: set[SiteKey] = set()
    counted: set[SiteKey] = set()
    for (comp_name, site), members in comps.items():
        comp = module.by_name[comp_name]
        roundings = [i for i in comp.instructions if is_identity_rounding(i)]
        if not roundings or not any(i.opcode == "dynamic-update-slice" for i in comp.instructions):
            continue
        readers = stack_readers(module, *callers[comp_name]) if comp_name in callers else None
        recompute_only = bool(readers) and all(recomputes_forward(by_key.get((c, i.name)), forward)
                                               for c, i in readers)
        under = computed_from(comp, [o for r in roundings for o in r.operands])
        copies = {op.key for op in members if op.inst.name in under and not op.marked and op.key not in remat
                  and op.inst.opcode in DUPLICATED and op.inst.opcode not in EXPENSIVE
                  and len(values[op.exact]) > 1}
        if recompute_only:
            counted |= copies
        else:
            found |= copies
    return found, counted


def computed_from(comp: Computation, names: list[str]) -> set[str]:
    """The ops of `comp` named in `names` and every op of `comp` they are computed from."""
    under: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in under or name not in comp.by_name:
            continue
        under.add(name)
        pending += comp.by_name[name].operands
    return under


def recomputes_forward(op: SiteOp | None, forward: dict[str, list[SiteOp]]) -> bool:
    """Is `op` a remat-named recompute of a forward op (one of its opcode and inner name in another
    loop body), not jvp's own work named in the recompute?"""
    if op is None or not op.named or not op.op_name:
        return False
    tail = inner_tail(op.op_name)
    return any(twin.frame != op.frame and ends_with(twin.op_name, tail) for twin in forward.get(op.inst.opcode, ()))
