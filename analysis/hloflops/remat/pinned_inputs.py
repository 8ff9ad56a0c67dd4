"""The backward's widens of a checkpoint's input that the checkpoint's barrier pinned narrow
(after optimization, CPU).

A checkpoint's backward re-reads the checkpoint's inputs through its optimization barrier
(prevent_cse), under the checkpoint primitive's own name (`.../transpose(...)/remat2`). Where
the forward computed that input in f32 (float normalization: a bf16 residual add left wide in
its fusion's output), the barrier holds the declared type, so XLA narrows the forward's value
once (`convert(f32 -> bf16)` named `.../remat2`), and every backward fusion reading the narrow
value (the recompute's, the gradient's) widens it again to compute in f32. The program without
remat has no barrier there: its backward reads the forward's wide value as the forward fusion
hands it out, and widens nothing (XLA dropped the round trip). Those backward widens run only
because of remat (base draw 125, `nn.remat` per block of a bf16 LM: per block boundary, the
recompute's layer-norm and residual add and the layer-norm gradient's two fusions each widen
the narrowed input, four widens the program without remat does not run).

The narrowing itself is not counted: the forward fusion reading the narrow value (the next
block's residual add) widens it once, where the program without remat's forward rounds the wide
value there (narrow and widen), the narrowing standing for that rounding. A widen in a forward
fusion is not counted either. Only a narrowing of a forward value counts as the pinned input:
the same name on the narrowing of the checkpoint's input gradient (a backward value) is the
program without remat's rounding of that gradient too.

However many forward fusions read the narrow value (base draws 5 and 129: the next block's
layer norm centers it as well as its residual add reading it), every backward widen counts: the
program without remat narrows the wide value there too (an unnamed convert) for those same
forward readers and nowhere reads it in its backward, which reads the forward's centered value.
The recompute's widens include a lone widen fusion feeding its layer norm's mean, where the
forward's reduction reads the wide value itself; hloflops.remat.widen_counts, which counts the
recompute's widens up to the forward's count (two), misses it. (An earlier guard counting only
where one forward fusion reads the value held base 129 at its baseline through errors of other
values that cancelled; compared value by value the guard was wrong there.) Like
hloflops.remat.widen_counts this rests on how XLA fused the program without remat, which is not
in sight."""

from __future__ import annotations

from hloflops.remat.normalization import NARROW_FLOATS, is_normalization_widen
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# Ops that hand a value on unchanged between the narrowing and the widen.
_VIEWS = frozenset({"bitcast", "copy", "reshape"})
Callers = dict[str, "tuple[Computation, Instruction] | None"]


def pinned_input_widens(module: Module, ops: list[SiteOp]) -> set[SiteKey]:
    """The widens, in backward fusions, of a forward value narrowed under the checkpoint's own
    name (see the module's docstring)."""
    callers: Callers = one_call_site(module)
    found: set[tuple[str, str]] = set()
    for callee, caller in callers.items():
        comp = module.by_name.get(callee)
        if caller is None or comp is None or not _pins_forward_value(module, comp, callers):
            continue
        outer, call = caller
        found |= {(reader.name, widen.name) for reader, widen in _widens_of(module, outer, call.name)
                  if _fusion_phase(module, callers, reader) == "backward"}
    return {op.key for op in ops if op.key[:2] in found}


def _pins_forward_value(module: Module, comp: Computation, callers: Callers) -> bool:
    """Is the fusion's root a narrowing, named by the checkpoint's transpose, of a forward value?"""
    root = comp.root
    if root is None or root.opcode != "convert" or not root.op_name or not root.operands:
        return False
    if root.op_name.rsplit("/", 1)[-1] != "remat2" or phase(root.op_name) != "backward":
        return False
    operand = comp.by_name.get(root.operands[0])
    while operand is not None and operand.opcode in _VIEWS and not operand.op_name:
        operand = comp.by_name.get(operand.operands[0])
    # The narrowing of a wide value held in memory (a fusion's parameter), which the program
    # without remat's backward can read as it is: not the rounding of an op of its own fusion,
    # whose wide result no other op reads (a policy's saved residual, narrowed where computed).
    if operand is None or operand.opcode != "parameter" or operand.shape.element_type != "f32" \
            or root.shape.element_type not in NARROW_FLOATS:
        return False
    source = _producer(module, comp, operand, callers)
    return source is not None and bool(source.op_name) and phase(source.op_name) == "forward"


def _producer(module: Module, comp: Computation, inst: Instruction, callers: Callers,
              depth: int = 8) -> Instruction | None:
    """The named op (or named fusion) whose value `inst` is: out of a fusion through its
    parameter to the call site's operand."""
    while depth and inst is not None:
        depth -= 1
        if inst.opcode in _VIEWS and not inst.op_name:
            inst = comp.by_name.get(inst.operands[0])
        elif inst.opcode == "parameter":
            caller = callers.get(comp.name)
            number = parameter_number(inst)
            if caller is None or number >= len(caller[1].operands):
                return None
            comp, inst = caller[0], caller[0].by_name.get(caller[1].operands[number])
        else:
            return inst
    return None


def _widens_of(module: Module, outer: Computation, name: str) -> list[tuple[Computation, Instruction]]:
    """The float normalization widens of the value `name` of `outer` in the fusions reading it
    (through views in `outer` and inside the fusion)."""
    pending, seen, found = [name], set(), []
    while pending:
        current = pending.pop()
        for user in outer.users.get(current, ()):
            if user.name in seen:
                continue
            seen.add(user.name)
            if user.opcode in _VIEWS:
                pending.append(user.name)
            elif user.opcode == "fusion" and user.called(CallRole.FUSION):
                callee = module.by_name.get(user.called(CallRole.FUSION)[0])
                if callee is None:
                    continue
                numbers = {k for k, operand in enumerate(user.operands) if operand == current}
                inner = [p.name for p in callee.parameters if parameter_number(p) in numbers]
                while inner:
                    value = inner.pop()
                    for reader in callee.users.get(value, ()):
                        if reader.opcode in _VIEWS:
                            inner.append(reader.name)
                        elif is_normalization_widen(reader, callee.by_name.get(reader.operands[0])):
                            found.append((callee, reader))
    return found


def _fusion_phase(module: Module, callers: Callers, comp: Computation) -> str:
    """The phase of a fusion: its call's op_name, else its ops', else its readers' (a lone
    widen XLA wrapped in a fusion of its own carries no name)."""
    caller = callers.get(comp.name)
    if caller is None:
        return "other"
    outer, call = caller
    names = [call.op_name] if call.op_name else [inst.op_name for inst in comp.instructions if inst.op_name]
    if not names:
        names = [user.op_name for user in outer.users.get(call.name, ()) if user.op_name]
    phases = {phase(name) for name in names}
    return phases.pop() if len(phases) == 1 else "other"
