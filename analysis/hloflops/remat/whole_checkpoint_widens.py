"""The widens and the forward copies of a checkpoint around the whole model (after optimization,
CPU).

A checkpoint around the whole model (`whole_checkpoint_widens`) turns this around: its forward
stores nothing but the policy's residuals, so XLA copies each cheap value into every fusion
reading it and widens what it reads there (the embedding's gather, widened in each layer norm's
and residual add's fusion; base seeds 11, 63, 112), more often than the recompute, and often a
value the recompute widens under another name (the gather before its mask). The recompute is split
as the program without remat's forward: its widens of values it computes (named in the recompute)
are model FLOPs, and the forward's widens of checkpointed values, all of them, are remat. Widens
of a policy's residual, of a program input (a weight's slice) and of a library matmul named by its
readers keep the value-by-value count (the program without remat's forward fuses the residual's
readers with its computation: held-out base 293). Told by names and reads: the forward and the
recompute run in one computation, the recompute reads nothing computed outside it but a policy's
residuals and casts of program inputs, and no fusion of the checkpointed forward hands its value
to the backward. A checkpoint per layer or per scan step hands its input from the forward (the
recompute reads it, or the stacks carry it): there the value-by-value count holds.

The same holds for the forward's other cheap copies (`_forward_copies`): a value the forward never
stores is computed again in each fusion reading it (a residual sum `x + h`, copied into a layer
norm's mean, its variance and the next block's input: base 83, held-out base 289), where the
recompute, whose value the backward reads, computes and stores it once, as the program without
remat's forward does. So the program with remat runs that value as often more as its forward
computes it: of a value a recompute fusion (or an unfused recompute) computes, the forward's copies
not yet counted are remat, up to as many counted copies as the forward makes. A value only the
gradient fusions recompute (the head's bias add, copied into the loss gradient's fusions) is one
the program without remat's forward computes for the loss as this one's does: its forward copies
stay model FLOPs. The value is told by opcode, shape and the name inside the checkpoint (two
components at least), in one frame: value numbers do not serve, the forward's fused copies reading
unrounded values where the recompute's read rounded ones (held-out base 289's recomputed residual
sums matched nothing by value).

A value CSE shares between the forward and the recompute (`shared_value_converts`): the recompute
of a whole-model checkpoint reads only program inputs, so its first ops (the input's layer norm,
the first layer's matmuls, which read the input and the weights' casts) are the forward's, op for
op, and XLA's CSE keeps one of each; the recompute then reads the forward's value (held-out base
202, 238: the attention's query, key and value; 222: an MLP's first matmul). Such a value is
computed once, as in the program without remat, which narrows it once to store it for the
backward and widens it in each fusion reading it: this program does the same for its recompute
and backward (a narrowing fusion, relayout fusions widening it), and its forward, storing nothing,
rounds the value again in place in fusions of its own (a narrow and a widen each). So of the
value's unnamed converts, as many as the forward-only fusions make (fusions no recompute or
backward op is in or reads) run because of remat, those counted already anywhere included (222:
the recompute's tanh fusion rounds the matmul itself, its widen counted value by value). Those converts are then settled
here, kept from the round trips (`widen_counts._read_round_trips`, which would count that
narrow again); a shared value no forward-only fusion copies is one the rule counts nothing of,
and its round trips stay theirs (base 54, a saving policy: the recompute reads the forward's
residual sums, rounded in place beside a counted widen by recompute fusions). The value
is told by what it is computed from: nothing back to the program's inputs (or a policy's saved
residual) is a recompute or a forward op whose value number a recompute shares; a checkpoint per
layer hands the next layer's recompute a value computed past the previous layer's attention,
whose ops have recompute twins. The gate above counts such reads as the recompute reading the
forward; the shared values' converts are settled whichever way it goes.

Where the gate above closes only on what a whole-model checkpoint shows too, the split still
holds for part of the model (`beyond` is the rest). That is where every forward value the
recompute reads is one CSE shares, and every forward fusion the backward reads only casts program
inputs (a weight's cast that the backward's matmul reads; the program without remat makes and
reads it the same way). The recompute's own values are then those it computes from program inputs
by loop fusions alone (the embedding's lookup, `take`'s gather and mask). They are past no shared
value and no library op (matmul, reduce, loop). There the split is the first one: the forward's
widens of the looked-up rows (the gather's, one per fusion reading it) are remat, the
recompute's (the masked rows', as many as the program without remat's forward makes) model
FLOPs (base seed 145: an encoder-decoder's two embeddings, whose masked rows the recompute
widens five times and the forward's gather three times). Past a shared value or a library op the
split does not hold here (opened for the whole model, base seed 145's convert miss went from
+32,768 to +66,624: its attention's and MLP's values); a weight's cast keeps the value-by-value
count.

These stand on the recompute being the program without remat's forward: settled both ways, not
in the range (hloflops.remat.widen_counts counts the value-by-value case)."""

from __future__ import annotations

from typing import Iterator

from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.normalization import is_normalization_widen
from hloflops.remat.op_kinds import DUPLICATED, shape_key
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.widen_index import MOVING_OPS, WidenIndex
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module, parameter_number


_NOT_ELEMENTWISE = frozenset({"dot", "convolution", "reduce", "reduce-window", "custom-call", "while", "call",
                              "conditional", "scatter", "sort", "all-reduce"})


def whole_checkpoint_widens(module: Module, ops: list[SiteOp], index: WidenIndex, remat: set[SiteKey],
                            out: set[SiteKey], decided: set[SiteKey], relaid: set[SiteKey],
                            shared_converts: set[SiteKey]) -> set[SiteKey]:
    """Where the recompute reads nothing the forward computed (a checkpoint around the whole
    model), the forward's widens of checkpointed values are remat, the recompute's model FLOPs,
    and so are the forward's copies of a recomputed value beyond those counted (see the module's
    docstring); updates `out` and `decided`, returns the ops it settled. Every convert of a value
    CSE shares goes into `shared_converts`: that rule counted them all, so no later one may."""
    found = _CheckpointedForward(module, ops, index)
    shared = shared_value_converts(found, out, shared_converts)
    decided |= shared
    beyond: set[SiteKey] = set()  # what the split below leaves to the value-by-value count
    if found.recompute_reads_forward() or found.hands_backward():
        # Only a value CSE shares, or a weight's cast the backward's matmul reads: the split still
        # holds for the values computed from the program's inputs by loop fusions alone.
        if found.reads_unshared_forward() or found.hands_backward(casts=False):
            return shared
        beyond = found.downstream_of(found.shared_reads()
                                     | {op.key for op in ops if op.inst.opcode in _NOT_ELEMENTWISE})
    settled = _forward_copies(ops, found, out, beyond) | shared
    widens = [(op, comp, found.side(op.key[0], op.key[2])) for op, comp in index.widens()]
    # The forward and its recompute in one computation (not a scan's two loop bodies, the
    # forward's values handed through the loop's stacks).
    frames = {op.frame for op, _, side in widens if side is not None}
    if not any(side == "forward" for _, _, side in widens) or len(frames) != 1:
        decided |= settled
        return settled
    for op, comp, side in widens:
        if side is None or (side == "recompute" and op.key in relaid) or op.key in beyond:
            continue
        # A value the checkpoint computes, named so (a policy's residual, which the recompute
        # reads, a program input, a weight's slice, and an op named by its readers, a library
        # matmul without metadata, are counted value by value: hloflops.remat.widen_counts).
        source = index.source(comp, op.inst.operands[0], op.key[2])
        if beyond and (source is None or found.casts_an_input(source)):
            continue  # a weight's cast, where only part of the split holds: value by value
        if source is None or not (source.named and not source.inherited if side == "recompute" else
                                  source.key in remat or found.checkpointed(source)):
            continue
        decided.add(op.key)
        settled.add(op.key)
        (out.add if side == "forward" else out.discard)(op.key)
    decided |= settled
    return settled


def shared_value_converts(found: "_CheckpointedForward", out: set[SiteKey],
                          considered: set[SiteKey]) -> set[SiteKey]:
    """The forward's converts of a value CSE shares between the forward and the recompute (see
    the module's docstring): as many as the forward-only fusions make of it are remat, counted
    ones anywhere included. Adds them to `out`; returns them. Adds every convert of a value it
    counts (one with a forward-only copy) to `considered`: the round trips leave those alone."""
    shared = found.shared_reads()
    if not shared:
        return set()
    index = found.index
    converts: dict[SiteKey, tuple[list[SiteOp], list[SiteOp]]] = {}
    for op in index.ops:
        if op.inst.opcode != "convert" or op.inst.op_name or op.key[0] not in index.fused or not op.inst.operands:
            continue
        source = index.source(found.module.by_name[op.key[0]], op.inst.operands[0], op.key[2])
        if source is not None and source.key in shared:
            forward = found.forward_only(op.key[0], op.key[2])
            converts.setdefault(source.key, ([], []))[0 if forward else 1].append(op)
    extra: set[SiteKey] = set()
    for forward, elsewhere in converts.values():
        if not forward:
            continue  # no forward-only copy: the rule counts nothing of the value
        considered.update(op.key for op in forward + elsewhere)
        missing = len(forward) - sum(op.key in out for op in forward + elsewhere)
        for op in [op for op in forward if op.key not in out][:max(missing, 0)]:
            extra.add(op.key)
            out.add(op.key)
    return extra


def _forward_copies(ops: list[SiteOp], found: "_CheckpointedForward", out: set[SiteKey],
                    beyond: set[SiteKey] = frozenset()) -> set[SiteKey]:
    """The forward's copies of a checkpointed elementwise value beyond those counted (see the
    module's docstring): remat, as many as make the value's count its forward copies. A value is
    the ops of one opcode and shape named alike inside the checkpoint (`inner_tail`, two
    components at least) in one frame: the recompute's copies by that name, the forward's ops whose
    name ends so (each with the longest such name). Only where a recompute fusion (or an unfused
    op) computes it: the program without remat's forward then computes it as the recompute does,
    once where the recompute stores it (a residual sum, which the forward, storing nothing, copies
    into each of the fusions reading it: base seeds 83, 289); a value only gradient fusions
    recompute (the head's bias add, copied into the loss gradient's fusions) is one that program's
    forward computes as this one's does, for the loss. Adds them to `out`; returns them."""
    values: dict[tuple, tuple[list[SiteOp], list[SiteOp]]] = {}
    ops = [op for op in ops if op.key not in beyond]
    for op in ops:
        if op.marked and not op.inherited and op.op_name and op.inst.opcode in DUPLICATED \
                and op.inst.opcode != "convert" and len(tail := inner_tail(op.op_name)) >= 2:
            values.setdefault((op.inst.opcode, shape_key(op.inst.shape), op.frame, tail), ([], []))[0].append(op)
    by_kind: dict[tuple, list[tuple[str, ...]]] = {}
    for key in values:
        by_kind.setdefault(key[:3], []).append(key[3])
    for op in ops:
        if op.marked or not op.op_name or phase(op.op_name) != "forward" or op.inst.opcode not in DUPLICATED:
            continue
        kind = (op.inst.opcode, shape_key(op.inst.shape), op.frame)
        tails = [tail for tail in by_kind.get(kind, ()) if ends_with(op.op_name, tail)]
        if tails:
            values[(*kind, max(tails, key=len))][1].append(op)
    fused = found.index.fused
    extra: set[SiteKey] = set()
    for recomputes, forward in values.values():
        if not any(op.key[0] not in fused or found.side(op.key[0], op.key[2]) == "recompute" for op in recomputes):
            continue
        missing = len(forward) - sum(op.key in out for op in recomputes + forward)
        for op in [op for op in forward if op.key not in out][:max(missing, 0)]:
            extra.add(op.key)
            out.add(op.key)
    return extra


class _CheckpointedForward:
    """The fusions computing the forward of what a checkpoint recomputes, and those computing
    the recompute, told by names: a forward op is checkpointed where a remat-marked op computes
    its value too (an equal value number) or carries its name inside the checkpoint
    (`inner_tail`, two components at least, as in `balanced_widens`)."""

    def __init__(self, module: Module, ops: list[SiteOp], index: WidenIndex):
        self.module, self.ops, self.index = module, ops, index
        self.marked_values = {op.exact for op in ops if op.marked}
        self.tails: dict[str, set[tuple[str, ...]]] = {}
        for op in ops:
            tail = inner_tail(op.op_name) if op.marked and op.op_name else ()
            if len(tail) >= 2:
                self.tails.setdefault(op.inst.opcode, set()).add(tail)
        self.sides: dict[tuple[str, int], str | None] = {}
        self._clean: dict[SiteKey, bool] = {}

    def checkpointed(self, op: SiteOp) -> bool:
        """Is the op a forward op whose value the checkpoint recomputes?"""
        if op.marked or not op.op_name or phase(op.op_name) != "forward":
            return False
        return op.exact in self.marked_values or \
            any(ends_with(op.op_name, tail) for tail in self.tails.get(op.inst.opcode, ()))

    def side(self, comp_name: str, site: int) -> str | None:
        """`recompute`: a fusion of remat-marked ops (and no backward op computing anything);
        `forward`: a fusion of forward ops computing a checkpointed one, or of unnamed ops only
        (a round trip, a relayout) read by forward ops alone, widening a checkpointed value or
        read by a checkpointed op; else None."""
        if (comp_name, site) not in self.sides:
            self.sides[(comp_name, site)] = self._side(comp_name, site)
        return self.sides[(comp_name, site)]

    def _side(self, comp_name: str, site: int) -> str | None:
        comp = self.module.by_name[comp_name]
        by_key = self.index.by_key
        members = [op for op in (by_key.get((comp_name, inst.name, site)) for inst in comp.instructions) if op]
        if any(m.marked for m in members):
            backward = any(m.op_name and not m.marked and phase(m.op_name) == "backward"
                           and m.inst.opcode not in MOVING_OPS for m in members)
            return None if backward else "recompute"
        if any(m.op_name and phase(m.op_name) != "forward" for m in members):
            return None
        if any(self.checkpointed(m) for m in members):
            return "forward"
        if any(m.op_name for m in members):
            return None
        readers = self.index.reader_ops(comp_name, site)
        if not readers or not all(r is not None and not r.marked and r.op_name and phase(r.op_name) == "forward"
                                  for r in readers):
            return None
        sources = [self.index.source(comp, inst.operands[0], site) for inst in comp.instructions
                   if is_normalization_widen(inst, comp.by_name.get(inst.operands[0]) if inst.operands else None)]
        return "forward" if any(self.checkpointed(r) for r in readers) or \
            any(x is not None and self.checkpointed(x) for x in sources) else None

    def forward_only(self, comp_name: str, site: int) -> bool:
        """Is the fusion one of the forward's alone: no op of it remat-marked or named outside
        the forward, and every op reading its value a forward op?"""
        comp = self.module.by_name[comp_name]
        members = [op for op in (self.index.by_key.get((comp_name, inst.name, site)) for inst in comp.instructions)
                   if op]
        if any(m.marked or (m.op_name and phase(m.op_name) != "forward") for m in members):
            return False
        readers = self.index.reader_ops(comp_name, site)
        return bool(readers) and all(r is not None and not r.marked and bool(r.op_name)
                                     and phase(r.op_name) == "forward" for r in readers)

    def recompute_reads_forward(self) -> bool:
        """Does a recompute (a fusion of the recompute, or an unfused op named in it) read a
        value a forward op computed: the checkpoint's input handed from the forward (a
        checkpoint per layer)? Not a program input, a cast of one (a weight cast to bf16, which
        CSE may share between the forward and the recompute) or a policy's saved residual (its
        rounding, narrowed for the barrier)."""
        return any(self._forward_source(source) is not None for source in self._recompute_reads())

    def shared_reads(self) -> set[SiteKey]:
        """The forward values the recompute reads that CSE shares with it (`shared`)."""
        return {value.key for value in map(self._forward_source, self._recompute_reads())
                if value is not None and self.shared(value)}

    def _recompute_reads(self) -> Iterator[SiteOp | None]:
        """What the recompute's fusions and unfused named ops read (through views and unnamed
        converts)."""
        fused = self.index.fused
        sites: dict[str, set[int]] = {}
        for op in self.ops:
            sites.setdefault(op.key[0], set()).add(op.key[2])
        for comp in self.module.computations:
            if comp.name in fused:
                continue
            for inst in comp.instructions:
                callee = inst.called(CallRole.FUSION) if inst.opcode == "fusion" else ()
                for site in sites.get(callee[0] if callee else comp.name, ()):
                    if callee:
                        if self.side(callee[0], site) != "recompute":
                            continue
                    else:
                        op = self.index.by_key.get((comp.name, inst.name, site))
                        if op is None or not op.named:
                            continue
                    for operand in inst.operands:
                        yield self.index.source(comp, operand, site)

    def reads_unshared_forward(self) -> bool:
        """Does the recompute read a forward value CSE does not share with it?"""
        return any((value := self._forward_source(source)) is not None and not self.shared(value)
                   for source in self._recompute_reads())

    def hands_backward(self, casts: bool = True) -> bool:
        """Does a fusion of the checkpointed forward hand its value to the backward (a fusion
        computing a backward op, or an unfused one)? The forward of a whole-model checkpoint
        stores nothing but the policy's residuals (their fusions are of no side). Without
        `casts`, a fusion only casting program inputs is left out: a weight's cast the backward's
        matmul reads is one the program without remat makes and reads so too."""
        for (comp_name, site), side in list(self.sides.items()):
            if side != "forward" or (not casts and self.casts_inputs(comp_name, site)):
                continue
            for reader in self.index.reader_fusions(comp_name, site):
                if any(op.marked or (op.op_name and phase(op.op_name) == "backward"
                                     and op.inst.opcode not in MOVING_OPS) for op in reader):
                    return True
        return False

    def casts_an_input(self, op: SiteOp) -> bool:
        """Is the op a convert of a program input (a weight's cast)?"""
        return op.inst.opcode == "convert" and bool(op.inst.operands) and \
            self.index.program_input(self.module.by_name[op.key[0]], op.inst.operands[0]) is not None

    def casts_inputs(self, comp_name: str, site: int) -> bool:
        """Is every op of the fusion a move or a convert of a program input (or a round trip of
        one): a weight's cast?"""
        comp = self.module.by_name[comp_name]
        for inst in comp.instructions:
            if inst.opcode in MOVING_OPS:
                continue
            if inst.opcode != "convert" or not inst.operands:
                return False
            read = comp.by_name.get(inst.operands[0])
            if read is not None and read.opcode == "convert":
                continue  # a round trip of the cast
            if self.index.program_input(comp, inst.operands[0]) is None:
                return False
        return True

    def downstream_of(self, values: set[SiteKey]) -> set[SiteKey]:
        """The instructions computed from any of the values: a walk through their readers, into
        fusions by their parameters and out by their roots (not into loops or calls), each
        instruction once."""
        fused = self.index.fused
        found: set[SiteKey] = set()
        pending = list(values)
        while pending:
            comp_name, name, site = pending.pop()
            comp = self.module.by_name[comp_name]
            steps = []
            for user in comp.users.get(name, ()):
                if user.opcode == "fusion":
                    callee = self.module.by_name[user.called(CallRole.FUSION)[0]]
                    numbers = {k for k, operand in enumerate(user.operands) if operand == name}
                    steps += [(callee.name, p.name, site) for p in callee.parameters if parameter_number(p) in numbers]
                    steps.append((comp_name, user.name, site))
                elif not any(call.role in CallRole.CONTROL for call in user.calls):
                    steps.append((comp_name, user.name, site))
            if comp_name in fused and comp.root is not None and comp.root.name == name:
                caller = self.index.callers.get(comp_name)
                if caller is not None:
                    steps.append((caller[0].name, caller[1].name, site))
            for step in steps:
                if step not in found:
                    found.add(step)
                    pending.append(step)
        return found

    def shared(self, op: SiteOp) -> bool:
        """Is the forward op one the recompute shares through CSE: nothing it is computed from,
        back to the program's inputs, is a recompute or a forward op the checkpoint recomputes?"""
        return not op.marked and self._before_recompute(op.key[0], op.inst.name, op.key[2])

    def _before_recompute(self, comp_name: str, name: str, site: int) -> bool:
        """Is nothing the value is computed from (through fusions, to the program's inputs or a
        policy's saved residual) a recompute or a value a recompute computes too? A walk, each
        instruction once; what a clean walk saw is clean (`_clean`)."""
        start = (comp_name, name, site)
        if start in self._clean:
            return self._clean[start]
        pending, seen = [start], {start}
        while pending:
            key = pending.pop()
            if self._clean.get(key):
                continue
            steps = self._computed_from(key)
            if steps is None:
                self._clean[start] = False
                return False
            for step in steps:
                if step not in seen:
                    seen.add(step)
                    pending.append(step)
        for key in seen:
            self._clean[key] = True
        return True

    def _computed_from(self, key: SiteKey) -> list[SiteKey] | None:
        """The instructions the value at `key` is read from, or None where it is a recompute, a
        value one computes too, a loop's or a call's result, or not followed."""
        comp_name, name, site = key
        inst = self.module.by_name[comp_name].by_name.get(name)
        op = self.index.by_key.get(key)
        if inst is None or (op is not None and (op.marked or op.exact in self.marked_values)):
            return None
        if inst.opcode == "reduce-precision":
            return []  # a policy's saved residual: the recompute reads it as the forward does
        if inst.opcode == "parameter":
            caller = self.index.callers.get(comp_name)
            number = parameter_number(inst)
            if caller is not None and 0 <= number < len(caller[1].operands):
                return [(caller[0].name, caller[1].operands[number], site)]
            return None if comp_name in self.index.fused else []  # a fusion called from several sites
        if inst.opcode == "fusion":
            callee = self.module.by_name[inst.called(CallRole.FUSION)[0]]
            return [(callee.name, callee.root.name, site)]
        if any(call.role in CallRole.CONTROL for call in inst.calls):
            return None  # what a loop's or a call's body computes is not followed
        return [(comp_name, operand, site) for operand in inst.operands]

    def _forward_source(self, op: SiteOp | None) -> SiteOp | None:
        """The value (through the converts narrowing it) where it is one the program computed
        outside the recompute (an unmarked op's, not a policy's saved residual); else None."""
        while op is not None and op.inst.opcode == "convert" and op.inst.operands:
            op = self.index.source(self.module.by_name[op.key[0]], op.inst.operands[0], op.key[2])
        return op if op is not None and not op.marked and bool(op.op_name) \
            and op.inst.opcode not in MOVING_OPS and op.inst.opcode != "reduce-precision" else None
