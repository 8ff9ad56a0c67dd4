"""A cast of a model parameter that only a recompute reads: every op reading it, through views and
across fusion boundaries, is remat-marked, and it casts nothing but the model's parameters (a
layer's slice of the stacked weights, passed unchanged through the loops from ENTRY's parameters).
The program without remat, whose backward recomputes nothing, casts such a parameter in its
backward only for the gradient's own work (a weight's cast for the input gradient), which here
reads a cast of its own: a bias's gradient reads no bias. A cast of a residual the forward saved
(an inner loop's carry, read back from its stack) is another matter: the backward of the program
without remat reads that stack and rounds it too (base draw 235, `linen_remat_scan`).
hloflops.remat.by_signature asks this of a cast it pairs with its forward across a unit dimension."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.inputs import FrameInputs
from hloflops.remat.sites import SiteOp, one_call_site, value_readers
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

_COUNTERS = frozenset({"s32", "s64", "u32", "u64"})
# What hands a value on unchanged (and computes nothing): its readers are the value's readers.
_PASSING = frozenset({"bitcast", "reshape", "transpose", "copy", "broadcast"})


class RecomputeOnlyCasts:
    """One module's readers and loops, to ask `holds` of several casts."""

    def __init__(self, module: Module, ops: list[SiteOp], inputs: FrameInputs) -> None:
        self._module = module
        self._inputs = inputs
        self._loops = {site.computation: (comp.name, inst) for comp, inst in module.instructions()
                       for site in inst.calls if site.role == CallRole.WHILE_BODY}
        self._readers = value_readers(module)
        self._callers = one_call_site(module)
        marked: dict[tuple[str, str], bool] = {}
        for op in ops:  # a callee of several call sites: marked at each
            key = op.key[:2]
            marked[key] = marked.get(key, True) and op.marked
        self._marked: Mapping[tuple[str, str], bool] = marked

    def holds(self, comp_name: str, name: str) -> bool:
        """Is the value a cast of model parameters that only recomputes read?"""
        return self._of_parameters(comp_name, name) and self.only_recomputes(comp_name, name)

    def _of_parameters(self, comp_name: str, name: str) -> bool:
        """Is the value computed from ENTRY's parameters alone (and loop counters), each reaching
        its loop body as a state element the body hands back unchanged?"""
        pending = [(comp_name, name)]
        seen = set(pending)
        while pending:
            inputs = self._inputs.of(*pending.pop())
            if inputs is None:
                return False
            for part in inputs:
                if part[0] == "param":
                    continue
                if part[0] != "state" or len(part) != 3:
                    return False
                body, index = self._module.by_name[part[1]], int(part[2])
                start = self._unchanged_start(body, index)
                if start is None:
                    return False
                if start is not True and start not in seen:
                    seen.add(start)
                    pending.append(start)
        return True

    def _unchanged_start(self, body: Computation, index: int) -> tuple[str, str] | bool | None:
        """Where a loop's state element comes from, the body handing it back unchanged: its
        initial value in the loop's caller; True for an integer scalar (a loop counter, which
        only picks the slice); None where it changes or cannot be followed."""
        element = body.root.operands[index] if body.root is not None and body.root.opcode == "tuple" \
            and index < len(body.root.operands) else None
        inst = body.by_name.get(element) if element is not None else None
        if inst is not None and inst.shape.is_array and not inst.shape.dims and inst.shape.element_type in _COUNTERS:
            return True
        if inst is None or inst.opcode != "get-tuple-element" or int(inst.attributes.get("index", "-1")) != index \
                or body.by_name[inst.operands[0]].opcode != "parameter":
            return None
        loop = self._loops.get(body.name)
        if loop is None:
            return None
        caller = self._module.by_name[loop[0]]
        init = caller.by_name.get(loop[1].operands[0]) if loop[1].operands else None
        if init is None or init.opcode != "tuple" or index >= len(init.operands):
            return None
        return caller.name, init.operands[index]

    def only_recomputes(self, comp_name: str, name: str) -> bool:
        """Is every op reading `name` of `comp_name` remat-marked, and is there one? A value that
        leaves its loop body or the module (a tuple outside a fusion), or reaches a fusion of
        several call sites, is read by what cannot be told: no."""
        pending = [(comp_name, name)]
        seen = set(pending)
        found = False
        while pending:
            comp_name, name = pending.pop()
            comp = self._module.by_name[comp_name]
            steps = self._steps(comp, name)
            if steps is None:
                return False
            for step, is_op in steps:
                if is_op:
                    if not self._marked.get(step, False):
                        return False
                    found = True
                elif step not in seen:
                    seen.add(step)
                    pending.append(step)
        return found

    def _steps(self, comp: Computation, name: str) -> list[tuple[tuple[str, str], bool]] | None:
        """Where the value goes next: (computation, name) of a reading op (True) or of a value
        handing it on (False); None where it goes somewhere not followed."""
        out: list[tuple[tuple[str, str], bool]] = []
        if comp.root is not None and comp.root.name == name and comp.name in self._callers:
            caller = self._callers[comp.name]  # a fusion's output: its readers in the caller
            if caller is None:
                return None
            out.append(((caller[0].name, caller[1].name), False))
        for reader in self._readers.get((comp.name, name), ()):
            step = self._step(comp, name, reader)
            if step is None:
                return None
            out += step
        return out

    def _step(self, comp: Computation, name: str, reader: Instruction
              ) -> list[tuple[tuple[str, str], bool]] | None:
        if reader.opcode in _PASSING:
            return [((comp.name, reader.name), False)]
        if reader.opcode == "fusion":
            callee = self._module.by_name[reader.called(CallRole.FUSION)[0]]
            params = {parameter_number(inst): inst.name for inst in callee.instructions
                      if inst.opcode == "parameter"}
            return [((callee.name, params[i]), False) for i, operand in enumerate(reader.operands)
                    if operand == name and i in params]
        if reader.opcode in ("tuple", "get-tuple-element", "while", "call", "conditional", "parameter"):
            return None  # the value leaves for another computation or a tuple: not followed
        return [((comp.name, reader.name), True)]
