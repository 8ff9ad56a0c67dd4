"""Float normalization's widens inside fusions, and the fusions around them: which side of
the program (forward, recompute, a relayout for the backward) a fusion is on, what a widen widens
(through views and unnamed converts), who reads a fusion's value. Shared by
hloflops.remat.widen_counts and hloflops.remat.whole_checkpoint_widens."""

from __future__ import annotations

from typing import Iterator

from hloflops.remat.normalization import is_normalization_widen, widens_only
from hloflops.remat.saved_copies import hands_out_relayout
from hloflops.remat.sites import FUSION_BOUNDARY, SiteKey, SiteOp, across_fusion_boundary, one_call_site, source_op
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# Ops that hand a value on unchanged (a widen's source is looked for through them), and an
# unnamed convert (float normalization's narrowing of the op's result, or another widen).
_HANDS_ON = frozenset({"bitcast", "copy", "reshape", "transpose"})
# Ops that move or view values: never the forward's or the backward's computation.
MOVING_OPS = frozenset({"bitcast", "broadcast", "concatenate", "constant", "copy", "dynamic-slice", "iota", "pad",
                   "reshape", "slice", "transpose", "get-tuple-element", "tuple", "parameter"})
Callers = dict[str, "tuple[Computation, Instruction] | None"]


class WidenIndex:
    """The module's fusions seen from their widens: which side of the program each fusion is on,
    what a widen widens, who reads a fusion's value."""

    def __init__(self, module: Module, ops: list[SiteOp], remat: set[SiteKey], fused) -> None:
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
        """`recompute`: a fusion one of whose outputs is remat (no backward op in it), or one only
        widening a value for recomputes (`normalization.widens_only`);
        `relayout`: such a fusion handing its value out only relaid out for backward ops;
        `forward`: a fusion of forward ops only (named so, or read only by such); else None.
        An op that only moves a value (a broadcast) named by the backward is no gradient op (base
        seed 54: the backward's `1 / s` broadcast into the recompute's `e / s`, CSE sharing the
        reciprocal); nor is an op named by the checkpoint primitive itself (`.../remat2`) that
        only rounds or moves a value: a value crossing a nested checkpoint's barrier is narrowed
        so in the recompute's fusion computing it (held-out base seed 217), a saved residual is
        viewed so in the forward fusion reading it (held-out more seed 214)."""
        if (comp_name, site) not in self.sides:
            self.sides[(comp_name, site)] = self._side(comp_name, site)
        return self.sides[(comp_name, site)]

    def _side(self, comp_name: str, site: int) -> str | None:
        comp = self.module.by_name[comp_name]
        members = [op for op in (self.by_key.get((comp_name, inst.name, site)) for inst in comp.instructions) if op]
        if any((comp_name, name, site) in self.remat for name in self.fused[comp_name]):
            if any(m.op_name and not m.marked and phase(m.op_name) == "backward" and not _checkpoint_boundary(m)
                   and m.inst.opcode not in MOVING_OPS for m in members):
                return None  # a gradient fusion copying recomputes: the fusion rules decided
            readers = self.readers(comp_name, site)
            backward_only = bool(readers) and all(not marked and (not name or phase(name) == "backward")
                                                  for name, marked in readers)
            return "relayout" if backward_only and hands_out_relayout(comp) else "recompute"
        if any(m.marked or (m.op_name and phase(m.op_name) != "forward" and not _checkpoint_boundary(m))
               for m in members):
            return None
        if any(m.op_name for m in members):
            return "forward"
        named = [(name, marked) for name, marked in self.readers(comp_name, site) if name]
        if named and all(not marked and phase(name) == "forward" for name, marked in named):
            return "forward"
        # A fusion only widening a value for recomputes (hloflops.remat.normalization).
        readers = self.reader_ops(comp_name, site)
        if widens_only(comp) and readers and all(op is not None and op.key in self.remat for op in readers):
            return "recompute"
        return None

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


    def program_input(self, comp: Computation, name: str, depth: int = 16) -> tuple[str, str] | None:
        """The program input (a parameter of ENTRY or of a loop body, or an element of a loop's
        state) a widen widens, through views, unnamed converts and fusion boundaries, as
        (computation, instruction); None where it widens a computed value."""
        while depth:
            depth -= 1
            inst = comp.by_name.get(name)
            if inst is None:
                return None
            if _passes_widen(inst) and inst.operands:
                name = inst.operands[0]
                continue
            if inst.opcode not in FUSION_BOUNDARY:
                return None
            step = across_fusion_boundary(self.module, self.callers, comp, inst)
            if step is not None:
                comp, name = step
                continue
            if comp.name in self.callers:
                return None  # a fusion called from several sites
            state = inst if inst.opcode == "parameter" else comp.by_name.get(inst.operands[0]) \
                if inst.opcode == "get-tuple-element" else None
            return (comp.name, inst.name) if state is not None and state.opcode == "parameter" else None
        return None


def _checkpoint_boundary(op: SiteOp) -> bool:
    """An op named by the checkpoint primitive itself (`.../remat2`) that only rounds or moves a
    value: the narrowing of a value crossing a checkpoint's barrier, no gradient computation."""
    return op.op_name.rsplit("/", 1)[-1] == "remat2" and (op.inst.opcode == "convert" or op.inst.opcode in MOVING_OPS)


def _passes_widen(inst: Instruction) -> bool:
    """A view, or a convert XLA left unnamed, between a widen and the value it widens."""
    return inst.opcode in _HANDS_ON or (inst.opcode == "convert" and not inst.op_name)
