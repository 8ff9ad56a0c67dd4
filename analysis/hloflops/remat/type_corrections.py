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
against the twin's two for `1 - t`), and the pairing's answer stands."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.op_kinds import EXPENSIVE
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import Module

_CORRECTED = "float_type_correction_info"


def type_corrections(module: Module, ops: Iterable[SiteOp], remat: set[SiteKey], backward_loops: set[str]
                     ) -> dict[SiteKey, SiteKey]:
    """The converts wrapping a type-corrected expensive recompute in `remat` (see the module's
    docstring), each mapped to the recompute it belongs to."""
    found: dict[SiteKey, SiteKey] = {}
    for op in ops:
        if op.key not in remat or not op.marked or op.inst.opcode not in EXPENSIVE or len(op.inst.operands) != 1 \
                or op.frame in backward_loops \
                or _CORRECTED not in op.inst.attributes.get("backend_config", ""):
            continue
        comp = module.by_name[op.key[0]]
        users = comp.users
        readers = users.get(op.inst.name, ())
        if len(readers) != 1 or readers[0].opcode != "convert" or not _narrows(readers[0], op.inst):
            continue  # read wide in its fusion: the program without remat widens its stored value there
        found[(op.key[0], readers[0].name, op.key[2])] = op.key
        for name in op.inst.operands:
            widen = comp.by_name.get(name)
            if widen is not None and widen.opcode == "convert" and _widens(widen, comp) \
                    and all(user is op.inst for user in users.get(name, ())):
                found[(op.key[0], name, op.key[2])] = op.key
    return found


def _widens(convert, comp) -> bool:
    """Does the convert widen a narrower float to the type of its result?"""
    source = comp.by_name.get(convert.operands[0])
    return source is not None and _bits(source.shape) < _bits(convert.shape)


def _narrows(convert, inst) -> bool:
    """Does the convert narrow the op's result?"""
    return _bits(convert.shape) < _bits(inst.shape)


def _bits(shape) -> int:
    element = getattr(shape, "element_type", None) or ""
    return {"bf16": 16, "f16": 16, "f32": 32, "f64": 64}.get(str(element).lower(), 0)
