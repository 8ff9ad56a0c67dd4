"""A layer loop XLA unrolled whose twin may keep it: the first layer's input gradient and the
weight stacks' narrows (range hinges, the low end only).

XLA may unroll a scan's loop of few trips: each layer's `dynamic_slice` of a weight stack becomes
a static `slice` of it (still named `.../while/body/.../dynamic_slice`), and on TPU the slice takes
in the narrowing the matmul needs (an f32 stack sliced straight into bf16). Unrolled, the backward
pass's input gradient of layer 0 is dead (the scan's input is not differentiated) and pruned: of
each matmul's backward pair (input gradient, weight gradient) the input gradient runs one layer
fewer. The program without remat may keep its loop (held-out TPU 206, 232: an offloading policy
on a sharded mesh unrolled only the program with remat): its body computes the carried input
gradient on every trip, and it narrows each whole weight stack in one convert before the loop,
since a loop's dynamic slice takes in no convert. Nothing in this program says whether its twin
unrolled too, so both are hinges that lower the range's low end, never a count:
- each surviving input-gradient matmul of the pruned kind, once (`twin_copies` of 1);
- each narrowing slice of a stack, a convert of its elements (`twin_narrows` of 1).
The pruned kind: among the backward matmuls named alike (`transpose(...)/while/body/...`), a
result shape that `layers - 1` of them hold (modulo the stack's `layers`), in a group whose count
is one short of a multiple of `layers`: a pair per layer, one input gradient missing."""

from __future__ import annotations

from collections import Counter

from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

Key = tuple[str, str]  # (computation, instruction)

_BODY = "/while/body/"
_MATMULS = frozenset({"dot", "convolution"})


def unrolled_stack_slices(module: Module) -> tuple[dict[Key, int], int]:
    """The narrowing static slices of a weight stack an unrolled scan left (each with 1: a
    convert of its elements the twin may run on the whole stack), and the stack's layers (the
    largest leading dimension sliced; 0 where none)."""
    found: dict[Key, int] = {}
    layers = 0
    callers = _fusion_callers(module)
    seen: set[tuple] = set()  # (the stack, the slice): a fusion XLA cloned slices the same layer
    for comp, inst in module.instructions():
        if inst.opcode != "slice" or not _is_unrolled_index(inst):
            continue
        source = comp.by_name.get(inst.operands[0]) if inst.operands else None
        if source is None or not source.shape.dims or len(source.shape.dims) != len(inst.shape.dims):
            continue
        if inst.shape.dims[0] != 1 or source.shape.dims[0] < 2 or inst.shape.dims[1:] != source.shape.dims[1:]:
            continue  # one whole layer of a stack, no window of it
        layers = max(layers, source.shape.dims[0])
        layer = (_stack(module, callers, comp, source), inst.attributes.get("slice"))
        if inst.shape.element_type != source.shape.element_type and layer not in seen:
            seen.add(layer)
            found[(comp.name, inst.name)] = 1
    return found, layers


def pruned_input_gradients(module: Module, layers: int) -> set[Key]:
    """The backward matmuls of a kind one layer short (module docstring): the input gradients
    that survive where XLA pruned the first layer's."""
    if layers < 2:
        return set()
    groups: dict[str, list[tuple[Key, tuple]]] = {}
    for comp, inst in module.instructions():
        op_name = inst.metadata.get("op_name") or ""
        if inst.opcode in _MATMULS and "transpose(" in op_name and _BODY in op_name:
            groups.setdefault(op_name, []).append(((comp.name, inst.name), tuple(inst.shape.dims)))
    found: set[Key] = set()
    for members in groups.values():
        if len(members) % layers != layers - 1:
            continue
        shapes = Counter(shape for _, shape in members)
        short = [shape for shape, n in shapes.items() if n % layers == layers - 1]
        if len(short) == 1:  # one kind one layer short, the rest whole
            found |= {key for key, shape in members if shape == short[0]}
    return found


def _fusion_callers(module: Module) -> dict[str, tuple[Computation, Instruction]]:
    """Each fused computation's (first) caller."""
    callers: dict[str, tuple[Computation, Instruction]] = {}
    for comp, inst in module.instructions():
        for callee in inst.called(CallRole.FUSION):
            callers.setdefault(callee, (comp, inst))
    return callers


_PASSING = frozenset({"copy-start", "copy-done", "copy", "bitcast"})


def _stack(module: Module, callers: dict[str, tuple[Computation, Instruction]], comp: Computation,
           inst: Instruction) -> tuple[str, str]:
    """The value a stack's slice reads, through its fusions' parameters and copies (a host
    offload's copy-start and copy-done), as (computation, instruction)."""
    for _ in range(16):
        if inst.opcode == "parameter" and comp.name in callers:
            comp, caller = callers[comp.name]
            number = parameter_number(inst)
            name = caller.operands[number] if number is not None and number < len(caller.operands) else None
        elif inst.opcode in _PASSING and inst.operands:
            name = inst.operands[0]
        else:
            break
        nxt = comp.by_name.get(name) if name else None
        if nxt is None:
            break
        inst = nxt
    return comp.name, inst.name


def _is_unrolled_index(inst: Instruction) -> bool:
    """A static slice jax named a loop's dynamic slice: the loop's index became a constant."""
    op_name = inst.metadata.get("op_name") or ""
    return _BODY in op_name and op_name.endswith("dynamic_slice")
