"""How many of float normalization's widens run because of remat (after optimization, CPU).

XLA's float normalization computes a bf16 op in f32: it widens each bf16 value to f32 once per
fusion that reads it (`convert(p)` of a fusion parameter) and once inside the fusion computing it
where that fusion reads it again (`convert(convert(y, bf16), f32)`, the round trip). So the count
of widens of a value follows the fusions, not the values (hloflops.remat.normalization).

A checkpointed block's forward hands out only what the policy saves and its output: XLA fuses its
elementwise chains into few fusions, each widening a value once. Its recompute hands the backward
every intermediate the backward reads, and so does the program without remat's forward: XLA
splits both the same way, one fusion per value the backward reads, each widening what it reads
(more seed 9: gelu's `h = x @ w + b` in one forward fusion, widened once; in the recompute and in
the program without remat's forward, read by three fusions, widened three times). The widens that
run because of remat are then as many as the forward's, value by value: of a value's widens in
the fusions computing the recompute, the first as many as the forward fusions' widens of the
forward's value are remat, the rest are the program without remat's too. A forward value the
recompute reads (a bias, widened by the forward's fusion and by the recompute's) counts the same
way. The recompute's value is matched to the forward's by opcode, shape and name inside the
checkpoint (`inner_tail`, of two components at least: a bare primitive's name, in a model
without module scopes, tells no value from another), in the same frame (value numbers differ where
the recompute reads other inputs than the forward); a value of the forward by its number.

A recompute fusion that hands its value out only in another layout for backward ops alone (XLA's
transpose for a weight gradient's matmul, `saved_copies.hands_out_relayout`) stands for the
relayout fusion the program without remat builds of its forward's value, widening it as well: its
widens of what it reads are model FLOPs (seed 30 of `more`, a conv net's `relu(h)` relaid out for
the kernel gradient; seed 113, attention's query relaid out for the backward's `bqhd,bkhd->bhqk`).

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

How XLA fused the program without remat is not in sight: these counts rest on fusion (the range
covers them: an uncounted widen in a recompute fusion is `unsure`, a counted one `loose`); the
whole-model rule's, which stand on the recompute being the program without remat's forward, are
settled both ways."""

from __future__ import annotations

from typing import Iterator

from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.normalization import is_normalization_widen
from hloflops.remat.op_kinds import shape_key
from hloflops.remat.saved_copies import hands_out_relayout
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, source_op
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# Ops that hand a value on unchanged (a widen's source is looked for through them), and an
# unnamed convert (float normalization's narrowing of the op's result, or another widen).
_HANDS_ON = frozenset({"bitcast", "copy", "reshape", "transpose"})
_MOVES = frozenset({"bitcast", "broadcast", "concatenate", "constant", "copy", "dynamic-slice", "iota", "pad",
                    "reshape", "slice", "transpose", "get-tuple-element", "tuple", "parameter"})
Callers = dict[str, "tuple[Computation, Instruction] | None"]


def balanced_widens(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> tuple[set[SiteKey], set[SiteKey]]:
    """The recompute with each value's widens in recompute fusions counted as the forward's
    widens of it (see the module's docstring), and the widens this rule decided."""
    fused = fused_outputs(module)
    if not fused:
        return remat, set(), set()
    index = _Index(module, ops, remat, fused)
    groups: dict[tuple, list[tuple[str, SiteOp]]] = {}
    forward_named: list[tuple[SiteOp, SiteOp]] = []  # (source, widen) of forward widens of named forward ops
    relaid: set[SiteKey] = set()
    for op, comp in index.widens():
        side = index.side(op.key[0], op.key[2])
        if side is None:
            continue
        if side == "relayout":
            if _reads_parameter(comp, op.inst):
                relaid.add(op.key)
            continue
        source = index.source(comp, op.inst.operands[0], op.key[2])
        if source is None:
            continue
        if source.marked:
            # A name of one component (the primitive's, a model without module scopes) tells no
            # value from another of its opcode and shape: no twin is matched by it.
            tail = inner_tail(source.op_name) if source.op_name else ()
            if side == "recompute" and len(tail) >= 2:
                key = ("recompute", source.inst.opcode, shape_key(source.inst.shape), tail, op.frame)
                groups.setdefault(key, []).append((side, op))
            continue
        if side == "forward" and source.op_name and phase(source.op_name) == "forward":
            forward_named.append((source, op))
        groups.setdefault(("value", source.exact, op.frame), []).append((side, op))
    recomputed = [key for key in groups if key[0] == "recompute"]
    for source, op in forward_named:
        for key in recomputed:
            if (source.inst.opcode, shape_key(source.inst.shape)) == key[1:3] and op.frame == key[4] \
                    and ends_with(source.op_name, key[3]):
                groups[key].append(("forward", op))
    out = set(remat) - relaid
    decided = set(relaid)
    for members in groups.values():
        forward = sum(side == "forward" for side, _ in members)
        in_recompute = sorted((op for side, op in members if side == "recompute"), key=lambda op: op.order)
        if not forward:
            continue  # the forward's widens are not in sight (another loop body): as decided
        for n, op in enumerate(in_recompute):
            decided.add(op.key)
            (out.add if n < forward else out.discard)(op.key)
    settled = whole_checkpoint_widens(module, ops, index, remat, out, decided, relaid)
    return out, decided, settled


def whole_checkpoint_widens(module: Module, ops: list[SiteOp], index: "_Index", remat: set[SiteKey],
                            out: set[SiteKey], decided: set[SiteKey], relaid: set[SiteKey]) -> set[SiteKey]:
    """Where the recompute reads nothing the forward computed (a checkpoint around the whole
    model), the forward's widens of checkpointed values are remat, the recompute's model FLOPs
    (see the module's docstring); updates `out` and `decided`, returns the widens it settled."""
    found = _CheckpointedForward(module, ops, index)
    widens = [(op, comp, found.side(op.key[0], op.key[2])) for op, comp in index.widens()]
    # The forward and its recompute in one computation (not a scan's two loop bodies, the
    # forward's values handed through the loop's stacks).
    frames = {op.frame for op, _, side in widens if side is not None}
    if not any(side == "forward" for _, _, side in widens) or len(frames) != 1 \
            or found.recompute_reads_forward() or found.forward_hands_backward():
        return set()
    settled: set[SiteKey] = set()
    for op, comp, side in widens:
        if side is None or (side == "recompute" and op.key in relaid):
            continue
        # A value the checkpoint computes, named so (a policy's residual, which the recompute
        # reads, a program input, a weight's slice, and an op named by its readers, a library
        # matmul without metadata, are counted value by value above).
        source = index.source(comp, op.inst.operands[0], op.key[2])
        if source is None or not (source.named and not source.inherited if side == "recompute" else
                                  source.key in remat or found.checkpointed(source)):
            continue
        decided.add(op.key)
        settled.add(op.key)
        (out.add if side == "forward" else out.discard)(op.key)
    return settled


class _CheckpointedForward:
    """The fusions computing the forward of what a checkpoint recomputes, and those computing
    the recompute, told by names: a forward op is checkpointed where a remat-marked op computes
    its value too (an equal value number) or carries its name inside the checkpoint
    (`inner_tail`, two components at least, as in `balanced_widens`)."""

    def __init__(self, module: Module, ops: list[SiteOp], index: "_Index"):
        self.module, self.ops, self.index = module, ops, index
        self.marked_values = {op.exact for op in ops if op.marked}
        self.tails: dict[str, set[tuple[str, ...]]] = {}
        for op in ops:
            tail = inner_tail(op.op_name) if op.marked and op.op_name else ()
            if len(tail) >= 2:
                self.tails.setdefault(op.inst.opcode, set()).add(tail)
        self.sides: dict[tuple[str, int], str | None] = {}

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
                           and m.inst.opcode not in _MOVES for m in members)
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

    def recompute_reads_forward(self) -> bool:
        """Does a recompute (a fusion of the recompute, or an unfused op named in it) read a
        value a forward op computed: the checkpoint's input handed from the forward (a
        checkpoint per layer)? Not a program input, a cast of one (a weight cast to bf16, which
        CSE may share between the forward and the recompute) or a policy's saved residual (its
        rounding, narrowed for the barrier)."""
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
                    if any(self._forward_value(self.index.source(comp, operand, site)) for operand in inst.operands):
                        return True
        return False

    def forward_hands_backward(self) -> bool:
        """Does a fusion of the checkpointed forward hand its value to the backward (a fusion
        computing a backward op, or an unfused one)? The forward of a whole-model checkpoint
        stores nothing but the policy's residuals (their fusions are of no side)."""
        for (comp_name, site), side in list(self.sides.items()):
            if side != "forward":
                continue
            for reader in self.index.reader_fusions(comp_name, site):
                if any(op.marked or (op.op_name and phase(op.op_name) == "backward" and op.inst.opcode not in _MOVES)
                       for op in reader):
                    return True
        return False

    def _forward_value(self, op: SiteOp | None) -> bool:
        """Is the value (through the converts narrowing it) one the program computed outside the
        recompute (an unmarked op's, not a policy's saved residual)?"""
        while op is not None and op.inst.opcode == "convert" and op.inst.operands:
            op = self.index.source(self.module.by_name[op.key[0]], op.inst.operands[0], op.key[2])
        return op is not None and not op.marked and bool(op.op_name) \
            and op.inst.opcode not in _MOVES and op.inst.opcode != "reduce-precision"


class _Index:
    """The module's fusions seen from their widens: which side of the program each fusion is on,
    what a widen widens, who reads a fusion's value."""

    def __init__(self, module: Module, ops: list[SiteOp], remat: set[SiteKey], fused):
        self.module, self.ops, self.remat, self.fused = module, ops, remat, fused
        self.by_key = {op.key: op for op in ops}
        self.callers: Callers = one_call_site(module)
        self.sides: dict[tuple[str, int], str | None] = {}

    def widens(self) -> Iterator[tuple[SiteOp, Computation]]:
        """Float normalization's widens inside fusions."""
        for op in self.ops:
            inst = op.inst
            if inst.opcode != "convert" or inst.op_name or op.key[0] not in self.fused or not inst.operands:
                continue
            comp = self.module.by_name[op.key[0]]
            if is_normalization_widen(inst, comp.by_name.get(inst.operands[0])):
                yield op, comp

    def side(self, comp_name: str, site: int) -> str | None:
        """`recompute`: a fusion one of whose outputs is remat (no backward op in it);
        `relayout`: such a fusion handing its value out only relaid out for backward ops;
        `forward`: a fusion of forward ops only (named so, or read only by such); else None."""
        if (comp_name, site) not in self.sides:
            self.sides[(comp_name, site)] = self._side(comp_name, site)
        return self.sides[(comp_name, site)]

    def _side(self, comp_name: str, site: int) -> str | None:
        comp = self.module.by_name[comp_name]
        members = [op for op in (self.by_key.get((comp_name, inst.name, site)) for inst in comp.instructions) if op]
        if any((comp_name, name, site) in self.remat for name in self.fused[comp_name]):
            if any(m.op_name and not m.marked and phase(m.op_name) == "backward" for m in members):
                return None  # a gradient fusion copying recomputes: the fusion rules decided
            readers = self.readers(comp_name, site)
            backward_only = bool(readers) and all(not marked and (not name or phase(name) == "backward")
                                                  for name, marked in readers)
            return "relayout" if backward_only and hands_out_relayout(comp) else "recompute"
        if any(m.marked or (m.op_name and phase(m.op_name) != "forward") for m in members):
            return None
        if any(m.op_name for m in members):
            return "forward"
        named = [(name, marked) for name, marked in self.readers(comp_name, site) if name]
        return "forward" if named and all(not marked and phase(name) == "forward" for name, marked in named) \
            else None

    def _users(self, comp_name: str, site: int) -> Iterator[tuple[Instruction, list[SiteOp | None]]]:
        """Each instruction reading the fusion's value (through the ops that hand it on), with
        the ops reading it: a fusion's ops reading the parameters it comes in at, else the
        instruction's own op (None outside `ops`)."""
        caller = self.callers.get(comp_name)
        if caller is None:
            return
        outer, call = caller
        pending, seen = [call.name], set()
        while pending:
            name = pending.pop()
            for user in outer.users.get(name, ()):
                if user.name in seen:
                    continue
                seen.add(user.name)
                if user.opcode in ("bitcast", "copy", "get-tuple-element", "reshape"):
                    pending.append(user.name)
                elif user.opcode == "fusion":
                    callee = self.module.by_name[user.called(CallRole.FUSION)[0]]
                    numbers = {k for k, operand in enumerate(user.operands) if operand == name}
                    yield user, [self.by_key.get((callee.name, reader.name, site)) for p in callee.parameters
                                 if parameter_number(p) in numbers for reader in callee.users.get(p.name, ())]
                else:
                    yield user, [self.by_key.get((outer.name, user.name, site))]

    def readers(self, comp_name: str, site: int) -> list[tuple[str, bool]]:
        """The op_name and mark of each op reading the fusion's value (through the ops that hand
        it on, into the fusions reading it); an op without one (a library fusion's matmul) as ''."""
        found = []
        for user, inside in self._users(comp_name, site):
            if user.opcode == "fusion":
                found += [(op.op_name, op.marked) for op in inside if op is not None]
            else:
                found += [(op.op_name, op.marked) if op is not None else ("", False) for op in inside]
        return found

    def reader_ops(self, comp_name: str, site: int) -> list[SiteOp | None]:
        """The ops reading the fusion's value (as `readers`; inside a fusion the named ones),
        None for one outside `ops`."""
        found: list[SiteOp | None] = []
        for user, inside in self._users(comp_name, site):
            found += [op for op in inside if op is not None and op.op_name] if user.opcode == "fusion" else inside
        return found

    def reader_fusions(self, comp_name: str, site: int) -> list[list[SiteOp]]:
        """The ops of each fusion (or the unfused op) reading the fusion's value."""
        found = []
        for user, inside in self._users(comp_name, site):
            if user.opcode == "fusion":
                callee = self.module.by_name[user.called(CallRole.FUSION)[0]]
                inside = [self.by_key.get((callee.name, i.name, site)) for i in callee.instructions]
            found.append([op for op in inside if op is not None])
        return found

    def source(self, comp: Computation, name: str, site: int, depth: int = 16) -> SiteOp | None:
        """The op whose value a widen widens: through views and unnamed converts
        (`sites.source_op`)."""
        return source_op(self.module, self.callers, self.by_key, comp, name, site, _passes_widen, depth)


def _reads_parameter(comp: Computation, inst: Instruction) -> bool:
    """Does the widen read a parameter of its fusion (a value from memory, not a round trip)?"""
    operand = comp.by_name.get(inst.operands[0])
    while operand is not None and operand.opcode in ("bitcast", "copy", "reshape"):
        operand = comp.by_name.get(operand.operands[0])
    return operand is not None and operand.opcode == "parameter"


def _passes_widen(inst: Instruction) -> bool:
    """A view, or a convert XLA left unnamed, between a widen and the value it widens."""
    return inst.opcode in _HANDS_ON or (inst.opcode == "convert" and not inst.op_name)
