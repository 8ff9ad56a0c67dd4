"""The converts TPU wraps around a recomputed expensive op computed in another type (after
optimization, TPU).

TPU computes a bf16 transcendental in f32: it widens the operand, runs the op wide and narrows its
result, and marks the op with the type it stood for (`float_type_correction_info` in its backend
config). The converts are the op's own work, one bf16 op written as three. Where the op is a
recompute of its own (an expensive op, which XLA's fusion never duplicates, paired as recompute: a
tanh the backward recomputes for a weight's gradient, TPU draw 7) and its value leaves the fusion
only narrowed, the narrow and the widen only it reads run because of remat as it does, as sure as
its pairing. Their value numbers are the recompute's alone (the widen reads what the recompute
reads, a round trip or a saved residual), so no pairing finds them: float normalization's rule
leaves such a widen unsure (hloflops.remat.normalization), and the narrow pairs by signature at
best.

Not where the fusion reads the op's wide result (a gradient fusion computing `1 - t` from the
recomputed `t`): the program without remat reads its forward's stored bf16 value there and widens
it, one widen for one. Only a unary op's: a divide's widens (softmax's `e / s`, TPU draws 3 and 54)
would count more than the two programs differ by. Not in a backward loop body whose forward runs
in another loop body (a scan's): the program without remat saves the linearization's residuals
into its stacks, narrowing each (tanh's `1 - t` beside `t`), converts this program does not run;
how many rests on how XLA fused its saving fusions (TPU draw 37: the recompute's two converts
against the twin's two for `1 - t`): the pairing's answer stands, less the converts
hloflops.remat.saved_residual_narrows gives back for those residuals.

TPU widens each bf16 constant a fusion's f32 ops read inside that fusion (`convert(broadcast(c))`):
the widen is those ops' work, one per fusion that computes them, not a value of its own, though its
value number is the same in every fusion and pairs by value with the forward's widens. Where its
readers in the fusion are all recompute-marked cheap ops left out of remat (the recompute loop's
stack-writing fusion of a scan, TPU draw 29: it copies gelu's chain, whose forward copies the
recompute's other fusion took, and the program without remat has that fusion too), the widen takes
their answer (`widens_of_uncounted_ops`): out of remat, unsure as they are."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import Computation, Instruction, Module

_CORRECTED = "float_type_correction_info"


def type_corrections(module: Module, ops: Iterable[SiteOp], remat: set[SiteKey], backward_loops: set[str]
                     ) -> dict[SiteKey, SiteKey]:
    """The converts wrapping a type-corrected expensive recompute in `remat` (see the module's
    docstring), each mapped to the recompute it belongs to."""
    found: dict[SiteKey, SiteKey] = {}
    for op in ops:
        if op.key not in remat or not op.marked or op.frame in backward_loops or not is_type_corrected(op.inst):
            continue
        # Read wide in its fusion (no wrappers): the program without remat widens its stored value there.
        for name in narrowed_wrappers(module.by_name[op.key[0]], op.inst):
            found[(op.key[0], name, op.key[2])] = op.key
    return found


def is_type_corrected(inst: Instruction) -> bool:
    """A unary expensive op TPU computes in a wider type than the one it stands for."""
    return inst.opcode in EXPENSIVE and len(inst.operands) == 1 \
        and _CORRECTED in inst.attributes.get("backend_config", "")


def narrowed_wrappers(comp: Computation, inst: Instruction) -> list[str]:
    """Where the op's value leaves only narrowed (its one reader a narrowing convert): that
    narrow and each widen of an operand only the op reads; else none."""
    readers = comp.users.get(inst.name, ())
    if len(readers) != 1 or readers[0].opcode != "convert" or not bits(readers[0].shape) < bits(inst.shape):
        return []
    return [readers[0].name] + [name for name in inst.operands if is_widen(comp, name)
                                and all(user is inst for user in comp.users.get(name, ()))]


def is_widen(comp: Computation, name: str) -> bool:
    """Is the instruction a convert widening a narrower float to the type of its result?"""
    inst = comp.by_name.get(name)
    source = comp.by_name.get(inst.operands[0]) if inst is not None and inst.opcode == "convert" \
        and inst.operands else None
    return source is not None and 0 < bits(source.shape) < bits(inst.shape)


def bits(shape) -> int:
    """The width of a float element type (0 for any other)."""
    element = getattr(shape, "element_type", None) or ""
    return {"bf16": 16, "f16": 16, "f32": 32, "f64": 64}.get(str(element).lower(), 0)


def widens_of_uncounted_ops(module: Module, ops: Iterable[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The widens of a broadcast constant in `remat` whose readers in their fusion are all marked
    cheap ops left out of `remat` (module docstring): they take those ops' answer."""
    by_key = {op.key: op for op in ops}
    found: set[SiteKey] = set()
    for key in remat:
        op = by_key.get(key)
        comp = module.by_name.get(key[0])
        if op is None or comp is None or not is_widen(comp, key[1]) or not _of_constant(comp, op.inst):
            continue
        readers = [by_key.get((key[0], user.name, key[2])) for user in comp.users.get(key[1], ())]
        if readers and all(reader is not None and reader.marked and reader.key not in remat
                           and reader.inst.opcode in DUPLICATED for reader in readers):
            found.add(key)
    return found


def _of_constant(comp: Computation, inst: Instruction) -> bool:
    """Does the convert read a broadcast of a constant?"""
    source = comp.by_name.get(inst.operands[0])
    return source is not None and source.opcode == "broadcast" and bool(source.operands) \
        and getattr(comp.by_name.get(source.operands[0]), "opcode", None) == "constant"
