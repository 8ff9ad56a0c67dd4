"""Remat-named copies inside fusions. XLA's instruction fusion copies a cheap op into each fusion
that reads it, in the program with remat as in the one without, so a remat-named copy inside a
fusion is recompute only where that fusion's output is (hloflops.remat.pairing calls
`fusion_copies` after pairing by value and by signature)."""

from __future__ import annotations

from collections import Counter
from types import MappingProxyType
from typing import Iterator, Mapping
from weakref import WeakKeyDictionary

from hloflops.remat.expensive_chains import mirrored_chains
from hloflops.remat.inputs import COLLECTIVES
from hloflops.cost.rules import TRANSCENDENTAL_OPCODES
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES, is_identity_rounding, unit_free_shape
from hloflops.remat.linearization_copies import (
    coefficient_counts_passed_on, copies_in, linearization_coefficients, only_linearization_outputs)
from hloflops.remat.mixed_gradient_fusions import gradient_side_outputs, gradient_sides
from hloflops.remat.names import ends_with, inner_tail
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Module, parameter_number
from hloflops.remat.sites import Key, SiteKey, SiteOp, bias_add_input
from hloflops.remat.stored_matmul_operands import stored_operand_hinges
from hloflops.remat.recomputed_matmul_nests import recomputed_matmul_nests
from hloflops.remat.saved_matmul_outputs import fusion_output, only_output_derivatives


def fusion_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey], model: set[SiteKey],
                   sizes: Counter | None = None, by_value: set[SiteKey] = frozenset(),
                   own: set[SiteKey] = frozenset(), forward_valued: set[SiteKey] = frozenset()
                   ) -> tuple[set[SiteKey], set[SiteKey], set[SiteKey], set[SiteKey], set[SiteKey]]:
    """After optimization XLA copies a cheap elementwise op into every fusion that consumes it,
    with remat as without: a remat-named copy inside a fusion that computes a gradient (a
    fusion the program without remat has too) runs there in both programs, so it is not
    recompute, even where the forward's own copy is elsewhere. A copy runs because of remat
    exactly where the fusion it is copied into does: where the fusion's output is recompute
    (`remat`), not where its outputs are unmarked or the model's first computation of their
    value (`model`). Where an output is remat-named but paired with nothing (XLA reshaped the
    recompute differently from its forward), the copy keeps its own pairing's answer; so do
    the fusion's outputs themselves and unfused ops. A forward op (not marked) that XLA copied
    into a fusion computing a recompute runs there because of remat too (an embedding lookup
    fused into the recompute of the first layer norm), where the program computes its value
    elsewhere as well. In a backward loop whose forward runs in another loop body, the program
    without remat's gradient fusion reads the value stored instead (`_ReadStored`): such a copy
    is unsure. A marked copy `_same_value` counted against its forward's copies keeps that
    answer, but in a fusion computing a recompute where the forward reads the value stored
    (`_stored_by_the_forward`). A forward op copied into the recompute of a value the forward
    computes inside a library fusion stands in for the copy the program without remat makes
    (`_forward_in_library`): model FLOPs, unsure. So is a recompute's copy in a gradient fusion of
    a backward loop body (`backward_loop_bodies`), whose twin reads stored residuals and copies
    no forward op there (on TPU, hloflops.remat.backward_loop_copies counts those copies after);
    but a copy of the linearization's own coefficient, which no forward op computes, keeps its
    pairing: the twin computes it once, saving it (hloflops.remat.linearization_copies). A recompute
    TPU nests in a weight gradient's fusion is model FLOPs where
    the forward nests it too (`_nested_in_gradient_matmuls`), but for the bias add of a saved
    matmul output, which the program without remat stores (`saved_matmul_epilogues`). A
    transcendental XLA duplicated (`duplicated_expensive`: TPU copies gelu's tanh into each
    gradient fusion, in both programs) is a copy like a cheap op, and so is the chain under it,
    model FLOPs in a gradient fusion, unsure; where the copy `_same_value` counted was such a
    gradient fusion's, a sibling copy whose fusion computes a recompute takes its count
    (`_counts_passed_on`). A fusion whose outputs are only the linearization's
    own work jax named in the recompute (`own`, `by_signature.linearization_only`: softmax's
    `1 / (s * s)`) is one the program without remat has too, reading its forward's value: its
    copies (float normalization's widen of the recomputed `s`) are model FLOPs, and the expensive
    op of that work (the divide) no recompute whose cheap inputs follow it; a copy `_same_value`
    counted there passes its count to a sibling (`coefficient_counts_passed_on`). Returns the
    recompute, the copies this rule decided (either way), those of them it decided on how XLA fused
    the program without remat, the siblings that took a count by value, and the gradient sides of
    fusions that also hand out a recomputed matmul's output (`gradient_sides`,
    hloflops.remat.mixed_gradient_fusions: copies there as in a gradient fusion)."""
    fused = fused_outputs(module)
    if not fused:
        return remat, set(), set(), set(), set()
    by_key = {op.key: op for op in ops if op.key[0] in fused}
    duplicated = duplicated_expensive(ops, fused)
    # (the linearization's own expensive op is no recompute: what it reads there is a plain copy)
    feeds_expensive = feeding_marked_expensive(
        module, fused, {op.key[:2] for op in by_key.values() if op.marked and op.key not in own} - duplicated)
    under_duplicated = duplicated | feeding_marked_expensive(module, fused, duplicated)
    mirrored = mirrored_chains(module, by_key, remat)
    decided: dict[tuple[str, int], bool | None] = {}  # (fusion, site) -> do its copies run because of remat?
    twins = _forward_twins(ops, fused, by_key)
    stored = _stored_by_the_forward(ops, twins)
    in_library = _forward_in_library(module, twins)
    saved = _saved_residuals(ops)
    read_stored = _ReadStored(module, ops)
    backward_loops = backward_loop_bodies(module, ops)
    # (not a value the forward computes with a unit dimension less: hloflops.remat.unit_dimension_forwards)
    coefficients, derived = linearization_coefficients(ops, model - forward_valued)
    # a gradient fusion handing out a recomputed matmul's output too: its gradient's own ops are a
    # gradient fusion's copies (hloflops.remat.mixed_gradient_fusions)
    mixed = gradient_sides(module, fused, by_key, remat, _Gradient(fused, by_key), backward_loops)
    out = set(remat)
    decided_copies: set[SiteKey] = set()
    dropped: dict[tuple, int] = {}  # (frame, value) -> its counted copies dropped in linearization-only fusions
    stand_ins: set[SiteKey] = set()
    for op in ops:
        comp_name, site = op.key[0], op.key[2]
        outputs = fused.get(comp_name)
        if outputs is None or op.inst.name in outputs or op.inst.opcode not in DUPLICATED:
            continue
        if (comp_name, site) not in decided:
            keys = [key for key in ((comp_name, name, site) for name in outputs) if key in by_key]
            # TPU's async collective fusion runs a collective beside unrelated elementwise work so the
            # two overlap: a weight's all-gather for a recompute's matmul says nothing of the copies
            # computed beside it; the fusion's other outputs decide them (TPU draw 147, fsdp).
            computed = [key for key in keys if by_key[key].inst.opcode not in COLLECTIVES]
            keys = computed or keys
            if any(key in remat for key in keys):
                decided[(comp_name, site)] = True
            elif all(not by_key[key].marked or key in model or key in own for key in keys):
                decided[(comp_name, site)] = False
            else:
                decided[(comp_name, site)] = None
        runs = decided[(comp_name, site)] and op.inst.name not in mixed.get((comp_name, site), ())
        if runs is None:
            continue
        if runs is False and op.marked and op.key in remat and op.key in by_value and \
                only_linearization_outputs(comp_name, site, outputs, by_key, own):
            out.discard(op.key)  # the copy the program without remat's forward makes for the coefficient
            decided_copies.add(op.key)
            dropped[(op.frame, op.exact)] = dropped.get((op.frame, op.exact), 0) + 1
            continue
        if op.key in by_value and (runs or not _computes_gradient(comp_name, site, outputs, by_key)) and \
                not (runs and op.marked and op.exact in stored.get((comp_name, site), ())):
            continue  # decided against its forward's copies (`_same_value`)
        if op.inst.opcode in EXPENSIVE and op.key[:2] not in duplicated:
            # never XLA's duplicate: recompute with its fusion, else as paired
            if runs and op.marked:
                out.add(op.key)
                decided_copies.add(op.key)
        elif op.key[:2] in feeds_expensive:  # read by an expensive recompute: as paired (but `mirrored`, below)
            continue
        elif runs and op.marked and (sizes is None or sizes[op.exact] > 1 or op.key in remat):
            out.add(op.key)  # a copy of a recompute (its value is computed elsewhere too)
            decided_copies.add(op.key)
        elif runs and op.marked:
            continue  # the only op computing its value: no copy, the linearization's own, as paired
        elif runs and not op.marked:
            if op.op_name and phase(op.op_name) == "forward" and sizes is not None and sizes[op.exact] > 1:
                if (comp_name, site) in in_library and op.exact not in saved:
                    stand_ins.add(op.key)  # the copy the program without remat makes in its forward
                else:
                    out.add(op.key)  # a forward value XLA copied into the recompute's fusion (an embedding lookup)
                decided_copies.add(op.key)
        elif op.marked and op.key in remat and op.frame in backward_loops and op.exact in coefficients:
            continue  # the linearization's own, saved once by the program without remat: as paired
        elif op.marked and op.key in remat and op.frame in backward_loops:
            # A recompute's copy in a gradient fusion of a backward loop body: the program without
            # remat reads its forward's stored residuals there and copies no forward op into it;
            # whether the copy is one more than that program's forward makes (a residual it saved
            # downstream, gelu's `0.5 * (1 + tanh)`, whose `1 + tanh` only the recompute runs
            # again) rests on how XLA fused its forward: unsure, the pairing's count left out.
            out.discard(op.key)
            stand_ins.add(op.key)
        else:
            out.discard(op.key)  # a cheap copy: the program without remat has it too
            # under a duplicated transcendental: as many copies as the program without remat makes
            # of its forward's, which rests on how XLA fused it (unsure)
            (stand_ins if op.key[:2] in under_duplicated else decided_copies).add(op.key)
            if op.marked and read_stored(op):
                read_stored.copies.setdefault((op.frame, op.exact), []).append(op)
    handed, passed = gradient_side_outputs(module, mixed, fused, by_key, remat, out, by_value, decided)
    out = (out - handed) | passed
    decided_copies |= handed | passed
    # the values computed from a coefficient: the program without remat computes each once, saving it
    for copies in copies_in(ops, derived, backward_loops).values():
        first, *others = sorted(copies, key=lambda o: o.order)
        out.discard(first.key)
        out.update(o.key for o in others)
        decided_copies.update(o.key for o in copies)
        stand_ins.difference_update(o.key for o in copies)
    out |= _counts_passed_on(by_key, remat, out, by_value, duplicated, decided)
    moved = coefficient_counts_passed_on(ops, fused, by_key, own, out, decided_copies, dropped)
    out |= moved
    decided_copies |= moved
    # A forward op the expensive recompute reads, that its forward twin's fusion computes for the
    # twin too, is the recompute's copy of it, as long as the recompute's copies of its value
    # number fewer than the forward fusions' (each forward copy is recomputed once: gelu's bias
    # add, in the forward's one fusion, copied into the recompute's tanh fusion and into its
    # product's fusion, is recomputed once, in the product's; a layer norm's mean, in the forward's
    # rsqrt and normalizing fusions, twice).
    if mirrored:
        counted = Counter(by_key[key].exact for key in out if key in by_key)
        in_forward = Counter(op.exact for op in by_key.values() if not op.marked and op.key not in out
                             and _computes_forward(op.key[0], op.key[2], fused[op.key[0]], by_key))
        for key in sorted(mirrored):
            value = by_key[key].exact
            if counted[value] < in_forward[value]:
                counted[value] += 1
                out.add(key)
                decided_copies.add(key)
    nested = _nested_in_gradient_matmuls(module, ops, fused, by_key, out, model, duplicated)
    # the twin may store such a value once for all its matmuls (hloflops.remat.stored_matmul_operands)
    stand_ins |= stored_operand_hinges(module, ops, outermost_fusions(module), nested)
    stand_ins |= recomputed_matmul_nests(module, ops, nested, out)  # nested in a recomputed matmul: unsure
    epilogues = saved_matmul_epilogues(module, ops)
    gradient_side = {key for key in by_key if key[1] in mixed.get((key[0], key[2]), ())}
    return (out - nested) | epilogues, decided_copies | nested | epilogues, \
        stand_ins | read_stored.copied_more_than_once(), moved - nested, gradient_side


def _counts_passed_on(by_key: Mapping[SiteKey, SiteOp], remat: set[SiteKey], out: set[SiteKey],
                      by_value: set[SiteKey], duplicated: set[Key],
                      decided: Mapping[tuple[str, int], bool | None]) -> set[SiteKey]:
    """The copies of a duplicated transcendental that take the count of the ones dropped above.
    `_same_value` caps a value's recompute copies at its forward's count, picking which by order;
    that cap says how many copies are recompute, not which. Where the copy it picked sits in a
    fusion whose outputs are not recompute (a gradient fusion, into which XLA copies the forward's
    value in the program without remat too), that copy was dropped as the program without remat's;
    the recompute's copy is then a sibling (same value, same name, same call site) in a fusion
    whose outputs are recompute, left uncounted by the cap (TPU draw 7: tanh copied into the input
    gradient's and the weight gradient's fusions of each layer; the first by order is the input
    gradient's for two of three layers). One sibling takes each dropped copy's count."""
    dropped: dict[tuple, int] = {}
    for key, op in by_key.items():
        if op.marked and key[:2] in duplicated and key in by_value and key in remat and key not in out:
            group = (op.exact, op.op_name, op.frame, key[2])
            dropped[group] = dropped.get(group, 0) + 1
    passed: set[SiteKey] = set()
    if not dropped:
        return passed
    for key, op in sorted(by_key.items(), key=lambda item: item[1].order):
        group = (op.exact, op.op_name, op.frame, key[2])
        if dropped.get(group) and op.marked and key[:2] in duplicated and key not in remat and \
                key not in out and decided.get((key[0], key[2])) is True:
            passed.add(key)
            dropped[group] -= 1
    return passed


def backward_loop_bodies(module: Module, ops: list[SiteOp]) -> set[str]:
    """The loop bodies (frames other than ENTRY) that run no forward op: a scan's backward loop,
    which reads what its forward loop saved and computes nothing of the forward but recomputes."""
    entry = module.entry.name
    frames = {op.frame for op in ops if op.frame != entry}
    forward = {op.frame for op in ops if not op.marked and op.op_name and phase(op.op_name) == "forward"}
    return frames - forward


def _forward_twins(ops: list[SiteOp], fused: Mapping[str, frozenset[str]], by_key: Mapping[SiteKey, SiteOp]
                   ) -> dict[tuple[str, int], list[SiteOp]]:
    """For each fusion with marked outputs, the forward twins of those outputs (unmarked ops of an
    equal value), where there are some and all of them are fused."""
    unmarked: dict[object, list[SiteOp]] = {}
    for op in ops:
        if not op.marked:
            unmarked.setdefault(op.exact, []).append(op)
    out: dict[tuple[str, int], list[SiteOp]] = {}
    for op in by_key.values():
        if op.marked and op.inst.name in fused[op.key[0]]:
            out.setdefault((op.key[0], op.key[2]), []).extend(unmarked.get(op.exact, ()))
    return {key: twins for key, twins in out.items() if twins and all(twin.key[0] in fused for twin in twins)}


def _stored_by_the_forward(ops: list[SiteOp], twins: Mapping[tuple[str, int], list[SiteOp]]
                           ) -> dict[tuple[str, int], frozenset]:
    """For each fusion whose outputs have forward twins (`_forward_twins`), the values it computes
    inside that no fusion of those twins computes: the forward reads them stored, so the program
    without remat copies none of them there, and a recompute's copy of one is no stand-in for a
    forward copy (`_same_value` counts a value's recompute copies against its forward's). Seed
    109 of the `more` family, a nested remat: the outer recompute of block_1's output computes
    block_0's output again inside it, where the forward's fusion of block_1's output reads
    block_0's stored output."""
    values: dict[tuple[str, int], set] = {}
    for op in ops:
        values.setdefault((op.key[0], op.key[2]), set()).add(op.exact)
    return {key: frozenset(values[key] - set().union(*(values[(t.key[0], t.key[2])] for t in found)))
            for key, found in twins.items()}


def _forward_in_library(module: Module, twins: Mapping[tuple[str, int], list[SiteOp]]) -> set[tuple[str, int]]:
    """The fusions whose outputs' forward twins all run inside a library fusion (a CPU `__ynn_fusion`
    or other custom fusion, not XLA's loop fusion). A library fusion reads its cheap producers
    stored instead of copying them, and XLA builds one around a run of forward layers only where
    nothing else reads the values inside: under remat, whose backward recomputes them. The program
    without remat reads them in its backward, computes them in loop fusions of their own, and
    copies a cheap forward producer into those as the recompute's fusion does (seeds 39 and 83 of
    the `more` family, a nested remat of `nothing_saveable`: the stem's bias add, copied into the
    outer recompute of block_0's output, is copied into the forward's block_0 output without
    remat). That rests on how XLA fused the program without remat: unsure."""
    library = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
               and inst.attributes.get("kind") == "kCustom" for callee in inst.called(CallRole.FUSION)}
    return {key for key, found in twins.items() if all(twin.key[0] in library for twin in found)}


def _saved_residuals(ops: list[SiteOp]) -> set:
    """The values a remat policy saves (read by an identity rounding, jax's marker on a saved
    residual). The program with remat stores such a value for its backward where the program
    without remat copies it into its forward's fusions: that store is the extra computation, and
    the recompute's copy of the value counts in its place (seed 0 of `base`: an MLP's saved
    pre-activation `x @ w + b`, stored beside a library fusion of the forward's tail)."""
    exact = {op.key: op.exact for op in ops}
    return {exact.get((op.key[0], op.inst.operands[0], op.key[2])) for op in ops
            if op.inst.operands and is_identity_rounding(op.inst)} - {None}


def _nested_in_gradient_matmuls(module: Module, ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                                by_key: Mapping[SiteKey, SiteOp], remat: set[SiteKey], model: set[SiteKey],
                                duplicated: set[Key]) -> set[SiteKey]:
    """Cheap recomputes that TPU nested, as a loop fusion, inside the output fusion of a matmul of
    the backward (a gelu recomputed inside the fusion of a weight's gradient), where the forward
    too computes the value only nested inside its matmuls' fusions, never materialized: the
    program without remat cannot read a forward value there, and builds it inside its gradient's
    fusion the same way. Model FLOPs (TPU seed 0: a whole-model checkpoint), the ops under a
    transcendental of the chain too (gelu's `x * x * x` under its tanh): TPU nests the whole gelu,
    tanh and all, in the program without remat as in the one with it; the premise that XLA never
    duplicates an expensive op (`feeding_marked_expensive`) is its fusion pass's, not its nesting
    of a matmul's producers. A bias add of a saved matmul output is not such a chain
    (`saved_matmul_epilogues`)."""
    homes = outermost_fusions(module)
    if not homes:
        return set()
    forward_nested: dict[object, bool] = {}  # value -> computed by the forward only inside nested fusions
    for op in ops:
        if not op.marked:
            forward_nested[op.exact] = forward_nested.get(op.exact, True) and op.key[0] in homes
    gradient: dict[tuple[str, int], bool] = {}
    found: set[SiteKey] = set()
    for op in ops:
        home = homes.get(op.key[0])
        if home is None or op.key not in remat or op.inst.opcode not in DUPLICATED or \
                (op.inst.opcode in EXPENSIVE and op.key[:2] not in duplicated) or not forward_nested.get(op.exact):
            continue
        site = (home, op.key[2])
        if site not in gradient:
            keys = [key for key in ((home, name, op.key[2]) for name in fused.get(home, ())) if key in by_key]
            gradient[site] = bool(keys) and not any(key in remat for key in keys) and \
                all(not by_key[key].marked or key in model for key in keys) and \
                any(by_key[key].inst.opcode in MATMUL_OPCODES for key in keys)
        if gradient[site]:
            found.add(op.key)
    return found


def outermost_fusions(module: Module) -> dict[str, str]:
    """Fused computations called from inside another fused computation, each with the outermost
    one around it (TPU nests a matmul's elementwise producers inside the matmul's fusion)."""
    caller: dict[str, str] = {}
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                caller[callee] = comp.name
    homes: dict[str, str] = {}
    for name in caller:
        home, seen = name, {name}
        while caller[home] in caller and caller[home] not in seen:  # called from a fused computation
            home = caller[home]
            seen.add(home)
        if home != name:
            homes[name] = home
    return homes


def _computes_forward(comp_name: str, site: int, outputs: frozenset[str], by_key: Mapping[SiteKey, SiteOp]) -> bool:
    """Does the fusion hand out a value of the forward's own (an output named in the forward
    pass, not remat-named)? An output XLA added without a name (float normalization's round trip
    of a bf16 value through f32, handed out to a matmul) is the value it converts (more 50: a layer
    norm's output, whose fusion copies the mean as the recompute's does)."""
    return any(not op.marked and phase(op.op_name) == "forward"
               for op in _named_outputs(comp_name, site, outputs, by_key))


def _computes_gradient(comp_name: str, site: int, outputs: frozenset[str], by_key: Mapping[SiteKey, SiteOp]) -> bool:
    """Does the fusion hand out a value of the backward's own (an output named in the backward
    pass, not remat-named)? Its cheap copies of a forward value run in the program without remat
    too: there the same gradient fusion copies the forward's op (seed 31: the bias add under
    relu's mask, in the mask's gradient fusion). An output XLA added without a name (the bf16
    convert of a gradient) is the arithmetic it converts, read through other unnamed converts
    (TPU draw 48: gelu's gradient fusion, copying gelu, tanh and all, hands out its sum converted
    to bf16); one converting a backward relayout of a recompute (a conv kernel's reverse, `more`
    draw 30) or nothing named tells nothing."""
    return any(not op.marked and phase(op.op_name) == "backward"
               and (op.inst.name in outputs or op.inst.opcode in DUPLICATED)
               for op in _named_outputs(comp_name, site, outputs, by_key))


class _Gradient:
    """`_computes_gradient` per (fusion, call site), asked lazily."""

    def __init__(self, fused: Mapping[str, frozenset[str]], by_key: Mapping[SiteKey, SiteOp]):
        self.fused, self.by_key = fused, by_key

    def get(self, site: tuple[str, int]) -> bool:
        return _computes_gradient(site[0], site[1], self.fused[site[0]], self.by_key)


def _named_outputs(comp_name: str, site: int, outputs: frozenset[str],
                   by_key: Mapping[SiteKey, SiteOp]) -> Iterator[SiteOp]:
    """The fusion's named outputs, and the named ops its unnamed converting outputs convert
    (through other unnamed converts)."""
    pending, seen = list(outputs), set(outputs)
    while pending:
        op = by_key.get((comp_name, pending.pop(), site))
        if op is None:
            continue
        if op.op_name:
            yield op
        elif op.inst.opcode == "convert":
            fresh = [name for name in op.inst.operands if name not in seen]
            seen.update(fresh)
            pending += fresh


def feeding_marked_expensive(module: Module, fused: Mapping[str, frozenset[str]], marked: set[Key]) -> set[Key]:
    """The ops of fused computations that a remat-marked expensive op of the same fusion reads,
    directly or through other ops: a chain XLA's fusion would not have duplicated by itself."""
    found: set[Key] = set()
    for name in fused:
        comp = module.by_name.get(name)
        if comp is None:
            continue
        pending = [inst.name for inst in comp.instructions
                   if inst.opcode in EXPENSIVE and (name, inst.name) in marked]
        while pending:
            inst = comp.by_name[pending.pop()]
            for operand in inst.operands:
                if operand in comp.by_name and (name, operand) not in found:
                    found.add((name, operand))
                    pending.append(operand)
    return found


# Ops that hand on their operand's elements unchanged: a fusion's output through them is the operand.
_LOOKS_THROUGH = frozenset({"bitcast", "copy", "reshape", "transpose", "broadcast"})


def outputs_through(comp: Computation, through: frozenset[str]) -> frozenset[str]:
    """The ops of a fused computation whose values leave it: its root and, below the ops in
    `through` (a tuple, views; each rule says which it looks past), their operands."""
    pending, found = [comp.root.name], set()
    while pending:
        inst = comp.by_name[pending.pop()]
        found.add(inst.name)
        if inst.opcode in through:
            pending += [o for o in inst.operands if o in comp.by_name and o not in found]
    return frozenset(found)


def fused_outputs(module: Module) -> Mapping[str, frozenset[str]]:
    """Each fused computation's outputs: the ops whose values leave it (the root, a tuple
    root's elements, through reshapes and copies). Several rules ask for it on one module, so it
    is computed once per module and handed out read-only."""
    found = _FUSED_OUTPUTS.get(module)
    if found is None:
        found = _FUSED_OUTPUTS[module] = MappingProxyType(_fused_outputs(module))
    return found


# Keyed by the module object itself (Module compares by identity), dropped with the module.
_FUSED_OUTPUTS: WeakKeyDictionary[Module, Mapping[str, frozenset[str]]] = WeakKeyDictionary()


def _fused_outputs(module: Module) -> dict[str, frozenset[str]]:
    names = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
             for callee in inst.called(CallRole.FUSION)}
    out: dict[str, frozenset[str]] = {}
    for name in names:
        comp = module.by_name.get(name)
        if comp is None or not comp.instructions:
            continue
        out[name] = outputs_through(comp, _LOOKS_THROUGH | {"tuple"})
    return out


class _ReadStored:
    """Is a recompute's copy in a gradient fusion one the program without remat may not make? In a
    backward loop whose forward runs in another loop body (a scan's), the program without remat's
    backward reads each residual as its forward loop stored it: its gradient fusions copy none of
    the forward's cheap ops, where the program with remat copies the recompute's into each gradient
    fusion reading them (base seeds 131 and 135, a layer norm's `x - mean` copied into four gradient
    fusions of the backward loop, against one fusion saving it without remat). How many such copies
    the program without remat's saving fusions offset rests on its fusion: unsure, not counted."""

    def __init__(self, module: Module, ops: list[SiteOp]) -> None:
        self.entry = module.entry.name
        self.copies: dict[tuple[str, object], list[SiteOp]] = {}  # (frame, value) -> its gradient copies
        self.unmarked = {(op.frame, op.exact) for op in ops if not op.marked}
        self.forward: dict[str, list[SiteOp]] = {}
        for op in ops:
            if not op.marked and op.op_name and op.frame != self.entry:
                self.forward.setdefault(op.inst.opcode, []).append(op)

    def __call__(self, op: SiteOp) -> bool:
        if op.frame == self.entry or (op.frame, op.exact) in self.unmarked or not op.op_name:
            return False
        tail = inner_tail(op.op_name)
        return any(twin.frame != op.frame and ends_with(twin.op_name, tail)
                   for twin in self.forward.get(op.inst.opcode, ()))

    def copied_more_than_once(self) -> set[SiteKey]:
        """The copies of a value the gradient fusions copy more than once: once is what the
        program without remat does too, in the fusion saving the residual (seed 000, silu's bias
        add `h`, copied into one gradient fusion and saved once: the split is sure)."""
        return {op.key for found in self.copies.values() if len(found) > 1 for op in found}


def saved_matmul_epilogues(module: Module, ops: list[SiteOp]) -> set[SiteKey]:
    """Remat-marked copies of a bias add (an `add` of a matmul's output and a broadcast) whose
    matmul output is a residual the policy saves (the matmul's fusion hands it out through an
    identity rounding, jax's marker). Without remat XLA fuses the bias add into the matmul's own
    output fusion (TPU's `convolution_add_fusion`) and stores the sum, which its backward reads;
    with the matmul's bare output saved, the sum is stored nowhere, and every copy the recompute
    makes of it, nested in a weight gradient's fusion or in a gradient fusion, runs because of
    remat (TPU draw 58: the MLP's `Dense_0` bias add, inside the fusions of `Dense_1`'s weight
    gradient and of gelu's gradient). Where the matmul's fusion hands the residual out beside its raw
    output (a multi-output fusion, read through a get-tuple-element), only for a bias add that feeds
    tanh or logistic alone (`only_output_derivatives`: TPU ntpu 136, 178 and tpu 39, one device)."""
    callers: dict[str, tuple[str, str]] = {}  # fused computation -> (caller computation, fusion)
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                callers[callee] = (comp.name, inst.name)
    found: set[SiteKey] = set()
    for op in ops:
        other = bias_add_input(module, op)
        if other is not None and _is_saved_matmul(module, callers, op.key[0], other,
                                                  only_output_derivatives(module, op)):
            found.add(op.key)
    return found


def _is_saved_matmul(module: Module, callers: Mapping[str, tuple[str, str]], comp_name: str, inst,
                     through_outputs: bool = True) -> bool:
    """Is the value a matmul's output handed out through an identity rounding (a saved residual),
    read through fusion parameters and the views XLA adds, and where `through_outputs`, one output of
    a multi-output fusion (`only_output_derivatives` says where that walk is sure)?"""
    for _ in range(64):
        if inst.opcode in _LOOKS_THROUGH and inst.opcode != "broadcast" and inst.operands:
            inst = module.by_name[comp_name].by_name.get(inst.operands[0])
        elif inst.opcode == "parameter" and comp_name in callers:
            caller_comp, fusion = callers[comp_name]
            call = module.by_name[caller_comp].by_name[fusion]
            index = parameter_number(inst)
            if not 0 <= index < len(call.operands):
                return False
            comp_name, inst = caller_comp, module.by_name[caller_comp].by_name.get(call.operands[index])
        elif inst.opcode == "fusion":
            callees = list(inst.called(CallRole.FUSION))
            if len(callees) != 1 or module.by_name.get(callees[0]) is None:
                return False
            comp_name = callees[0]
            inst = module.by_name[comp_name].root
        elif inst.opcode == "get-tuple-element" and inst.operands and through_outputs:
            # one output of a multi-output fusion (TPU's kOutput fusion handing out the matmul's
            # rounded residual beside its raw output: ntpu 136): that output of its root tuple
            found = fusion_output(module, module.by_name[comp_name].by_name.get(inst.operands[0]), inst)
            if found is None:
                return False
            comp_name, inst = found
        elif is_identity_rounding(inst) and inst.operands:
            source = module.by_name[comp_name].by_name.get(inst.operands[0])
            while source is not None and source.opcode in _LOOKS_THROUGH and source.operands:
                source = module.by_name[comp_name].by_name.get(source.operands[0])
            return source is not None and source.opcode in MATMUL_OPCODES
        else:
            return False
        if inst is None:
            return False
    return False


def duplicated_expensive(ops: list[SiteOp], fused: Mapping[str, frozenset[str]]) -> set[Key]:
    """Remat-marked transcendentals in fusions whose value the recompute computes in more than one
    fusion under one name, the forward computing a like op (opcode and shape) in the same frame:
    one recompute computes each value once, so XLA duplicated it, as TPU does with gelu's tanh,
    copied into the fusions of the weight's and of the input's gradient alike, and the program
    without remat copies its forward's gelu into the same fusions. For these the premise of
    `feeding_marked_expensive` (XLA's fusion pass never duplicates an expensive op) fails: they and
    the chain under them are copies like any cheap op's. Not where the forward runs in another
    frame (a scan's forward loop body: the program without remat reads the residuals jax stacked
    there), nor for a divide (softmax's `1 / s`, recomputed into two fusions of TPU draw 58, is
    copied fewer times by the program without remat: one of the two runs because of remat).
    A like op may differ by unit dimensions (a recompute's `[b, 1, q, k]` softmax keeps the head
    dimension its forward's `[b, q, k]` dropped) where the forward copies it into more than one
    fusion itself, as XLA copies it in both programs (TPU draw 45: softmax's `exp(x - max)` in its
    sum's fusion and in each reader's); copied once, the program without remat may compute it once
    too (a layer norm's `rsqrt`, TPU draw 49)."""
    forward = {(op.inst.opcode, str(op.inst.shape), op.frame) for op in ops if not op.marked}
    copies: dict[tuple, set[tuple[str, int]]] = {}  # each forward value's fusions, by its like op
    for op in ops:
        if not op.marked and op.inst.opcode in TRANSCENDENTAL_OPCODES and op.key[0] in fused:
            like = (op.inst.opcode, unit_free_shape(op.inst.shape), op.frame)
            copies.setdefault((like, op.exact), set()).add((op.key[0], op.key[2]))
    copied = {like for (like, _), fusions in copies.items() if len(fusions) > 1}
    groups: dict[tuple, set[tuple[str, int]]] = {}
    for op in ops:
        if op.marked and op.inst.opcode in TRANSCENDENTAL_OPCODES and op.key[0] in fused and \
                ((op.inst.opcode, str(op.inst.shape), op.frame) in forward or
                 (op.inst.opcode, unit_free_shape(op.inst.shape), op.frame) in copied):
            groups.setdefault((op.exact, op.op_name), set()).add((op.key[0], op.key[2]))
    return {op.key[:2] for op in ops if len(groups.get((op.exact, op.op_name), ())) > 1
            and op.marked and op.inst.opcode in TRANSCENDENTAL_OPCODES and op.key[0] in fused}

