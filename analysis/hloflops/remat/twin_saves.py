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

`saves` counts a residual read once per reading: a read that an earlier gradient fusion makes
already (its reading ops of values read there before, from a residual holding the value) is no
further save. A backward loop that hands one gradient to readers XLA cannot fuse together (the
input's gradient, the weight's, transposed, and the bias's reduce) copies the residuals' chains
and their readers into each of those fusions, where the program without remat saves each residual
once; and XLA may build one gradient in several fusions, one per layout its consumers want (a
layer norm's backward through `x - mean`), which the program without remat repeats too, reading
its one saved residual. Reads by other values are other saves: that program saves `x - mean`
for each of them (hk_layer_stack attention, more seeds 84, 94, 98: one save per distinct residual
left subtract over by the layer norm's copies, 131,088 on seed 84; one per gradient fusion short
by 196,592). A recompute fusion that hands its value
reshaped to the weights' gradients (hloflops.remat.saved_copies) stands for one more saving
copy of the values it holds, settled by that rule or not (a recomputed matmul may read it too):
the program without remat copies the chain into the fusion saving that value for the weight's
gradient. Counted once in each rule, such a copy left the twin's saving fusions one short
(the catalogue's lm_scan_block_dots_no_batch, base seeds 131, 135: add, multiply and subtract
under-counted, gelu's `x` and `1 + tanh`, a layer norm's `x - mean`). Where
`forward + gradient - saves` exceeds the recompute copies left to count, the rest are copies in
gradient fusions, up to `gradient - residuals` (the copies beyond one per residual), and so is
that many of a value only gradient fusions compute (jvp's `3 * x * x` and `1 - tanh`), in a
backward loop whose forward runs in another loop body. Not where the forward count exceeds the
recompute copies: it then matched ops of other values under one name (unnamed layer norms, or
gelu's `0.5 * (1 + tanh)` beside the other `mlp/mul`s), and the gradient fusions keep the
model's count. The forward's copies of a value are counted per value where the forward ops of its
name tell values apart: those of the recompute's abstract value or computation tree (a layer norm's
mean `sum(x) / n` against its mean square `sum(x * x) / n`, both `div`: counting both had left one
backward copy of the mean remat, base seeds 16, 135 and more 116). Where none of them holds it, a recompute
that reads as a loop input what the forward computes in place (the matmul output an offload policy
saved) matches the forward ops computing the same on that input: the mean's two copies, not the
mean square's (held-out more seed 247: three gradient copies of the mean left uncounted).

Residuals are also what a recompute fusion hands out to a matmul outside the recompute, where a
recomputed matmul reads it too or the forward builds it too (a weight's gradient reads the
recomputed layer norm output `(x - mean) * r * scale + bias` or gelu's product, the keys'
gradient the query): the program without remat saves that value by a fusion copying its cheap
chain (base seeds 16, 76, more 116, 126: the layer norm's ops, the projections' bias adds, once
counted as recompute). Each such handed residual is one more save, once per residual value and
not where a gradient fusion reads that residual already (counted above), and a weight-gradient
stand-in fusion whose output is such a residual is not counted again. The cap on gradient copies
stays the gradient fusions' own saves. So is a recompute fusion's value a reduce of the backward
reads (a library fusion around one: the rsqrt's gradient `sum((x - mean) * g)` reading a stored
`x - mean`, held-out base seeds 236, 291): the twin saves it for that reduce. A square whose
coefficient `2 * x` XLA folded away (hloflops.remat.folded_coefficients) leaves the gradient a
product `x * broadcast(2 * s)`: its read of `x` is the read of the twin's residual `2 * x`, a
residual apart from `x` (which the twin saves too where other readers take it). A backward-only
fusion of a value another fusion computes for the recompute's matmuls (the key laid out for the
query's gradient) stands for the saving fusion: its copies count with the recompute's. Where
`forward + gradient - saves` is negative, the program without remat runs the value more often than
this one (gelu's bias add `h`: saved itself, in `3 * h * h` and in the product, five copies
against this program's four): as many counted recomputes of its opcode and size in the fusions
copying it are model FLOPs in the per-opcode sum (`_offsetting`; the tanh fusion's `h + 0.044715 * h**3`).
The same holds for a cheap value this program's forward stores (a policy saves gelu's `h`) and its
backward reads back from the stack, which `_offsetting` never sees (no copy of it is recomputed):
the recompute fusions reading it stand for forward fusions of the program without remat that
compute it, and each residual a gradient fusion computes from it (`3 * h * h`, or `h` itself) for a
fusion saving it that copies it; what these exceed this program's forward copies offsets counted
recomputes in the reading fusions (hloflops.remat.stored_twin_copies; more seed 37: add +20,480 before).
A recomputed value XLA stores rather than copies never joins a saving fusion's chain: one reading
two whole values (the residual add `x + attn`) or read only by such ops in its fusion (the
projection's bias add under it). The program without remat computes it once, in its forward fusion,
and saves it as computed; every copy the backward loop makes of it, recompute or gradient, runs
because of remat (`_stored_once`; held-out more seed 167, hk.layer_stack attention: add -61,440
before, the recompute's 5 of 10 copies of each counted against saving fusions that read it)."""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.folded_coefficients import coefficient_offsets, folded_read, folded_squares
from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.across_loops import cheap_chain, reads_two_whole
from hloflops.remat.names import REMAT_SCOPE, OpNames, ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, largest_array, shape_key
from hloflops.remat.saved_copies import read_by_backward_matmul, sites_and_readers
from hloflops.scopes import phase
from hloflops.remat.sites import FUSION_BOUNDARY, SiteKey, SiteOp, across_fusion_boundary, one_call_site
from hloflops.remat.stored_twin_copies import stored_offsets
from hloflops.remat.values import Val
from hloparse.ir import CallRole, Instruction, Module

# What a saving fusion copies: cheap elementwise ops (never a transcendental or a divide).
CHEAP = DUPLICATED - EXPENSIVE - {"convert"}
# Ops that compute nothing: a residual's chain passes through them.
_MOVES = frozenset({"broadcast", "bitcast", "reshape", "copy", "transpose"})
# Views of a parameter: what a fusion reads as its input.
_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose", "dynamic-slice", "slice"})


def copied_into_twin_saves(module: Module, ops: list[SiteOp], remat: set[SiteKey], by_class: set[SiteKey],
                           op_names: OpNames, decided: set[SiteKey] = frozenset(),
                           stand_in_sites: set[tuple[str, int]] = frozenset(),
                           twin_copies: dict[SiteKey, int] | None = None
                           ) -> tuple[set[SiteKey], set[SiteKey], set[SiteKey]]:
    """The recompute less the copies of a recomputed cheap value beyond `forward + gradient -
    saves` (module docstring): `forward` is how many copies the forward computes of each value
    whose copies are all remat-marked (`_Forward`, in another loop body), `gradient` the
    remat-named copies in the backward loop's gradient fusions (fusions where an op outside the
    recompute reads a remat-named cheap op: jvp's own), `saves` the residuals (what those ops
    read) whose chain of remat-named cheap ops in the fusion holds the value, once for each read
    no earlier gradient fusion repeats (the same reading values), with the fusions that hand the
    value reshaped to weight gradients (`stand_in_sites`, hloflops.remat.saved_copies.
    weight_gradient_copies, and those `decided` settled): one saving copy each. What the
    recompute copies left cannot carry goes to gradient copies (module docstring), counted but
    not returned with those counted in place of a taken-back count: how many rests on how XLA
    split both programs' fusions (the report's range holds it).

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
    # A square's coefficient `2 * x` the twin saves, which XLA folded away here: one recompute of the
    # square's size given back (hloflops.remat.folded_coefficients), and the gradient's read of `x`
    # where the fold left it (`x * broadcast(2 * s)`) is the read of that residual, not of `x`.
    folded = folded_squares(module, ops)
    remat, decided, added = _copied(module, ops, remat, by_class, op_names, decided, stand_in_sites,
                                    {(square.frame, x) for square, x in folded}, twin_copies)
    given_back = coefficient_offsets(ops, folded, remat)
    return remat - given_back, decided | given_back, added - given_back


def _copied(module: Module, ops: list[SiteOp], remat: set[SiteKey], by_class: set[SiteKey], op_names: OpNames,
            decided: set[SiteKey], stand_in_sites: set[tuple[str, int]], folded_x: set[tuple[str, Val]],
            twin_copies: dict[SiteKey, int] | None = None) -> tuple[set[SiteKey], set[SiteKey], set[SiteKey]]:
    entry = module.entry.name
    fused = fused_outputs(module)
    by_site: dict[tuple[str, int], dict[str, SiteOp]] = {}
    for op in ops:
        if op.key[0] in fused and op.frame != entry:
            by_site.setdefault((op.key[0], op.key[2]), {})[op.key[1]] = op
    gradient: dict[Val, int] = {}
    saves: dict[Val, int] = {}
    in_gradient: set[SiteKey] = set()
    read_as: dict[Val, set[Val]] = {}  # per value, the values of the backward ops reading its residuals
    held: dict[Val, set[Val]] = {}  # per value, the residuals on whose chains it is
    gradient_sites: set[tuple[str, int]] = set()
    once = _stored_once_values(module, by_site)
    chains: dict[tuple[str, int], list[tuple[SiteOp, set[SiteKey]]]] = {}  # per gradient site, its residuals
    for site_key, members in sorted(by_site.items(), key=lambda item: min(op.order for op in item[1].values())):
        reads = [(op, r) for op in members.values() if not op.marked and op.op_name
                 for name in op.inst.operands
                 for r in (_through_moves(members, name),)
                 if r is not None and r.named and r.inst.opcode in CHEAP and r.key not in remat]
        if not reads:
            continue
        for op in members.values():
            if op.named and op.inst.opcode in CHEAP and op.key not in remat:
                gradient[op.exact] = gradient.get(op.exact, 0) + 1
                in_gradient.add(op.key)
        # A residual read that an earlier gradient fusion makes too (an equal reading value) is no
        # further save: XLA repeats that fusion in the program without remat as well.
        for r in {id(r): r for _, r in reads}.values():
            readers = {op.exact for op, other in reads if other is r}
            # A folded square's product `x * broadcast(2 * s)` reads the twin's residual `2 * x`,
            # not `x`: a residual of its own, apart from `x` handed to other readers.
            comp = module.by_name[site_key[0]]
            fold = {op.exact for op, other in reads if other is r and (op.frame, r.exact) in folded_x
                    and any(folded_read(comp, op.inst, name) for name in op.inst.operands
                            if _through_moves(members, name) is r)}
            residuals = ({r.exact} if readers - fold else set()) | ({("2x", r.exact)} if fold else set())
            chain_ops = _chain_ops(members, r, once)
            chains.setdefault(site_key, []).append((r, {op.key for op in chain_ops}))
            for v in {op.exact for op in chain_ops}:
                held.setdefault(v, set()).update(residuals)
                saves.setdefault(v, 0)
                if not readers <= read_as.get(v, set()):
                    saves[v] += 1
                    read_as.setdefault(v, set()).update(readers)
        gradient_sites.add(site_key)
    # Residuals handed to a backward matmul are saving copies too, once per residual value; the cap
    # on gradient copies below counts only the gradient fusions' saves (`saves`).
    handed, relaid = _read_by_backward_matmuls(module, by_site, gradient_sites, fused, op_names, once)
    total = dict(saves)
    for v, values in handed.items():
        total[v] = total.get(v, 0) + len(values - held.get(v, set()))
        held.setdefault(v, set()).update(values)
    if not total:
        return remat, set(), set()
    by_value: dict[Val, list[SiteOp]] = {}
    for op in ops:
        if op.exact in total or op.exact in gradient:
            by_value.setdefault(op.exact, []).append(op)
    # Values the program without remat stores once rather than copies (in a gradient fusion too):
    # counted whole (below).
    once &= set(gradient)
    total.update({v: 0 for v in once if v not in total})
    forward = _Forward(module, ops)
    settled = decided
    settled_sites = {(key[0], key[2]) for key in settled} | set(stand_in_sites)
    decided = set()
    short: list[tuple[list[SiteOp], int]] = []  # values the program without remat computes more often
    outputs_of = {key: {op.exact for name, op in by_site[key].items() if name in fused[key[0]]}
                  for key in settled_sites if key in by_site}
    added: set[SiteKey] = set()
    overflow: set[SiteKey] = set()  # gradient copies: counted, how many rests on fusion
    split: set[str] = set()  # backward loop bodies whose forward runs in another loop body
    gradient_only: list[tuple[Val, list[SiteOp]]] = []
    for v, n in total.items():
        members = by_value[v]
        if not all(op.marked for op in members):
            continue  # the forward's own copy is in sight: the pairing by value counted
        copies = sorted((op for op in members if op.key not in in_gradient and op.named),
                        key=lambda op: (op.key not in remat, op.order))
        if not copies:
            gradient_only.append((v, members))
            continue
        in_forward = forward.count(members)
        if not in_forward:
            continue  # no forward in another loop body (an accumulation loop runs both passes)
        split |= {op.frame for op in members}
        if v in once:
            # Computed by the program without remat in its forward fusion alone: every copy of the
            # backward loop, recompute or gradient, runs because of remat (over another rule's
            # stand-in, which assumed a saving fusion copying it).
            decided -= {op.key for op in copies}
            added |= {op.key for op in copies if op.key not in remat}
            overflow |= {op.key for op in members if op.key in in_gradient and op.key not in remat}
            continue
        # A settled stand-in site whose output is already a residual handed to a backward matmul
        # is that residual's saving copy: counted once.
        residuals_of = held[v]
        stand_ins = sum((op.key[0], op.key[2]) in settled_sites and
                        not (outputs_of.get((op.key[0], op.key[2]), set()) & residuals_of) for op in copies)
        keep = in_forward + gradient.get(v, 0) + sum(op.key in relaid for op in members) - n - stand_ins
        if keep < 0:
            short.append((members, -keep))
            keep = 0
        decided |= {op.key for op in copies[keep:] if op.key in remat}
        lost = sum(op.key in by_class for op in members if op.key in in_gradient)
        uncounted = [op for op in copies[:keep] if op.key not in remat and op.key not in settled]
        moved = {op.key for op in uncounted[:lost]}
        added |= moved
        left = min(keep - sum(op.key in remat for op in copies[:keep]) - len(moved),
                   gradient.get(v, 0) - saves.get(v, 0))
        if left > 0 and in_forward <= len(copies):
            extra = [op for op in members if op.key in in_gradient and op.key not in remat]
            overflow |= {op.key for op in extra[:left]}
    for v, members in gradient_only:
        if all(op.frame in split for op in members):
            extra = [op for op in members if op.key in in_gradient and op.key not in remat]
            overflow |= {op.key for op in extra[:gradient.get(v, 0) - saves.get(v, 0)]}
    decided |= _offsetting(ops, short, (remat - decided) | added | overflow, in_gradient)
    decided |= stored_offsets(module, ops, by_site, chains, (remat - decided) | added | overflow, op_names,
                              twin_copies)
    return (remat - decided) | added | overflow, decided, added


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
    most in one frame. Where some of a frame's ops hold the copy's abstract value (the same
    computation on inputs of the same shapes), only those count: the others compute other values
    under that name (a layer norm's mean `sum(x) / n` and mean square `sum(x * x) / n`, both
    `div`; gelu's `0.5 * (1 + t)` beside the other `mlp/mul`s), or, where none does, those
    computing the same but where the recompute reads a loop input (`_reads_as_input`)."""

    def __init__(self, module: Module, ops: list[SiteOp]):
        self.module = module
        self.callers = one_call_site(module)
        self.trees: dict[SiteKey, tuple] = {}
        self.pool: dict[tuple, list[SiteOp]] = {}
        for op in ops:
            if not op.marked and op.op_name and phase(op.op_name) != "backward":
                self.pool.setdefault((op.inst.opcode, shape_key(op.inst.shape)), []).append(op)

    def _tree(self, op: SiteOp) -> tuple:
        """What the op computes, `_TREE_DEPTH` ops deep across fusion boundaries, its inputs by kind."""
        tree = self.trees.get(op.key)
        if tree is None:
            comp = self.module.by_name[op.key[0]]
            tree = self.trees[op.key] = _tree(self.module, self.callers, comp, op.inst.name, _TREE_DEPTH)
        return tree

    def count(self, members: list[SiteOp]) -> int:
        frames = {m.frame for m in members}
        best = 0
        for m in members:
            if not m.named or not m.op_name:
                continue
            tail, kinds = inner_tail(m.op_name), _kinds(self.module, m)
            pool = self.pool.get((m.inst.opcode, shape_key(m.inst.shape)), ())
            named = [twin for twin in pool if twin.frame not in frames and ends_with(twin.op_name, tail)
                     and _alike(kinds, _kinds(self.module, twin))]
            mine = self._tree(m)
            alike = [twin for twin in named if twin.abstract == m.abstract or self._tree(twin) == mine]
            if not alike:
                # The recompute may read as a loop input what the forward computes in place (the
                # matmul output an offload policy saved): its inputs then stand for any computation.
                alike = [twin for twin in named if _reads_as_input(mine, self._tree(twin))]
            same = {(twin.frame, twin.key[2]) for twin in alike}
            per_frame = Counter((twin.frame, twin.key[2]) for twin in named
                                if (twin.frame, twin.key[2]) not in same or twin in alike)
            best = max(best, max(per_frame.values(), default=0))
        return best


_TREE_DEPTH = 4


def _reads_as_input(mine: tuple, theirs: tuple) -> bool:
    """Whether the computation `theirs` is `mine` where `mine` reads as a loop input (a slice of
    a saved stack) a value `theirs` computes: the same opcodes, operand by operand, but below
    `mine`'s inputs, which match any computation but a constant."""
    if mine == ("input",):
        return theirs != ("constant",)
    return (len(mine) == len(theirs) and mine[0] == theirs[0]
            and all(_reads_as_input(a, b) for a, b in zip(mine[1:], theirs[1:])))


def _tree(module: Module, callers, comp, name: str, depth: int) -> tuple:
    """The computation of a value as nested (opcode, operands...) tuples, through views, fusion
    parameters (to the call site's operand) and fusion roots; a loop body's input (its state, a
    slice of a saved stack) is `input`, a constant `constant`, and past `depth` ops the opcode."""
    for _ in range(64):
        inst = comp.by_name.get(name)
        if inst is None:
            return ("input",)
        if inst.opcode in _VIEWS - {"dynamic-slice", "slice"} and inst.operands:
            name = inst.operands[0]
        elif inst.opcode in FUSION_BOUNDARY:
            step = across_fusion_boundary(module, callers, comp, inst)
            if step is None:
                return ("input",)
            comp, name = step
        elif inst.opcode in ("dynamic-slice", "slice"):
            return ("input",)
        elif inst.opcode == "constant":
            return ("constant",)
        elif depth <= 0:
            return (inst.opcode,)
        else:
            return (inst.opcode,) + tuple(_tree(module, callers, comp, operand, depth - 1)
                                          for operand in inst.operands)
    return ("input",)


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


def _reads_two_values(comp, inst) -> bool:
    """Does an op read two whole values, from distinct sources (broadcasts aside: a layer norm's
    `scale * r` carries none; sigmoid's `s * (1 - s)` and a square read one)?"""
    size = largest_array(inst.shape)
    found = [_sources(comp, o, size, 6) for o in set(inst.operands)]
    return sum(bool(f) for f in found) >= 2 and len(set().union(*found)) >= 2


def _sources(comp, name: str, size: int, depth: int) -> set[str]:
    """The whole-size values an operand is computed from through cheap ops (itself where it is not one)."""
    inst = comp.by_name.get(name)
    if inst is None or largest_array(inst.shape) < size or inst.opcode in ("broadcast", "iota", "constant"):
        return set()
    if (inst.opcode in CHEAP or inst.opcode in _MOVES) and inst.operands and depth > 0:
        return set().union(*(_sources(comp, o, size, depth - 1) for o in inst.operands))
    return {name}


def _stored_once(comp, inst, members: Mapping[str, SiteOp], depth: int = 8) -> bool:
    """Is a remat-named cheap op one XLA never copies into the fusions reading it: one reading two
    whole values (a residual add `x + attn`, which XLA stores rather than duplicate), or one read
    inside its fusion only by such ops (the projection's bias add under it)? The program without
    remat computes it in its forward fusion alone and saves it as computed; the program with remat
    may still copy it into every fusion of its backward loop (more held-out seed 167)."""
    op = members.get(inst.name)
    if op is None or not op.named or inst.opcode not in CHEAP:
        return False
    if _reads_two_values(comp, inst):
        return True
    if depth <= 0 or inst is comp.root:
        return False
    users = comp.users.get(inst.name, ())
    return bool(users) and all(_stored_once(comp, user, members, depth - 1) for user in users)


def _stored_once_values(module: Module, by_site: dict[tuple[str, int], dict[str, SiteOp]]) -> set[Val]:
    """The values every remat-named copy of which, in every fusion, XLA would store rather than copy
    (`_stored_once`): a bias add read by a residual add in one fusion and by a sigmoid in another
    (silu's `h`, seed 000) is copied into the other's fusion, and is not one."""
    verdict: dict[Val, bool] = {}
    for (comp_name, _), members in by_site.items():
        comp = module.by_name[comp_name]
        for op in members.values():
            if op.named and op.inst.opcode in CHEAP:
                verdict[op.exact] = verdict.get(op.exact, True) and _stored_once(comp, op.inst, members)
    return {v for v, stored in verdict.items() if stored}


def _chain_ops(members: Mapping[str, SiteOp], residual: SiteOp, once: set[Val]) -> list[SiteOp]:
    """The remat-named cheap ops a residual is computed from inside its fusion, itself included
    (through moves; not past a parameter, an op of another kind, or one the program without remat
    stores rather than copies, `_stored_once`)."""
    out: list[SiteOp] = []
    pending, seen = [residual], set()
    while pending:
        op = pending.pop()
        if op.key in seen:
            continue
        seen.add(op.key)
        if op.inst.opcode in _MOVES:
            pass
        elif op.named and op.inst.opcode in CHEAP and op.exact not in once:
            out.append(op)
        else:
            continue
        pending += [members[name] for name in op.inst.operands if name in members]
    return out


def _read_by_backward_matmuls(module: Module, by_site: dict[tuple[str, int], dict[str, SiteOp]],
                              gradient_sites: set[tuple[str, int]], fused: dict[str, frozenset[str]],
                              op_names: OpNames, once: set[Val]) -> tuple[dict[Val, set[Val]], set[SiteKey]]:
    """The residuals a recompute fusion of a backward loop hands out to a matmul outside the
    recompute (a weight's gradient reads the recomputed layer norm output and gelu's product, the
    keys' gradient the projected query): each value of their chains, with the residuals whose
    chain holds it. And the copies in such a fusion that no recomputed matmul reads, where another
    fusion computes its value for the recompute (the key, once for the recomputed scores and once
    for the query's gradient): the program without remat's forward builds only the first, its
    saving fusion standing for the second."""
    sites, readers = sites_and_readers(module)
    handing: list[tuple[str, dict[str, SiteOp], list[SiteOp], bool]] = []
    for_recompute: set[Val] = set()  # what fusions the recompute reads hand out
    for (comp_name, site), members in by_site.items():
        where = sites.get(comp_name)
        if (comp_name, site) in gradient_sites or where is None:
            continue
        outputs = [members[name] for name in fused[comp_name] if name in members]
        outputs = [op for op in outputs if op.named and op.inst.opcode in CHEAP]
        if not outputs:
            continue
        recomputed = read_by_backward_matmul(module, where, readers, op_names, recompute=True)
        hands_out = read_by_backward_matmul(module, where, readers, op_names) or \
            _read_by_backward_reduce(module, where, readers, op_names)
        if hands_out:
            handing.append((comp_name, members, outputs, recomputed))
        if recomputed or not hands_out:
            # read by a recomputed matmul, or by the recompute alone (its scores' fusion, unnamed)
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
                    (reads_two_whole(comp, r.inst) and comp.root.opcode not in ("bitcast", "reshape")):
                continue
            for name in chain:
                op = members.get(name)
                if op is not None and op.named and op.inst.opcode in CHEAP and op.exact not in once:
                    out.setdefault(op.exact, set()).add(r.exact)
        if not recomputed and any(op.exact in for_recompute for op in outputs):
            stand_ins |= {op.key for op in members.values() if op.named and op.inst.opcode in CHEAP}
    return out, stand_ins



def _read_by_backward_reduce(module: Module, site: tuple[str, Instruction],
                             readers: dict[tuple[str, str], list[Instruction]], op_names: OpNames) -> bool:
    """Does a reduce of the backward outside the recompute (named, not remat-named, or a library
    fusion around one) read the fusion's result as it is (through views)? The program without
    remat saves that value for it: a layer norm's `x - mean`, stored by a recompute fusion for the
    rsqrt's gradient `sum((x - mean) * g)` (held-out base seeds 236, 291)."""
    comp_name, inst = site
    pending, seen = [inst], set()
    while pending:
        for reader in readers.get((comp_name, pending.pop().name), ()):
            if reader.name in seen:
                continue
            seen.add(reader.name)
            if reader.opcode in _MOVES - {"broadcast"}:
                pending.append(reader)
                continue
            name = op_names.of(comp_name, reader)
            if not name or REMAT_SCOPE in name or phase(name) != "backward":
                continue
            if reader.opcode == "fusion":
                callee = module.by_name[reader.called(CallRole.FUSION)[0]]
                reader = callee.root
                while reader.opcode in _VIEWS and reader.operands and reader.operands[0] in callee.by_name:
                    reader = callee.by_name[reader.operands[0]]
            if reader.opcode == "reduce":
                return True
    return False
