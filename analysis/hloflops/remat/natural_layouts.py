"""Recomputes that materialize a value the forward only lays out (after optimization;
hloflops.remat.pairing calls `natural_layouts` after hloflops.remat.view_copies).

A cheap value that readers want in two layouts (attention's key `x @ w + b`: transposed for the
scores `q @ k^T`, as it is for the query's gradient `dS @ k`) is copied by XLA into one fusion per
layout. The program without remat computes both in its forward: the transposed one for the
scores, the one as it is for its backward. With remat the forward writes only the transposed
layout, and where the recompute's copy of that fusion is the forward's very value (a cross
attention's key reads the encoder's output, a checkpoint input: CSE merged that copy into the
forward's), what is left of the recompute is a fusion handing the value out as it is, for the
backward. That fusion stands in for the one the program without remat builds in its forward:
nothing runs because of remat (base seeds 8, 39, 208: the cross attention's key bias add; 124,
278: the self attention's, counted against the forward's one copy of its value by
`_same_value`).

hloflops.remat.view_copies decides the same where the recompute's fusion writes a transposition
the forward does not; here it writes the value in place, which no unmarked op does (the forward
has no materialized copy the program without remat would read instead). The forward's layout
fusion must compute each cheap op of the recompute's fusion (the same chain, copied alike). The
rule rests on how XLA fused the program without remat: model FLOPs, unsure."""

from __future__ import annotations

from hloflops.remat.fusion_copies import outputs_through
from hloflops.remat.view_copies import CHEAP, transposing_fusion
from hloparse.ir import Computation, Module
from hloflops.remat.sites import SiteKey, SiteOp, fusion_call_counts

# Fused ops besides the cheap ones that a fusion handing out a cheap value may hold.
_MOVES = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "iota"})
# Views that keep a value's elements in place.
_IN_PLACE = frozenset({"bitcast", "reshape"})


def natural_layouts(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> tuple[set[SiteKey], set[SiteKey]]:
    """The recompute less the cheap ops of a remat-marked fusion that computes only cheap
    elementwise ops and hands out the last of them in place, where no unmarked op hands out or
    computes unfused that value, and an unmarked layout fusion (`view_copies._laid_out`) computes
    it and every cheap value of the fusion, writing a transposition. Returns the recompute and
    the ops this rule found to be model FLOPs."""
    if not module.is_scheduled:
        return remat, set()
    callers = fusion_call_counts(module)
    single = {name for name, n in callers.items() if n == 1 and name in module.by_name}
    by_key = {op.key: op for op in ops if op.key[0] in single}
    in_place: dict[str, SiteOp] = {}  # fused computation -> the cheap value it hands out in place
    laid_out: dict[str, SiteOp] = {}  # fused computation -> the cheap value it writes transposed
    for name in single:
        comp = module.by_name[name]
        value = _in_place(comp, by_key)
        if value is not None:
            in_place[name] = value
            continue
        found = transposing_fusion(comp, by_key)
        if found is not None and not found[0].marked and not found[1].marked:
            laid_out[name] = found[0]
    marked = [(name, value) for name, value in in_place.items() if value.marked and value.key in remat]
    if not marked or not laid_out:
        return remat, set()
    # the values an unmarked op computes unfused or hands out of its fusion in place
    outputs = {name: outputs_through(module.by_name[name], _IN_PLACE | {"tuple"})
               for name in callers if name in module.by_name}
    materialized = {op.exact for op in ops if not op.marked and
                    (op.key[0] not in outputs or op.inst.name in outputs[op.key[0]])}
    values: dict[str, set] = {}  # fused computation -> the values its ops compute
    for op in ops:
        if op.key[0] in laid_out:
            values.setdefault(op.key[0], set()).add(op.exact)
    layouts: dict[object, list[str]] = {}
    for name, value in laid_out.items():
        layouts.setdefault(value.exact, []).append(name)
    # the values the recompute also computes elsewhere (its copy of the forward's layout fusion,
    # where CSE did not merge it: softmax's `e * (1 / s)`, whose forward fusion reads the stored
    # `e`; that copy is the recompute, and which of the two is counted is the pairing's)
    elsewhere = {op.exact for op in ops if op.marked and op.inst.opcode in CHEAP
                 and (op.key[0] not in in_place or in_place[op.key[0]].exact != op.exact)}
    decided: set[SiteKey] = set()
    for name, value in marked:
        if value.exact in materialized or value.exact in elsewhere:
            continue
        cheap = [op for op in ops if op.key[0] == name and op.marked and op.inst.opcode in CHEAP]
        if not all(op.key in remat for op in cheap):
            continue
        if any(all(op.exact in values.get(forward, ()) for op in cheap) for forward in layouts.get(value.exact, ())):
            decided |= {op.key for op in cheap}
    return remat - decided, decided


def _in_place(comp: Computation, by_key: dict[SiteKey, SiteOp]) -> SiteOp | None:
    """The cheap elementwise value a fusion of cheap ops hands out in place (its root, through
    bitcasts and reshapes), else None."""
    if any(inst.opcode not in CHEAP and inst.opcode not in _MOVES for inst in comp.instructions):
        return None
    inst = comp.root
    while inst is not None and inst.opcode in _IN_PLACE:
        inst = comp.by_name.get(inst.operands[0]) if inst.operands else None
    if inst is None or inst.opcode not in CHEAP:
        return None
    return by_key.get((comp.name, inst.name, 0))
