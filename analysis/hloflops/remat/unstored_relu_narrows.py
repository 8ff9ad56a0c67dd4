"""A recomputed relu the forward never stores, narrowed in a small fusion of its own: the program
without remat may copy the relu into each of its readers, each copy a widen and a narrow
(hloflops.remat.pairing puts `unstored_relu_narrows` in `twin_copies`, the range's low end).

TPU draws 305, 319, 331 (wtpu) and 254 (vtpu), relu MLPs in bf16 whose checkpoint recomputes the
matmul: this program fuses the bias add and relu into the forward matmul fusion, narrowed once at
the root of a matmul-operand fusion nested in the next layer's matmul fusion (nothing stores the
relu), and the recompute narrows the relu once more in a loop fusion of its own (`maximum` of its
input and zero, then `convert`): two casts per layer. The twin stores the bias add's output narrowed
to bf16 and copies the cheap relu into each of its readers (the next layer's matmul fusion and the
fusion saving the relu to a bf16 stack for the weight gradient), each copy widening, taking the max
and narrowing again: five casts per layer, so the convert's truth is below what the recompute's
narrow counts by one more than the twin's readers. How XLA fused the twin is not in this program
(it may store the relu and copy nothing), so the copies are a hinge, never a sure share.

The twin's readers are this program's copies of the relu (each forward copy stands for a reader
of the forward, each recompute for the backward's reader the twin feeds from its stack): with `r`
of them the twin runs `2 r + 1` casts (the stored narrow of the bias add among them) where this
program runs `r`, a hinge of `r + 1` rows beyond what the recompute counts, shared among the
recompute's narrows. Where a forward copy widens a 16-bit value (this program stores the narrowed
bias add itself, TPU 152, 194), that copy's widen and the stored narrow are the twin's too: two
fewer per such copy. Where the widen reads the copy's own matmul emitting 16 bits (TPU 471), the
narrow is folded into the matmul here, while the twin may compute it in f32 and narrow it to store:
only the widen is the twin's too, one fewer per such copy.
"""

from __future__ import annotations

from hloflops.remat.names import ends_with, inner_tail, is_remat_named
from hloflops.remat.sites import Key
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module

_NARROW = {"bf16", "f16"}
_SMALL = {"parameter", "constant", "broadcast", "convert", "maximum", "bitcast"}


def _relu_narrow(comp: Computation) -> Instruction | None:
    """The `maximum` (with a broadcast constant) a fused computation's root narrows to 16 bits."""
    root = comp.root
    if root.opcode != "convert" or root.shape.element_type not in _NARROW or len(root.operands) != 1:
        return None
    value = comp.operand(root, 0)
    if value.opcode != "maximum" or value.shape.element_type in _NARROW:
        return None
    if not any(o.opcode == "broadcast" and o.operands and comp.operand(o, 0).opcode == "constant"
               for o in (comp.by_name[n] for n in value.operands)):
        return None
    return value


def _widens(comp: Computation, value: Instruction) -> int:
    """The casts a widening convert the relu's `maximum` reads shares with the twin: two where it
    widens a narrowed 16-bit value (stored, or narrowed here: that narrow is this program's too),
    one where it widens the fusion's own matmul emitting 16 bits (no convert here stands for the
    narrow the twin may store it with: TPU 471), none without a widen."""
    for o in (comp.by_name[n] for n in value.operands):
        if o.opcode == "convert" and o.operands and comp.operand(o, 0).shape.element_type in _NARROW:
            return 1 if comp.operand(o, 0).opcode in ("dot", "convolution") else 2
    return 0


def _in_differentiated_loop(op_name: str, wrapper: str) -> bool:
    """Does a `while` run inside the op's differentiated frame (`jvp(` forward, `transpose(` backward):
    a scanned layer, whose residuals the twin's forward loop pushes to stacks? A loop around the
    whole gradient (accumulation) or none keeps the forward's value live: no stacking reader."""
    parts = op_name.split("/")
    start = next((i for i, part in enumerate(parts) if part.startswith(wrapper)), None)
    return start is not None and "while" in parts[start + 1:]


def unstored_relu_narrows(module: Module) -> dict[Key, int]:
    """The recompute's relu narrows (a small fusion of its own) whose forward copies are all
    nested matmul-operand fusions: key -> the twin's extra casts per narrow (readers + 1)."""
    callers: dict[str, list[tuple[Computation, Instruction]]] = {}
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            for name in inst.called(CallRole.FUSION):
                callers.setdefault(name, []).append((comp, inst))
    nested = {comp.name for sites in callers.values() for comp, _ in sites} & set(callers)  # fusion bodies
    recomputes: list[tuple[Computation, Instruction, Instruction]] = []
    forwards: list[tuple[Computation, Instruction]] = []
    for name in callers:
        comp = module.by_name.get(name)
        value = _relu_narrow(comp) if comp is not None else None
        if value is None or not value.op_name:
            continue
        if is_remat_named(value):
            if _in_differentiated_loop(value.op_name, "transpose(") \
                    and all(i.opcode in _SMALL for i in comp.instructions):
                recomputes.append((comp, comp.root, value))
        elif phase(value.op_name) == "forward" and _in_differentiated_loop(value.op_name, "jvp("):
            forwards.append((comp, value))
    bodies = {name for _, inst in module.instructions() for name in inst.called(CallRole.WHILE_BODY)}

    def in_loop(name: str) -> bool:  # the fusion body's enclosing unfused computation is a while body
        seen: set[str] = set()
        while name in callers and name not in seen:
            seen.add(name)
            name = callers[name][0][0].name
        return name in bodies

    # A loop XLA removed (one trip) is gone from the twin too: no stacks, no stacking reader.
    recomputes = [r for r in recomputes if in_loop(r[0].name)]
    forwards = [f for f in forwards if in_loop(f[0].name)]
    found: dict[Key, int] = {}
    for comp, narrow, value in recomputes:
        tail = inner_tail(value.op_name)
        # every forward maximum of this value, anywhere: each must be a nested narrow's (nothing stores it)
        same = [(c, i) for c in module.computations for i in c.instructions
                if i.opcode == "maximum" and i.op_name and not is_remat_named(i)
                and phase(i.op_name) == "forward" and i.shape.dims == value.shape.dims
                and ends_with(i.op_name, tail)]
        copies = [(c, v) for c, v in forwards if v.shape.dims == value.shape.dims and ends_with(v.op_name, tail)]
        if not copies or len(same) != len(copies) or {id(v) for _, v in copies} != {id(i) for _, i in same}:
            continue
        if not all(site.name in nested for c, _ in copies for site, _ in callers[c.name]):
            continue
        # a matmul operand: the nested fusion's reader in its enclosing computation is a dot or convolution
        if not all(any(u.opcode in ("dot", "convolution") for u in site.users[call.name])
                   for c, _ in copies for site, call in callers[c.name]):
            continue
        mates = [r for r in recomputes if r[1].shape.dims == narrow.shape.dims
                 and inner_tail(r[2].op_name) == tail]
        readers = sum(len(callers[c.name]) for c, _ in copies) + sum(len(callers[r[0].name]) for r in mates)
        # a forward copy widening a stored 16-bit value: this program stores the narrowed bias add itself,
        # its widen and that narrow are the twin's too (TPU 194: the twin's extra is its stack's copy);
        # widening its own matmul's 16-bit output, only the widen is (TPU 471: the twin narrows to store)
        widened = sum(len(callers[c.name]) * _widens(c, v) for c, v in copies)
        if readers + 1 - widened > 0:
            found[(comp.name, narrow.name)] = -(-(readers + 1 - widened) // len(mates))
    return found
