"""Recomputes reading a residual an offload policy saves (after optimization; TPU's host memory).

An offload policy (jax's `offload_dot_with_no_batch_dims`) saves a matmul's bare output `x @ w`:
the forward sends it to the host and the backward fetches it back (`copy-start` / `copy-done` to and
from memory space 5). The recompute reads that round trip as an input (hloflops.remat.moved_values),
so nothing it computes from it has the exact value of a forward op, and the rules that ask for one
(a fusion copy's forward twin) find none. Two rules look through the round trip:

* the bias add of the saved matmul output: without remat XLA fuses `x @ w + b` into the matmul's
  output fusion and stores the sum, which the backward reads; with the bare output saved the sum
  is stored nowhere, and every copy the recompute makes of the add (nested in a weight gradient's
  fusion, copied into a gradient fusion) runs because of remat; the forward's own copy stands for
  the program without remat's (TPU draws 4, 9, 25, 51, 55; the same rule as
  hloflops.remat.fusion_copies.saved_matmul_epilogues, whose residual an identity rounding marks);
* a cheap recompute TPU nests inside the fusion of a backward matmul (gelu recomputed in the
  fusion of the next layer's weight gradient) where the forward computes the like ops (opcode,
  shape, name inside the checkpoint, frame) only nested in its own matmuls' fusions: the program
  without remat builds the value there the same way, reading the stored sum: model FLOPs (TPU
  draws 9, 25, 55; hloflops.remat.fusion_copies's `_nested_in_gradient_matmuls` for a recompute
  whose value matches its forward's exactly). A scan's stacked weight's gradient leaves that
  fusion widened to f32 with the stack's unit dimension (`bitcast(convert(dot))`, for the f32
  stack's dynamic-update-slice): still the matmul's output, and the program without remat nests
  gelu in that fusion alike (held-out TPU draw 92: gelu's chain in Dense_1's weight gradient,
  multiply +6,553,600 and out of range before)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.fusion_copies import outermost_fusions
from hloflops.remat.moved_values import HOST_MEMORY_SPACE
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES, shape_key
from hloflops.scopes import phase
from hloflops.remat.sites import SiteKey, SiteOp, bias_add_input, one_call_site, source_op
from hloparse.ir import Instruction, Module

# Ops that hand a value on unchanged, and the two halves of a copy between memory spaces.
_PASSES = frozenset({"bitcast", "reshape", "copy", "transpose", "copy-start", "copy-done"})


def offloaded_matmul_epilogues(module: Module, ops: list[SiteOp]) -> set[SiteKey]:
    """Remat-marked bias adds (an `add` of a broadcast and a matmul's output) whose matmul output
    reaches them through a round trip to the host (see the module's docstring): remat."""
    if not offloads(module):
        return set()
    callers = one_call_site(module)
    by_key = {op.key: op for op in ops}
    found: set[SiteKey] = set()
    for op in ops:
        other = bias_add_input(module, op)
        if other is None:
            continue
        comp = module.by_name[op.key[0]]
        hops: list[Instruction] = []

        def passes(inst: Instruction) -> bool:
            if inst.opcode in _PASSES:
                hops.append(inst)
                return True
            return False

        source = source_op(module, callers, by_key, comp, other.name, op.key[2], passes, 64)
        if source is not None and source.inst.opcode in MATMUL_OPCODES and \
                any(hop.opcode == "copy-start" and _touches_host(hop) for hop in hops):
            found.add(op.key)
    return found


def offloads(module: Module) -> bool:
    """Does the program copy a value to or from the host's memory space?"""
    return any(inst.opcode == "copy-start" and _touches_host(inst) for _, inst in module.instructions())


def _touches_host(inst: Instruction) -> bool:
    """Does a `copy-start` copy to or from the host's memory space?"""
    parts = inst.shape.tuple_shapes if inst.shape.is_tuple else ()
    return any(part.layout is not None and part.layout.memory_space == HOST_MEMORY_SPACE for part in parts[:2])


def nested_offloaded_recomputes(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                                fused: Mapping[str, frozenset[str]]) -> set[SiteKey]:
    """Remat-counted cheap recomputes nested inside a backward matmul's fusion (one handing out a
    matmul's output and no marked value) whose value no unmarked op computes exactly (the offloaded
    residual's round trip; without one, a recompute reading its matmul's output in another precision
    than the forward's fusion does: an f32 output against a bf16 one widened), where every forward
    op of its opcode, shape and frame whose name ends as the recompute's inside its checkpoint is
    nested in a fusion too (see the module's docstring): model FLOPs. Not an expensive op's (a
    recompute of its own: XLA's fusion never copies one), nor a bias add of a matmul's output (the
    program without remat fuses it into its matmul's output fusion and stores the sum, which its
    backward reads: `offloaded_matmul_epilogues`, and `fusion_copies.saved_matmul_epilogues`)."""
    homes = outermost_fusions(module)
    unmarked_values = {op.exact for op in ops if not op.marked}
    twins: dict[tuple, list[SiteOp]] = {}
    for op in ops:
        if not op.marked and op.op_name and phase(op.op_name) == "forward":
            twins.setdefault((op.frame, op.inst.opcode, shape_key(op.inst.shape)), []).append(op)
    by_key = {op.key: op for op in ops}
    callers = one_call_site(module)
    gradient: dict[tuple[str, int], bool] = {}
    found: set[SiteKey] = set()
    unlike: set[SiteKey] = set()  # passing all but the like forward ops (`_whole_copies`)
    for op in ops:
        home = homes.get(op.key[0])
        if home is None or op.key not in remat or not op.marked or op.inst.opcode not in DUPLICATED or \
                op.inst.opcode in EXPENSIVE or op.exact in unmarked_values or not op.op_name:
            continue
        if adds_to_matmul(module, callers, by_key, op):
            continue
        tail = inner_tail(op.op_name)
        # A forward bias add of a matmul's output is that matmul's epilogue, not the like of an add
        # the recompute makes of other values (gelu's `z + 0.044715 z^3`, named `add` alike: draw 100).
        like = [twin for twin in twins.get((op.frame, op.inst.opcode, shape_key(op.inst.shape)), ())
                if ends_with(twin.op_name, tail) and not _matmul_bias_add(module, twin)]
        alike = bool(like) and (all(twin.key[0] in homes for twin in like) or (
            all(twin.key[0] in homes or _kept_inside(module, fused, twin) for twin in like)
            and _reads_stored_values(module, callers, by_key, remat, op)))
        site = (home, op.key[2])
        if site not in gradient:
            keys = [key for key in ((home, name, op.key[2]) for name in fused.get(home, ())) if key in by_key]
            # A stacked weight's gradient leaves its matmul's fusion widened to f32, with the stack's
            # unit dimension (`convert`, `bitcast`: held-out TPU draw 92): still a matmul's output.
            products = [_through_widens(module, by_key, key) for key in keys]
            gradient[site] = bool(keys) and not any(key in remat or by_key[key].marked for key in keys) and \
                any(product is not None and product.key not in remat and not product.marked
                    and product.inst.opcode in MATMUL_OPCODES for product in products)
        if gradient[site]:
            (found if alike else unlike).add(op.key)
    return found | _whole_copies(ops, remat, found, unlike)


def _whole_copies(ops: list[SiteOp], remat: set[SiteKey], found: set[SiteKey],
                  unlike: set[SiteKey]) -> set[SiteKey]:
    """The other recomputes of a nested fused computation where the rule above found some: XLA
    copies a producer's fusion into its reader's whole, so the program without remat nests the
    whole chain alike. The name's like ops cannot tell for an op named only by its primitive at
    the checkpoint's root (gelu's `add` in a Haiku block, whose residual adds `x + attn(x)`, named
    `add` alike, are handed out of fusions of their own: TPU draws 17, 273, 283; 273's gelu
    multiplies model FLOPs, its two adds remat, add +2,048). Each still passed the rule's other
    tests (not a bias add of a matmul's output, whose sum the program without remat stores).
    Only where the pairing counted every cheap recompute of the copy (the whole copy extra by
    value): where its cap on a value class's copies split the copy, the count is the class's, and
    the op it kept is that count's share (held-out TPU 200: gelu's `z + 0.044715 z^3`, add -512
    with it). Not a convert: a widen is what the chain reads, and the program without remat reads
    its stored value in its own precision (TPU 329, unseen 435: a layer norm's widen, convert
    -256 and -32,768 with it)."""
    computations = {key[:1] + key[2:] for key in found}
    split = {op.key[:1] + op.key[2:] for op in ops if op.marked and op.op_name and op.key not in remat
             and op.inst.opcode in DUPLICATED and op.inst.opcode not in EXPENSIVE}
    converts = {op.key for op in ops if op.inst.opcode == "convert"}
    return {key for key in unlike if key[:1] + key[2:] in computations - split and key not in converts}


def _matmul_bias_add(module: Module, op: SiteOp) -> bool:
    """Is the op an `add` of one broadcast and a matmul computed in the same computation (the
    epilogue XLA fuses into the matmul's output fusion)?"""
    if op.inst.opcode != "add" or len(op.inst.operands) != 2:
        return False
    comp = module.by_name[op.key[0]]
    operands = [comp.by_name.get(name) for name in op.inst.operands]
    if any(inst is None for inst in operands) or sum(inst.opcode == "broadcast" for inst in operands) != 1:
        return False
    return any(inst.opcode in MATMUL_OPCODES for inst in operands)


def _reads_stored_values(module: Module, callers, by_key: Mapping[SiteKey, SiteOp], remat: set[SiteKey],
                         op: SiteOp) -> bool:
    """Does the recompute's fused computation read only values no recompute computes (what the
    forward stores, which the program without remat stores alike)? A layer norm's recompute reads
    its recomputed statistics: the program without remat need not rebuild it (held-out TPU 93)."""
    comp = module.by_name[op.key[0]]
    for param in comp.parameters:
        source = source_op(module, callers, by_key, comp, param.name, op.key[2],
                           lambda inst: inst.opcode in _PASSES, 64)
        if source is None and _entry_parameter(module, callers, comp, param.name):
            continue  # the program's input (a weight, a bias): both programs read it
        if source is None or source.key in remat or source.marked:
            return False
    return True


def _entry_parameter(module: Module, callers, comp, name: str) -> bool:
    """Does a fused parameter come, through its call sites, from a parameter of the entry?"""
    inst = comp.by_name.get(name)
    for _ in range(16):
        if inst is None or inst.opcode != "parameter":
            return False
        if comp.name == module.entry.name:
            return True
        caller = callers.get(comp.name)
        if caller is None:
            return False
        comp, inst = caller[0], caller[0].by_name.get(caller[1].operands[int(inst.attributes["parameter_number"])])
    return False


def _kept_inside(module: Module, fused: Mapping[str, frozenset[str]], twin: SiteOp) -> bool:
    """Does a forward op run inside a fusion that hands out nothing computed from it at its own
    shape and precision (a matmul's output fusion with the bias add and gelu, handing out gelu's
    bf16 narrow for the next matmul and the f32 sum for the backward: held-out TPU draw 100)? Then
    no program stores that value, and the one without remat rebuilds it where its backward matmul
    reads it, as the recompute does."""
    outputs = fused.get(twin.key[0])
    if outputs is None:
        return False
    comp = module.by_name[twin.key[0]]
    key = shape_key(twin.inst.shape)
    reached, pending = {twin.key[1]}, [twin.key[1]]
    users: dict[str, list[str]] = {}
    for inst in comp.instructions:
        for operand in inst.operands:
            users.setdefault(operand, []).append(inst.name)
    while pending:
        for user in users.get(pending.pop(), ()):
            if user not in reached:
                reached.add(user)
                pending.append(user)
    return not any(name in reached and comp.by_name[name].opcode != "tuple" and
                   shape_key(comp.by_name[name].shape) == key for name in outputs)


def _through_widens(module: Module, by_key: Mapping[SiteKey, SiteOp], key: SiteKey) -> SiteOp | None:
    """The op a fusion's output is, inside its fused computation, through views and converts (a
    weight gradient handed out widened and reshaped for its stack's update)."""
    comp = module.by_name[key[0]]
    inst = comp.by_name[key[1]]
    while inst.opcode in _WIDENS_AND_VIEWS and inst.operands and inst.operands[0] in comp.by_name:
        inst = comp.by_name[inst.operands[0]]
    return by_key.get((key[0], inst.name, key[2]))


_WIDENS_AND_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose", "convert"})


def adds_to_matmul(module: Module, callers, by_key: Mapping[SiteKey, SiteOp], op: SiteOp) -> bool:
    """Is the op a bias add of a matmul's output: computed in another fusion, or a residual read
    back from a loop's state (a policy's saved `x @ w`), through views, slices and round trips
    between memories? Where the walk cannot tell (a fusion of several call sites), yes: the rule
    above then keeps the pairing's answer."""
    other = bias_add_input(module, op)
    if other is None:
        return False
    source = source_op(module, callers, by_key, module.by_name[op.key[0]], other.name, op.key[2],
                       lambda inst: inst.opcode in _PASSES or inst.opcode in _SLICES, 64)
    return source is None or source.inst.opcode in MATMUL_OPCODES


_SLICES = frozenset({"dynamic-slice", "slice"})
