"""The readers a cheap stored value reaches through cheap readers of its own (TPU, after
optimization; hloflops.remat.stored_scales counts its twin copies with `cascaded_readers`).

XLA's instruction fusion copies a cheap producer into each consumer fusion; the consumer, if it is
cheap too (a loop fusion of elementwise ops, slices and converts: the residual gradient's
`add_any` of a scaled cotangent and a slice, narrowed for the matmuls reading it), is in turn
copied into each of its own consumers, and takes the producer along. So where this program stores
a value that a cheap loop fusion reads and hands on to k' readers, the program without remat,
fusing the value into its readers instead, may run it once per reader at the end of that cascade:
the cheap reader stands for k' readers, not one, and its own ops may run k' times where this
program runs them once. Sibling readers that XLA then merges into one multi-output fusion keep a
copy each (no CSE across the merged roots). Held-out TPU 354 (python_loop MLP, offload, tp): the
loss's scale `g * c` is stored by the last matmul's output fusion and read by three fusions, one a
cheap `add_any` narrowed to bf16 for two matmul readers; the twin runs the scale four times (in
the first matmul's fusion, twice in a merged multi-output fusion, once more in the second matmul's
nested `add_any`) and that add twice: multiply truth -384, add -128, where one copy per direct
reader (three) reaches -256 only."""

from __future__ import annotations

from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE
from hloflops.remat.readers import output_readers
from hloparse.ir import CallRole, Computation, Instruction, Module

# At most this many computing ops (converts aside) in a reader that stands for its readers: the
# residual gradient's one add (TPU 354). A reader holding a layer's longer chain (`add_add_fusion`s
# accumulating the residual gradient layer by layer, six ops each, each read by the next: TPU 0) is
# not copied into each reader, nor is the scale with it: the twin runs the scale once per direct
# reader there (three, where a cascade through those chains would count nine). For the same reason
# one level only (`cascaded_readers`' depth): a copy of a copy doubles the work again.
_MOST_OPS = 2

# What a cheap reader's fused computation may hold: elementwise ops XLA duplicates, views, slices
# and the operands that carry no work.
_CHEAP = (DUPLICATED - EXPENSIVE) | frozenset({
    "parameter", "constant", "broadcast", "iota", "bitcast", "reshape", "copy", "transpose",
    "slice", "dynamic-slice", "select", "compare", "clamp"})


def cheap_loop_fusion(module: Module, inst: Instruction) -> Computation | None:
    """The fused computation of a single-output loop fusion of a few cheap ops only (module
    docstring, `_MOST_OPS`)."""
    if inst.opcode != "fusion" or inst.attributes.get("kind") != "kLoop":
        return None
    callees = inst.called(CallRole.FUSION)
    comp = module.by_name.get(callees[0]) if len(callees) == 1 else None
    if comp is None or comp.root.opcode == "tuple":
        return None
    ok = all(i.opcode in _CHEAP for i in comp.instructions)
    computing = sum(1 for i in comp.instructions if i.opcode in DUPLICATED and i.opcode != "convert")
    return comp if ok and computing <= _MOST_OPS else None


def cascaded_readers(module: Module, frame: Computation, readers: list[Instruction],
                     passed_over: frozenset[str], depth: int = 1) -> tuple[int, dict[str, int]]:
    """How many readers at the end of the cascade the `readers` (of one value, in `frame`) stand
    for, each cheap loop fusion among them counted by its own readers' cascade (up to `depth`
    levels); and each such cheap reader's fused computation -> the readers it stands for, where
    more than one (its ops may run that often in the program without remat)."""
    total, cheap = 0, {}
    for reader in readers:
        comp = cheap_loop_fusion(module, reader) if depth else None
        onward = output_readers(frame, reader, None, passed_over=passed_over) if comp is not None else []
        if len(onward) < 2:
            total += 1
            continue
        count, nested = cascaded_readers(module, frame, onward, passed_over, depth - 1)
        total += count
        cheap[comp.name] = count
        cheap.update(nested)
    return total, cheap
