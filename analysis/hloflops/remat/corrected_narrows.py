"""The narrow TPU writes after a cheap op it computes in a wider type follows that op (after
optimization, TPU).

TPU computes a bf16 elementwise op in f32 and narrows its result: the op carries the type it stands
for (`float_type_correction_info` in its backend config) and its one reader is an unnamed
`convert` to bf16, one bf16 op written as two. The narrow has no op_name of its own; the pairing
names it after what it reads (hloflops.remat.marks.inherit_names) and pairs it by signature with
a forward narrow of its shape, as remat. Where a later rule took the op itself out of remat (a
recomputed relu nested in a backward matmul's fusion as the program without remat nests its own,
hloflops.remat.offloaded_residuals; a backward loop body's copy the program without remat makes
too, hloflops.remat.backward_loop_copies), the narrow stayed counted: held-out TPU draws 87, 88 and
114 (relu under an offload policy) counted convert +192, +128 and +3,072 where the program without
remat runs the same narrows. It runs exactly when the op does: it takes the op's answer, as sure
as the op's. Only where one of TPU's rules (hloflops.remat.by_platform) took the op out for a
reason of its own: where the pairing left it out, counting k of a value's n recompute copies, which
copies count is by order, and a narrow of one left out may stand for the counted ones' (TPU draw
116, a layer norm's `(x - m) * r` recomputed in several fusions: convert exact, -1,024 with it).
And only where the op reads an offloaded residual back from the host (the offload policy's `h`):
there the program without remat computes the same copy from its stored value and narrows it as
this one. A recompute reading a recomputed matmul's f32 output where the forward read it narrowed
and widened (TPU draw 22, no offload) narrows where the program without remat's copy does not:
its narrow is remat though the op is not (convert exact; -3,072 with it).
(hloflops.remat.type_corrections settles the converts around an expensive recompute the other way,
into remat.)"""

from __future__ import annotations

from typing import Iterable, Iterator

from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE
from hloflops.remat.offloaded_sum_narrows import read_from_host
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.remat.type_corrections import bits
from hloparse.ir import Module

_CORRECTED = "float_type_correction_info"


def corrected_op_narrows(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> Iterator[tuple[SiteOp, SiteOp]]:
    """Each narrow in `remat` that is the one reader of a type-corrected cheap op (elementwise, not
    expensive: hloflops.remat.type_corrections settles those), to fewer bits than the op computes
    in: (the narrow, the op)."""
    by_key = {op.key: op for op in ops}
    for op in ops:
        inst = op.inst
        if op.key not in remat or inst.opcode != "convert" or len(inst.operands) != 1:
            continue
        comp = module.by_name[op.key[0]]
        source = comp.by_name.get(inst.operands[0])
        if source is None or source.opcode not in DUPLICATED or source.opcode in EXPENSIVE or \
                _CORRECTED not in source.attributes.get("backend_config", ""):
            continue
        of = by_key.get((op.key[0], source.name, op.key[2]))
        if of is not None and len(comp.users.get(source.name, ())) == 1 and 0 < bits(inst.shape) < bits(source.shape):
            yield op, of


def narrows_of_uncounted_ops(module: Module, ops: Iterable[SiteOp], remat: set[SiteKey],
                             taken_out: set[SiteKey]) -> dict[SiteKey, SiteKey]:
    """Each inherited narrow in `remat` of a type-corrected cheap marked op in `taken_out` (counted
    by the pairing, taken out of `remat` by a TPU rule), the narrow its one reader (module
    docstring) -> that op's key."""
    ops = list(ops)
    by_key = {op.key: op for op in ops}
    callers = one_call_site(module)
    found: dict[SiteKey, SiteKey] = {}
    for op, of in corrected_op_narrows(module, ops, remat):
        if not op.inherited or not of.marked or of.key in remat or of.key not in taken_out:
            continue
        comp, source = module.by_name[op.key[0]], of.inst
        # The op's operand, or its widen where TPU widens a bf16 operand for an f32 op (utpu 224's relu).
        wide = [name for name in map(lambda name: _through_widen(comp, name), source.operands)
                if getattr(comp.by_name.get(name), "opcode", None) == "parameter"]
        if len(wide) != 1 or not read_from_host(module, callers, by_key, comp, wide[0], op.key[2]):
            continue
        found[op.key] = of.key
    return found


def _through_widen(comp, name: str) -> str:
    """The value a `convert` widens, else the value itself."""
    inst = comp.by_name.get(name)
    return inst.operands[0] if inst is not None and inst.opcode == "convert" and len(inst.operands) == 1 else name
