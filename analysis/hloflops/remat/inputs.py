"""Which inputs of its frame an op's value is computed from (ENTRY's parameters by number, a loop
body's state by tuple index), through fusions and calls.

A recompute and its forward compute the same value, so they read the same inputs: the same
layer's weights, and activations computed from the same earlier weights. An op of another layer
reads other weights (or activations computed from more of them). The pairing by signature
(hloflops.remat.pairing) asks this of a recompute and a candidate twin in the same frame: where
the two read different inputs, they are not one value, whatever their shapes and names say.
"""

from __future__ import annotations

from hloparse.ir import CallRole, Module, parameter_number

COLLECTIVES = frozenset({"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"})
# Collectives whose tuple form is one collective per operand (element i from operand i alone).
ELEMENTWISE_COLLECTIVES = frozenset({"all-gather", "all-reduce", "reduce-scatter"})
Inputs = frozenset  # of ("param", n) / ("state", index) / ("opaque", computation, instruction)


class FrameInputs:
    """`of(computation, instruction)`: the frame inputs the instruction's value is computed from,
    or None where that cannot be told (a callee run from several call sites)."""

    def __init__(self, module: Module):
        self.module = module
        self.memo: dict[tuple[str, str], Inputs | None] = {}
        # a fused or called computation's one caller: (caller computation, instruction)
        self.caller: dict[str, tuple[str, str] | None] = {}
        self.loop_bodies: set[str] = set()
        for comp in module.computations:
            for inst in comp.instructions:
                for site in inst.calls:
                    if site.role in (CallRole.WHILE_BODY, CallRole.WHILE_CONDITION):
                        self.loop_bodies.add(site.computation)
                    elif site.role in (CallRole.FUSION, CallRole.CALL):
                        known = site.computation in self.caller
                        self.caller[site.computation] = None if known else (comp.name, inst.name)

    def of(self, computation: str, instruction: str) -> Inputs | None:
        key = (computation, instruction)
        if key in self.memo:
            return self.memo[key]
        # An explicit stack: a chain of thousands of ops needs no Python recursion.
        pending = [key]
        while pending:
            top = pending[-1]
            if top in self.memo:
                pending.pop()
                continue
            parts, missing = self._parts(*top)
            if missing:
                pending += missing
                continue
            pending.pop()
            if parts is None:
                self.memo[top] = None
            else:
                found: set = set()
                for part in parts:
                    if isinstance(part, tuple) and part and part[0] == "ref":
                        got = self.memo[part[1]]
                        if got is None:
                            found = None  # type: ignore[assignment]
                            break
                        found |= got
                    else:
                        found.add(part)
                self.memo[top] = None if found is None else frozenset(found)
        return self.memo[key]

    def _parts(self, computation: str, instruction: str):
        """What the value reads directly: frame inputs, and ("ref", key) of other ops; with the
        keys not yet worked out."""
        comp = self.module.by_name[computation]
        inst = comp.by_name[instruction]
        if inst.opcode == "parameter":
            if computation == self.module.entry_name:
                return [("param", parameter_number(inst))], []
            if computation in self.loop_bodies:
                return [("state", computation)], []
            caller = self.caller.get(computation)
            if caller is None:
                return None, []
            site_comp, site_inst = caller
            operands = self.module.by_name[site_comp].by_name[site_inst].operands
            n = parameter_number(inst)
            if n >= len(operands):
                return None, []
            refs = [(site_comp, operands[n])]
        elif inst.opcode == "get-tuple-element" and computation in self.loop_bodies and inst.operands and \
                comp.by_name[inst.operands[0]].opcode == "parameter":
            return [("state", computation, inst.attributes.get("index", "0"))], []
        elif inst.opcode == "while":
            return [("opaque", computation, instruction)], []
        elif inst.opcode == "get-tuple-element" and (element := self._element(comp, inst)) is not None:
            refs = [element]
        elif inst.opcode == "custom-call" and inst.custom_call_target == "AsyncCollectiveDone" and \
                (collectives := [o for o in inst.operands if o in comp.by_name
                                 and comp.by_name[o].opcode in COLLECTIVES]):
            # TPU's async collective: the done returns what its collective computes; its other
            # operands are the destination buffer (aliased, overwritten) and sync flags.
            refs = [(computation, o) for o in collectives]
        else:
            refs = [(computation, o) for o in inst.operands if o in comp.by_name]
            inlined = [s.computation for s in inst.calls if s.role in (CallRole.FUSION, CallRole.CALL)]
            if inlined:
                callee = self.module.by_name.get(inlined[0])
                if callee is None or not callee.instructions or self.caller.get(callee.name) is None:
                    return None, []
                refs = [(callee.name, callee.root.name)]
        missing = [r for r in refs if r not in self.memo]
        return [("ref", r) for r in refs], missing

    def _element(self, comp, inst) -> tuple[str, str] | None:
        """The op a get-tuple-element takes, where its tuple is built in sight (a tuple, or the
        root tuple of a fusion or call): one element reads only its own inputs, not those of
        the tuple's other elements (TPU's async collective fusions return their overlapped
        work, the collective's buffers and sync flags in one tuple)."""
        source = comp.by_name.get(inst.operands[0]) if inst.operands else None
        if source is None:
            return None
        index = int(inst.attributes.get("index", "0"))
        if source.opcode in ELEMENTWISE_COLLECTIVES and source.shape.is_tuple and \
                len(source.operands) == len(source.shape.tuple_shapes) and index < len(source.operands):
            # A combined (variadic) all-reduce: element i reduces operand i alone. XLA's combiner
            # puts a forward activation's all-reduce and a recompute's in one instruction.
            return comp.name, source.operands[index]
        where, tup = comp.name, source
        inlined = [s.computation for s in source.calls if s.role in (CallRole.FUSION, CallRole.CALL)]
        if inlined:
            callee = self.module.by_name.get(inlined[0])
            if callee is None or not callee.instructions or self.caller.get(callee.name) is None:
                return None
            where, tup = callee.name, callee.root
        if tup.opcode != "tuple":
            return None
        return (where, tup.operands[index]) if index < len(tup.operands) else None
