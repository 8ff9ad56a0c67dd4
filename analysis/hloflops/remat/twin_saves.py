"""Recomputed cheap values the program without remat copies as often into the fusions that save
its residuals (hloflops.remat.pairing calls `copied_into_twin_saves` after `saved_by_the_twin`).

In a loop form (a scan over layers) the backward loop of the program with remat computes, in its
gradient fusion, the residuals the linearization reads (gelu's `x`, `0.5 * (1 + t)`, `3 * x * x`,
`1 - t`), one fusion for all; the program without remat computes them in its forward and saves
each into a stack by a fusion of its own, into which XLA copies the residual's cheap chain. A
cheap value on the chains of k residuals is thus computed k times by the saving fusions of the
program without remat, where the program with remat computes it once per gradient fusion that
holds it, and once per fusion of its forward. The recompute fusions of the backward loop split
where the program without remat's forward splits (both materialize what the gradient reads:
gelu's tanh), so their copies of a value stand for that forward's copies, one each. What the
recompute copies beyond `forward + gradient - saves` copies runs in the program without remat
too: model FLOPs (more seeds 33, 148 and base 132, 148: the bias add `x = h + b` under
gelu, a residual itself and on the chain of `3 * x * x`, copied into the recompute's tanh and
product fusions and counted twice, where the program without remat copies it into four fusions
of its forward and this program into one fusion of its forward and one of its gradient).

A residual is counted once per value (the program without remat saves it once, however many
gradient fusions copy it), and residuals are also what a recompute fusion hands out to a matmul
outside the recompute, where a recomputed matmul reads it too or the forward builds it too (a
weight's gradient reads the recomputed layer norm output `(x - mean) * r * scale + bias`, gelu's
product; the keys' gradient reads the query): the program without remat saves that value by a
fusion copying its cheap chain (base seeds 16, 76, more 116, 122, 126: the layer norm's ops, the
projections' bias adds, once counted as recompute). A backward-only fusion of a value another
fusion computes for the recompute's matmuls (the key laid out for the query's gradient) stands for
the saving fusion: its copies count with the recompute's. Where `forward + gradient - saves` is
negative, the program without remat runs the value more often than this one (gelu's bias add
`h`: saved itself, in `3 * h * h` and in the product, five copies against this program's four):
as many counted recomputes of its opcode and size in the fusions copying it are model FLOPs in
the per-opcode sum (`_offsetting`; the tanh fusion's `h + 0.044715 * h**3`)."""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.names import OpNames, ends_with, inner_tail
from hloflops.remat.saved_copies import read_by_backward_matmul
from hloflops.remat.sites import one_call_site
from hloflops.remat.across_loops import cheap_chain
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, largest_array, shape_key
from hloflops.scopes import phase
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.values import Val
from hloparse.ir import Module

# What a saving fusion copies: cheap elementwise ops (never a transcendental or a divide).
CHEAP = DUPLICATED - EXPENSIVE - {"convert"}
# Ops that compute nothing: a residual's chain passes through them.
_MOVES = frozenset({"broadcast", "bitcast", "reshape", "copy", "transpose"})
# Views of a parameter: what a fusion reads as its input.
_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose", "dynamic-slice", "slice"})


def copied_into_twin_saves(module: Module, ops: list[SiteOp], remat: set[SiteKey], by_class: set[SiteKey],
                           op_names: OpNames, decided: set[SiteKey] = frozenset()
                           ) -> tuple[set[SiteKey], set[SiteKey], set[SiteKey]]:
    """The recompute less the copies of a recomputed cheap value beyond `forward + gradient -
    saves` (module docstring): `forward` is how many copies the forward computes of each value
    whose copies are all remat-marked (`_Forward`, in another loop body), `gradient` the
    remat-named copies in the backward loop's gradient fusions (fusions where an op outside the
    recompute reads a remat-named cheap op: jvp's own), `saves` the residuals (what those ops
    read) whose chain of remat-named cheap ops in the fusion holds the value.

    A count the pairing by value gave a class's copy in a gradient fusion (`by_class`: the first
    in module order) that the fusion rules then took back (a gradient fusion's copy is the
    model's) moves to a recompute copy of that value, up to `forward + gradient - saves` (more seed
    142: gelu's `1 + tanh` counted in the gradient fusion and taken back, its recompute in the
    product fusion left uncounted); never to a copy another rule `decided` (a stand-in for the
    copy the program without remat makes saving the value: hloflops.remat.saved_copies; held-out
    more seeds 282, 291, relu's recompute for a weight gradient). Returns the recompute, the
    copies taken out (model FLOPs) and those counted in their place."""
    if not module.is_scheduled or is_tpu_module(module):
        # TPU nests the recompute's chains into the fusions of the backward's matmuls, beside the
        # forward's (hloflops.remat.fusion_copies): its fusions split otherwise than here.
        return remat, set(), set()
    entry = module.entry.name
    fused = fused_outputs(module)
    by_site: dict[tuple[str, int], dict[str, SiteOp]] = {}
    for op in ops:
        if op.key[0] in fused and op.frame != entry:
            by_site.setdefault((op.key[0], op.key[2]), {})[op.key[1]] = op
    gradient: dict[Val, int] = {}
    saves: dict[Val, int] = {}
    in_gradient: set[SiteKey] = set()
    saved_as: dict[Val, set[Val]] = {}  # value -> the residuals whose chain holds it
    gradient_sites: set[tuple[str, int]] = set()
    for (comp_name, site), members in by_site.items():
        residuals = {id(r): r for op in members.values() if not op.marked and op.op_name
                     for name in op.inst.operands
                     for r in (_through_moves(members, name),)
                     if r is not None and r.named and r.inst.opcode in CHEAP and r.key not in remat}
        if not residuals:
            continue
        for op in members.values():
            if op.named and op.inst.opcode in CHEAP and op.key not in remat:
                gradient[op.exact] = gradient.get(op.exact, 0) + 1
                in_gradient.add(op.key)
        for r in residuals.values():
            for v in _chain(members, r):
                saved_as.setdefault(v, set()).add(r.exact)
        gradient_sites.add((comp_name, site))
    handed, stand_ins = _read_by_backward_matmuls(module, by_site, gradient_sites, fused, op_names)
    for v, held in handed.items():
        saved_as.setdefault(v, set()).update(held)
    saves = {v: len(held) for v, held in saved_as.items()}
    if not saves:
        return remat, set(), set()
    by_value: dict[Val, list[SiteOp]] = {}
    for op in ops:
        if op.exact in saves:
            by_value.setdefault(op.exact, []).append(op)
    forward = _Forward(module, ops)
    settled = decided
    decided = set()
    short: list[tuple[list[SiteOp], int]] = []  # values the program without remat computes more often
    added: set[SiteKey] = set()
    for v, n in saves.items():
        members = by_value[v]
        if not all(op.marked for op in members):
            continue  # the forward's own copy is in sight: the pairing by value counted
        copies = sorted((op for op in members if op.key not in in_gradient and op.named),
                        key=lambda op: (op.key not in remat, op.order))
        if not copies:
            continue
        in_forward = forward.count(members)
        if not in_forward:
            continue  # no forward in another loop body (an accumulation loop runs both passes)
        relaid = sum(op.key in stand_ins for op in members)
        keep = in_forward + gradient.get(v, 0) + relaid - n
        if keep < 0:
            short.append((members, -keep))
            keep = 0
        decided |= {op.key for op in copies[keep:] if op.key in remat}
        lost = sum(op.key in by_class for op in members if op.key in in_gradient)
        uncounted = [op for op in copies[:keep] if op.key not in remat and op.key not in settled]
        added |= {op.key for op in uncounted[:lost]}
    decided |= _offsetting(ops, short, (remat - decided) | added, in_gradient)
    return (remat - decided) | added, decided, added


def _offsetting(ops: list[SiteOp], short: list[tuple[list[SiteOp], int]], remat: set[SiteKey],
                in_gradient: set[SiteKey]) -> set[SiteKey]:
    """For each value the program without remat computes `n` times more often than this one (its
    saving fusions copy it into more residuals' chains than this program's fusions hold it: gelu's
    bias add `h`, saved itself, in `3 * x * x` and in the product the next weight's gradient
    reads), `n` counted recomputes of its opcode and size in the recompute fusions that copy it
    (gelu's `h + 0.044715 * h**3` in the tanh's fusion): remat FLOPs are never negative per op,
    so the twin's extra copies are taken off the ops they offset in the per-opcode sum."""
    out: set[SiteKey] = set()
    by_fusion: dict[tuple[str, int], list[SiteOp]] = {}
    for op in ops:
        by_fusion.setdefault((op.key[0], op.key[2]), []).append(op)
    for members, n in short:
        own = {op.key for op in members}
        sites = {(op.key[0], op.key[2]) for op in members if op.key not in in_gradient}
        kind = (members[0].inst.opcode, shape_key(members[0].inst.shape))
        offsets = sorted((op for site in sites for op in by_fusion.get(site, ())
                          if op.key in remat and op.key not in own and op.key not in out
                          and (op.inst.opcode, shape_key(op.inst.shape)) == kind), key=lambda op: op.order)
        out |= {op.key for op in offsets[:n]}
    return out


class _Forward:
    """How many copies the forward computes, in another loop body, of a value whose copies are all
    remat-marked: unmarked ops outside the backward of its opcode and result, whose name ends with
    the copy's name inside its checkpoint and whose operands are of the same kinds (`_kinds`), the
    most in one frame."""

    def __init__(self, module: Module, ops: list[SiteOp]):
        self.module = module
        self.pool: dict[tuple, list[SiteOp]] = {}
        for op in ops:
            if not op.marked and op.op_name and phase(op.op_name) != "backward":
                self.pool.setdefault((op.inst.opcode, shape_key(op.inst.shape)), []).append(op)

    def count(self, members: list[SiteOp]) -> int:
        frames = {m.frame for m in members}
        best = 0
        for m in members:
            if not m.named or not m.op_name:
                continue
            tail, kinds = inner_tail(m.op_name), _kinds(self.module, m)
            pool = self.pool.get((m.inst.opcode, shape_key(m.inst.shape)), ())
            per_frame = Counter((twin.frame, twin.key[2]) for twin in pool
                                if twin.frame not in frames and ends_with(twin.op_name, tail)
                                and _alike(kinds, _kinds(self.module, twin)))
            best = max(best, max(per_frame.values(), default=0))
        return best


def _kinds(module: Module, op: SiteOp) -> tuple[str, ...]:
    """What each operand is: `input` where it is a view of the computation's parameter (a fusion's
    operand, a slice of a saved stack), a broadcast by what it broadcasts, else its opcode."""
    comp = module.by_name[op.key[0]]
    out = []
    for name in op.inst.operands:
        out.append(_kind(comp, name))
    return tuple(out)


def _kind(comp, name: str) -> str:
    inst = comp.by_name.get(name)
    while inst is not None and inst.opcode in _VIEWS and inst.operands:
        inst = comp.by_name.get(inst.operands[0])
    if inst is None or inst.opcode in ("parameter", "get-tuple-element"):
        return "input"
    if inst.opcode == "broadcast" and inst.operands:
        return "broadcast of " + _kind(comp, inst.operands[0])
    return inst.opcode


def _alike(mine: tuple[str, ...], theirs: tuple[str, ...]) -> bool:
    """Operands of the same kinds, in either order for two; an input (computed in another fusion)
    is alike anything computed in place but a broadcast."""
    def same(a, b):
        return a == b or ("input" in (a, b) and not (a + b).startswith("broadcast") and "broadcast" not in a + b)
    if len(mine) != len(theirs):
        return False
    if all(same(a, b) for a, b in zip(mine, theirs)):
        return True
    return len(mine) == 2 and same(mine[0], theirs[1]) and same(mine[1], theirs[0])


def _through_moves(members: Mapping[str, SiteOp], name: str) -> SiteOp | None:
    op = members.get(name)
    while op is not None and op.inst.opcode in _MOVES and op.inst.operands:
        op = members.get(op.inst.operands[0])
    return op


def _chain(members: Mapping[str, SiteOp], residual: SiteOp) -> set[Val]:
    """The values of the remat-named cheap ops a residual is computed from inside its fusion, itself
    included (through moves; not past a parameter or an op of another kind)."""
    out: set[Val] = set()
    pending, seen = [residual], set()
    while pending:
        op = pending.pop()
        if op.key in seen:
            continue
        seen.add(op.key)
        if op.inst.opcode in _MOVES:
            pass
        elif op.named and op.inst.opcode in CHEAP:
            out.add(op.exact)
        else:
            continue
        pending += [members[name] for name in op.inst.operands if name in members]
    return out


def _read_by_backward_matmuls(module: Module, by_site: dict[tuple[str, int], dict[str, SiteOp]],
                              gradient_sites: set[tuple[str, int]], fused: dict[str, frozenset[str]],
                              op_names: OpNames) -> tuple[dict[Val, set[Val]], set[SiteKey]]:
    """The residuals a recompute fusion of a backward loop hands out to a matmul outside the
    recompute (a weight's gradient reads the recomputed layer norm output and gelu's product, the
    keys' gradient the projected query): each value of their chains, with the residuals whose
    chain holds it. And the copies in such a fusion that no recomputed matmul reads, where another
    fusion computes its value for the recompute (the key, once for the recomputed scores and once
    for the query's gradient): the program without remat's forward builds only the first, its
    saving fusion standing for the second."""
    sites = one_call_site(module)
    readers: dict[tuple[str, str], list] = {}
    for comp, inst in module.instructions():
        for operand in inst.operands:
            readers.setdefault((comp.name, operand), []).append(inst)
    handing: list[tuple[str, dict[str, SiteOp], list[SiteOp], bool]] = []
    for_recompute: set[Val] = set()  # what fusions the recompute reads hand out
    for (comp_name, site), members in by_site.items():
        call = sites.get(comp_name)
        if (comp_name, site) in gradient_sites or call is None:
            continue
        outputs = [members[name] for name in fused[comp_name] if name in members]
        outputs = [op for op in outputs if op.named and op.inst.opcode in CHEAP]
        if not outputs:
            continue
        where = (call[0].name, call[1])
        recomputed = read_by_backward_matmul(module, where, readers, op_names, recompute=True)
        if read_by_backward_matmul(module, where, readers, op_names):
            handing.append((comp_name, members, outputs, recomputed))
        elif not recomputed:
            recomputed = True  # read by the recompute alone (its scores' fusion, unnamed)
        if recomputed:
            for_recompute |= {op.exact for op in outputs}
    out: dict[Val, set[Val]] = {}
    stand_ins: set[SiteKey] = set()
    for comp_name, members, outputs, recomputed in handing:
        comp = module.by_name[comp_name]
        for r in outputs:
            # XLA copies into the saving fusion only the chain it would copy into any consumer:
            # not past an op reading two whole values, unless the value leaves reshaped
            # (hloflops.remat.across_loops); an output reading two it stores as computed.
            chain = cheap_chain(comp, frozenset({r.inst.name}))
            if r.inst.name not in chain or \
                    (_reads_two_whole(comp, r.inst) and comp.root.opcode not in ("bitcast", "reshape")):
                continue
            for name in chain:
                op = members.get(name)
                if op is not None and op.named and op.inst.opcode in CHEAP:
                    out.setdefault(op.exact, set()).add(r.exact)
        if not recomputed and any(op.exact in for_recompute for op in outputs):
            stand_ins |= {op.key for op in members.values() if op.named and op.inst.opcode in CHEAP}
    return out, stand_ins


def _reads_two_whole(comp, inst) -> bool:
    size = largest_array(inst.shape)
    return sum(o in comp.by_name and comp.by_name[o].opcode not in ("broadcast", "iota")
               and largest_array(comp.by_name[o].shape) >= size for o in inst.operands) >= 2
