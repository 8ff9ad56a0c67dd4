"""The bfloat16 stacks a scan's program without remat keeps for residuals this program's backward
computes in f32 inside one fusion (TPU, after optimization).

Under a checkpoint in a scanned layer loop, the backward loop's recompute of a block (gelu's `t`,
`1 - t`, `0.5 * (1 + t)`, `3 * h**2`) is fused by XLA into the gradient fusion that reads it: the
recomputed values stay f32 inside that fusion and no convert touches them. The program without remat
cannot fuse across its loops: its forward loop stores each residual jax's linearization hands the
backward in a bfloat16 stack (float normalization's narrowing of the f32 value, fused into the
stack's dynamic-update-slice) and its backward loop widens the slice it reads back in the gradient
fusion. So per residual and trip it runs two slice-sized converts this program never runs (vtpu 260:
four gelu residuals, the twin's forward fusion narrows them into four stacks and its gradient fusion
widens the four slices; convert +19.9M before). Remat FLOPs are judged per opcode: those converts are
taken off this program's (`RematIndex.twin_stores`, as hloflops.remat.stored_twin_copies does for
CPU's stacks).

The sign, in this program: an f32 op named in the checkpoint's recompute scope inside a fusion of a
backward while body (trips > 1), read in the same fusion by an op named outside that scope (the
gradient's). jax names the forward's part of the linearization for the recompute: a value it computes
that the transpose reads is a residual, which the program without remat must carry across its loops.
A recompute value handed out of the fusion (narrowed here too) is no such residual: both programs
narrow and widen it. Nor is a residual computed from a value this program stacks itself (a policy's
saved matmul output, sliced from the loop's input): that stack's widen stands for part of the twin's,
how much rests on what jax saved (`_reads_stored`). Dead without a scan: an unrolled loop's twin
fuses its residuals as this program does."""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.names import REMAT_SCOPE, OpNames
from hloflops.remat.sites import backward_loop_bodies
from hloflops.remat.type_corrections import bits
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

_NOT_VALUES = frozenset({"parameter", "constant", "broadcast", "convert", "bitcast", "reshape", "copy",
                         "transpose", "iota", "tuple", "get-tuple-element", "fusion"})


def fused_residual_stacks(module: Module, op_names: OpNames, remat: set[tuple[str, str]]
                          ) -> dict[tuple[str, str], tuple[int, int, int]]:
    """A convert of each gradient fusion holding fused residuals -> (sure, 0, 0): the twin's stack
    round trips (a narrow and a widen per residual and trip) taken off as a share of that convert's
    FLOPs (the module docstring). The convert carries them: one of the fusion's slice-sized converts,
    preferably one not counted as remat (a counted one's +1 is replaced, so it carries one fewer)."""
    if not module.is_scheduled or not is_tpu_module(module):
        return {}
    out: dict[tuple[str, str], tuple[int, int, int]] = {}
    for _, body in backward_loop_bodies(module, op_names):
        seen: set[str] = set()
        for fusion in body.instructions:
            if fusion.opcode != "fusion":
                continue
            for callee in fusion.called(CallRole.FUSION):
                if callee in seen:
                    continue
                seen.add(callee)
                fused = module.by_name[callee]
                residuals = _residuals(fused, op_names)
                if not residuals or _reads_stored(module, body, fusion, fused, residuals):
                    continue
                carried = _carrier(fused, residuals, remat)
                if carried is not None:
                    key, counted = carried
                    out[key] = (2 * len(residuals) - (1 if counted else 0), 0, 0)
    return out


def _residuals(comp: Computation, op_names: OpNames) -> list[Instruction]:
    """The recompute's f32 values a gradient op reads inside this fusion."""
    names = {inst.name: op_names.of(comp.name, inst) for inst in comp.instructions}
    readers: dict[str, list[Instruction]] = {}
    for inst in comp.instructions:
        for operand in inst.operands:
            readers.setdefault(operand, []).append(inst)
    found = []
    for inst in comp.instructions:
        if inst.opcode in _NOT_VALUES or bits(inst.shape) != 32 or REMAT_SCOPE not in names[inst.name]:
            continue
        if any(names[r.name] and REMAT_SCOPE not in names[r.name] and r.opcode not in _NOT_VALUES
               for r in readers.get(inst.name, ())) and _from_narrow_values(comp, inst):
            found.append(inst)
    return found


_SLICING = frozenset({"parameter", "get-tuple-element", "dynamic-slice", "slice", "bitcast", "reshape", "copy",
                      "constant", "tuple"})


def _reads_stored(module: Module, body: Computation, fusion: Instruction, fused: Computation,
                  residuals: list[Instruction]) -> bool:
    """Is a residual computed from a value this program stores itself (a policy's saved matmul
    output, sliced from its stack by the loop)? This program's stack of it and the widen of its
    slice stand for part of the twin's stacks, how many rests on what jax saved (tpu 37, utpu 181:
    tanh's `t` and `1 - t` from a saved pre-activation, convert exact without a count): no count."""
    params = {inst.name: inst for inst in fused.instructions if inst.opcode == "parameter"}
    todo, seen, read = list(residuals), set(), set()
    while todo:
        cur = todo.pop()
        if cur.name in seen:
            continue
        seen.add(cur.name)
        if cur.name in params:
            read.add(parameter_number(cur))
        todo += [fused.by_name[name] for name in cur.operands if name in fused.by_name]
    for number in read:
        if number >= len(fusion.operands) or fusion.operands[number] not in body.by_name:
            continue
        source = body.by_name[fusion.operands[number]]
        if source.opcode in _SLICING:
            return True
        if source.opcode == "fusion" and all(inst.opcode in _SLICING for callee in source.called(CallRole.FUSION)
                                             for inst in module.by_name[callee].instructions):
            return True
    return False


def _from_narrow_values(comp: Computation, inst: Instruction) -> bool:
    """Is the value computed from 16-bit inputs alone (each widened here by float normalization)?
    jax computes such a value in bfloat16 and the twin stacks it narrow; one that reads an f32 input
    (layer norm's statistics: flax computes it in f32) is an f32 residual, stacked without a convert."""
    todo, seen = [inst], set()
    while todo:
        cur = todo.pop()
        if cur.name in seen:
            continue
        seen.add(cur.name)
        if cur.opcode in ("parameter", "constant"):
            if bits(cur.shape) == 32:
                return False
            continue
        if cur.opcode == "convert" and cur.operands and bits(comp.by_name[cur.operands[0]].shape) == 16:
            continue  # float normalization's widen of a bfloat16 value
        todo += [comp.by_name[name] for name in cur.operands if name in comp.by_name]
    return True


def _carrier(comp: Computation, residuals: list[Instruction], remat: set[tuple[str, str]]
             ) -> tuple[tuple[str, str], bool] | None:
    """A convert of the residuals' size in the fusion, one not counted as remat first."""
    size = residuals[0].shape.num_elements
    if any(r.shape.num_elements != size for r in residuals):
        return None
    converts = [inst for inst in comp.instructions if inst.opcode == "convert" and inst.shape.num_elements == size]
    converts.sort(key=lambda inst: (comp.name, inst.name) in remat)
    return ((comp.name, converts[0].name), (comp.name, converts[0].name) in remat) if converts else None
