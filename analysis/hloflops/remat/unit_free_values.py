"""Values equal but for unit dimensions (after optimization): the forward of a recompute whose
value number matched nothing because one op of its chain holds its elements with a unit
dimension more or less (hloflops.remat.pairing asks `StoredTwins.copies` beside
hloflops.remat.stored_forwards).

A layer norm keeps its variance `[b, t, 1]`: XLA bitcasts the `[b, t]` sums for the recompute's
`rsqrt` and not for the forward's (hloflops.remat.expensive_chains pairs the two rsqrts), and
every value computed from it, the normalized input, the attention over it, the residual sum
`x + attn @ wo`, is numbered apart from its forward's though it holds the same elements. Where
the forward stores such a value (computed once, handed out of its fusion in place:
`StoredForwards.values`), the program without remat stores it too, and its backward reads it
there; the recompute's copies of it, in its own fusions and the gradient fusions alike, all run
because of remat (base seeds 105 and 136, a Python loop of attention layers: the second layer's
residual sum, recomputed in eleven fusions, eight of them gradient fusions that `fusion_copies`
took for the program without remat's own copies).

The numbering here (`UnitFree`) is a second one, asked only for such classes: each op's opcode,
result attributes, operands' numbers and result shape, where a bitcast, reshape or copy that only
adds or drops unit dimensions is its operand, and an elementwise op's shape counts without its
unit dimensions; inputs and what XLA fuses are looked through as `values` does (a fusion is its
root, a fused parameter its caller's operand). It is not the pairing's numbering: numbering every
value so moves classes the pairing splits by how many copies the forward computes
(hloflops.remat.expensive_chains). Here it only names the forward twin of a class whose copies are
all remat-marked, and only a twin the forward computes once and stores counts."""

from __future__ import annotations

from hloflops.remat.expensive_chains import unit_free
from hloflops.remat.op_kinds import DUPLICATED, UNIQUE, result_attributes, unit_free_shape
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.stored_forwards import StoredForwards
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# Ops that hand on their operand's elements; where the result holds them in the same places but
# for unit dimensions (`unit_free`), the op is its operand.
_VIEWS = frozenset({"bitcast", "reshape", "copy"})
# Ops whose value is their operands' elementwise: their shape counts without unit dimensions.
_ELEMENTWISE = DUPLICATED | frozenset({"convert", "select", "clamp", "compare", "and", "or", "not", "xor"})


class UnitFree:
    """Value numbers equal for values that hold the same elements but for unit dimensions
    (see the module docstring). Numbered on demand, each op once."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.callers: dict[str, tuple[Computation, Instruction] | None] = {}
        for comp, inst in module.instructions():
            if inst.opcode == "fusion":
                for callee in inst.called(CallRole.FUSION):
                    self.callers[callee] = None if callee in self.callers else (comp, inst)
        self.numbers: dict[tuple[str, str], int] = {}
        self.keys: dict[tuple, int] = {}

    def of(self, comp_name: str, name: str) -> int:
        """The number of an instruction's value (iterative: chains may be thousands deep)."""
        stack = [(comp_name, name)]
        while stack:
            key = stack[-1]
            if key in self.numbers:
                stack.pop()
                continue
            comp = self.module.by_name[key[0]]
            inst = comp.by_name[key[1]]
            sources = self._sources(comp, inst)
            missing = [source for source in sources if source not in self.numbers]
            if missing:
                stack += missing
                continue
            stack.pop()
            self.numbers[key] = self._number(comp, inst, [self.numbers[source] for source in sources])
        return self.numbers[(comp_name, name)]

    def _sources(self, comp: Computation, inst: Instruction) -> list[tuple[str, str]]:
        """What the value is read from: the one op it is (a view, a fusion's root, a fused
        parameter's caller operand) or its operands."""
        passed = self._passed(comp, inst)
        if passed is not None:
            return [passed]
        if inst.opcode in UNIQUE or inst.opcode == "parameter" or inst.opcode in ("while", "call", "conditional"):
            return []
        return [(comp.name, operand) for operand in inst.operands]

    def _passed(self, comp: Computation, inst: Instruction) -> tuple[str, str] | None:
        if inst.opcode == "parameter":
            caller = self.callers.get(comp.name)
            number = parameter_number(inst)
            if caller is not None and 0 <= number < len(caller[1].operands):
                return caller[0].name, caller[1].operands[number]
            return None
        if inst.opcode == "fusion":
            callees = inst.called(CallRole.FUSION)
            if len(callees) == 1 and callees[0] in self.module.by_name:
                return callees[0], self.module.by_name[callees[0]].root.name
            return None
        if inst.opcode in _VIEWS and len(inst.operands) == 1:
            source = comp.by_name.get(inst.operands[0])
            if source is not None and not inst.shape.is_tuple and not source.shape.is_tuple and \
                    unit_free(source.shape) is not None and unit_free(source.shape) == unit_free(inst.shape):
                return comp.name, source.name
        return None

    def _number(self, comp: Computation, inst: Instruction, operands: list[int]) -> int:
        if self._passed(comp, inst) is not None:
            return operands[0]
        if not operands and (inst.opcode in UNIQUE or inst.opcode in ("parameter", "while", "call", "conditional")):
            key: tuple = ("input", comp.name, inst.name)  # a value of its own
        else:
            shape = inst.shape
            if inst.opcode in _ELEMENTWISE and not shape.is_tuple:
                shape_id: object = unit_free_shape(shape)
            else:
                shape_id = str(shape)
            applied = tuple(tuple(i.opcode for i in self.module.by_name[callee].instructions)
                            for callee in inst.called(CallRole.TO_APPLY) if callee in self.module.by_name)
            constant = inst.attributes.get("literal", "") if inst.opcode == "constant" else ""
            key = (inst.opcode, shape_id, result_attributes(inst), applied, constant, tuple(operands))
        return self.keys.setdefault(key, len(self.keys))


class StoredTwins:
    """The forward twin of a class of remat-marked copies numbered apart from it but for unit
    dimensions (`UnitFree`), where the forward computes it once and stores it."""

    def __init__(self, module: Module, ops: list[SiteOp], stored: StoredForwards) -> None:
        self.stored = stored
        self.unit_free: UnitFree | None = None
        self.module = module
        # unmarked ops, by what the class's first op must share with them: opcode, unit-free shape
        self.forward: dict[tuple, list[SiteOp]] = {}
        for op in ops:
            if not op.marked and not op.inst.shape.is_tuple and op.exact in stored.values:
                self.forward.setdefault(self._kind(op), []).append(op)

    @staticmethod
    def _kind(op: SiteOp) -> tuple:
        return op.inst.opcode, unit_free_shape(op.inst.shape)

    def copies(self, members: list[SiteOp]) -> set[SiteKey]:
        """All the class's copies, where every one is remat-marked and the one forward op of a
        stored value holds the same elements (else none)."""
        if any(not m.marked for m in members) or members[0].inst.shape.is_tuple or \
                members[0].inst.opcode == "convert":
            return set()
        candidates = self.forward.get(self._kind(members[0]))
        if not candidates:
            return set()
        if self.unit_free is None:
            self.unit_free = UnitFree(self.module)
        number = self.unit_free.of(*members[0].key[:2])
        twins = {op.exact for op in candidates if op.frame == members[0].frame and
                 self.unit_free.of(*op.key[:2]) == number}
        if len(twins) != 1:
            return set()
        return {m.key for m in members}

