"""The converts with which the program without remat saves a residual it computes wide from a
narrow constant (after optimization, TPU, a backward loop body whose forward runs in another loop
body: a scan's).

TPU computes a bf16 transcendental in f32 (hloflops.remat.type_corrections): a recompute of tanh
in the backward loop is `narrow(tanh(widen(x)))`, two converts beside the tanh, which the pairing
counts as recompute where the recompute's value leaves its fusion narrowed (for a weight's
gradient). jax linearizes tanh as `(g + g * t) * (1 - t)`: its residuals are `t` and `1 - t`. The
program without remat computes `1 - t` in its forward and saves it into a stack, in bf16: its
saving fusion widens the bf16 constant `1` to subtract the wide `t` (one convert of the value's
size) and narrows the difference to store it (another). This program computes `1 - t` in its
gradient fusion instead, from its recomputed wide `t` and the same widened constant, where the
program without remat widens the stored residual: one widen for one. So each such residual, a
cheap remat-named op of the gradient reading a wide type-corrected recompute and a widen of a
narrow constant, costs the program without remat two converts this program does not run, which
offset two counted converts of the recompute's wrappers in the per-opcode sum (TPU draw 37:
convert +4,096 where the two programs run as many converts).

Only a constant's widen: a residual computed from two values (`x * t`) reads values the program
without remat's forward widens for its own use too."""

from __future__ import annotations

from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.type_corrections import is_type_corrected, is_widen, narrowed_wrappers
from hloparse.ir import Computation, Instruction, Module

_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose", "broadcast"})
# The linearization's residuals of a constant and a value (tanh's `1 - t`).
_RESIDUAL_OPS = frozenset({"add", "subtract"})


def saved_residual_narrows(module: Module, ops: list[SiteOp], remat: set[SiteKey], backward_loops: set[str]
                           ) -> set[SiteKey]:
    """Counted converts to give back: two per residual `c - t` (or `c + t`) a gradient
    fusion of a backward loop body computes from a wide type-corrected recompute `t` and a widened
    narrow constant `c` (module docstring), taken from the converts wrapping the loop body's
    type-corrected recomputes of `t`'s size whose value leaves narrowed."""
    residuals: dict[str, set[tuple]] = {}  # per loop body, the residuals' values (value, shape)
    wrappers: dict[str, list[SiteOp]] = {}
    by_key = {op.key: op for op in ops}
    for op in ops:
        if op.frame not in backward_loops or not op.marked or not is_type_corrected(op.inst):
            continue
        comp = module.by_name[op.key[0]]
        names = narrowed_wrappers(comp, op.inst)  # leaves narrowed: its narrow, and the widen only it reads
        if names:
            keys = [(op.key[0], name, op.key[2]) for name in names]
            wrappers.setdefault(op.frame, []).extend(by_key[key] for key in keys if key in by_key)
            continue
        for reader in comp.users.get(op.inst.name, ()):
            if reader.opcode in _RESIDUAL_OPS and len(reader.operands) == 2 and \
                    any(_is_widened_constant(comp, name) for name in reader.operands if name != op.inst.name):
                site = by_key.get((op.key[0], reader.name, op.key[2]))
                if site is not None and site.named:
                    residuals.setdefault(op.frame, set()).add((site.exact, reader.shape.dims))
    out: set[SiteKey] = set()
    for frame, found in residuals.items():
        for _, kind in sorted(found, key=str):
            offsets = sorted((op for op in wrappers.get(frame, ()) if op.key in remat and op.key not in out
                              and op.inst.shape.dims == kind), key=lambda op: op.order)
            out |= {op.key for op in offsets[:2]}
    return out


def _is_widened_constant(comp: Computation, name: str) -> bool:
    """A widen (through views) of a constant narrower than its result, through broadcasts."""
    inst = _through_views(comp, comp.by_name.get(name))
    if inst is None or not is_widen(comp, inst.name):
        return False
    source = _through_views(comp, comp.by_name.get(inst.operands[0]))
    return source is not None and source.opcode == "constant"


def _through_views(comp: Computation, inst: Instruction | None) -> Instruction | None:
    while inst is not None and inst.opcode in _VIEWS and inst.operands:
        inst = comp.by_name.get(inst.operands[0])
    return inst
