"""A cheap value the forward loop stores, which the program without remat computes more often
(hloflops.remat.twin_saves calls `stored_offsets` after counting the residuals' chains).

A policy may save a cheap value itself (gelu's bias add `h` under an offload policy): the backward
loop reads it back from the stack, in the recompute fusions (tanh's, the product's) and in the
gradient fusion's residual chains (`3 * h * h`). The program without remat computes it in its
counterparts of those recompute fusions (XLA copies a cheap producer into each consumer fusion)
and copies it into each fusion saving such a residual, so it may run the value more often than
this program, whose copies all sit in its forward. Remat FLOPs are judged per opcode, so the
difference is taken off counted recomputes of the value's opcode and size in the reading fusions
(more seed 37: add +20,480 before).

The value a policy saves may sit under the identity rounding that marks a checkpoint policy's
residual (`save_only_these_names`; base seed 41): the stored value is the op under it. A recompute
fusion reading the value that hands its output to a matmul outside the recompute (gelu's product
`h * 0.5 * (1 + t)`, read by the next weight's gradient) stands for two fusions of the program
without remat: its forward's, and the one saving that output for the matmul, which copies the
chain down to `h` too (five copies of `h` there against this program's two, hk_layer_stack
attention more seeds 78, 86, 90, 114, held-out linen_scan 246). Where the twin's extra copies
exceed the recomputes they can offset (the tanh fusion's `h + 0.044715 * h**3` is the one counted
recompute of that kind), the per-opcode truth is negative and no split of this program's ops
reaches it: the copies left over are reported as `twin_copies` (hloflops.results.RematHinge), by
whose FLOPs the range's low end drops (on all five draws exactly the add the twin runs beyond
this program). Such a value's forward copy in the fusion storing it is then no "maybe remat" hinge
(hloflops.remat.rounding's `copied_into_saves` says the twin may not copy it into a saving fusion;
here it copies it more often than this program in all).

The twin's stores cost converts too (`stacked_residual_round_trips`). On CPU, float normalization
computes a bfloat16 stack's dynamic-update-slice in f32: each forward trip widens the whole stack
(trips slices) and the slice and narrows the stack back, and the backward loop's read of the stack
is a widen of the whole stack hoisted out of it (one slice per trip) and a narrowing of the f32
slice it reads to the declared bfloat16. None of it runs here for a residual this program
recomputes, whose backward narrows the recomputed value instead: that narrowing stands for the
twin's narrowing of the slice it reads back (both widen it for the readers). So 2 * trips + 2
slice-sized converts per trip and residual are the twin's alone, sure, and the narrowing here is no
remat: the row takes -(2 * trips + 2) times its FLOPs as its remat share (`RematIndex.twin_stores`,
hloflops.results.RematTwinStore), whatever it counted before; its widen in the same fusion is no remat
either (the twin widens the slice it reads back for the same reader: base 25's kernel casts). Model FLOPs
(the twin's) then exceed this program's own count of convert by that much. Where the twin's forward
computes a residual this program's forward never does (tanh's `1 - t`), it narrows it there too,
and XLA fuses that chain into the stack's update, widening its bf16 inputs again (base 42: one
narrowing, one widen of `t`). Whether this program's forward narrows the value too shows in the
narrowing here: the pairing counts it as remat where it found a forward op with its value (a
value number alone cannot tell `t` from `1 - t`, and counting +2 wherever no forward op shared it
overshot every draw). Where the row was not counted as remat before `twin_store_rows` rewrote it,
those 2 slices per trip are the twin's alone and join the sure round trips (`forward_round_trips`:
base 25, 42, 89, 149 exact on convert; held-out base 235 and base 97 closer); where it was, they
stay `twin_copies` (1 for a kernel's cast, which both forwards narrow): the range's low end. Exact
on more 71 (kernel casts).

A residual is a value the backward loop recomputes, narrows to 16 bits and hands to a gradient op
(one named outside the checkpoint's recompute scope): the twin must store it. Two kinds tell it:
float normalization's narrowing of a recomputed value (tanh's `t` and `1 - t` under
`nothing_saveable`, base seeds 42, 89, 149; where the recompute calls a nested body, a jitted or
scanned one, the narrowing of the call's result carries the call's name, a prefix of its operand's:
held-out base 235, linen_remat_scan, six gelu residuals), and the recompute's own cast of a kernel sliced from
the loop's input (`convert(W[i], bf16)`, read by the input's gradient: base 25, more 60, 71), or of
a value it computes (a layer norm's output cast for the next matmuls, read by their weights'
gradients: more 73, held-out more 155, two stacks per block the program without remat keeps). A
value computed from a matmul output the policy saved, not from a recomputed matmul, shares that
output's stack: of the residuals computed from one set of loop inputs, the first stands for this
program's stack of the saved output (a relu's mask where this program stores the conv output:
more 60, 71; gelu's residuals of a saved projection: more 73). Which residuals the twin
stores rests on jax's linearization, one stack per residual value: every one these two kinds find
is stored on every draw checked (base, more, held-out), so the round trips count as sure."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from hloflops.remat.across_loops import cheap_chain, reads_two_whole
from hloflops.remat.fusion_copies import fused_outputs
from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.names import REMAT_SCOPE, OpNames
from hloflops.remat.saved_copies import read_by_backward_matmul
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, is_identity_rounding, shape_key
from hloflops.remat.sites import SiteKey, SiteOp, backward_loop_bodies, one_call_site, value_readers
from hloflops.remat.stack_readers import stack_readers
from hloflops.remat.type_corrections import bits
from hloflops.remat.values import Val
from hloflops.results import RematTwinStore, Row
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module, parameter_number

# What a saving fusion copies (as hloflops.remat.twin_saves): cheap elementwise ops.
CHEAP = DUPLICATED - EXPENSIVE - {"convert"}
_MOVES = frozenset({"broadcast", "bitcast", "reshape", "copy", "transpose"})


def stored_offsets(module: Module, ops: list[SiteOp], by_site: dict[tuple[str, int], dict[str, SiteOp]],
                    chains: dict[tuple[str, int], list[tuple[SiteOp, set[SiteKey]]]],
                    remat: set[SiteKey], op_names: OpNames, twin_copies: dict[SiteKey, int] | None = None
                    ) -> set[SiteKey]:
    """A cheap value this program's forward loop stores (a policy saves gelu's bias add `h`) that
    the backward loop reads from the stack: the recompute fusions reading it there stand for the
    program without remat's forward fusions, which compute it (XLA copies the cheap chain into each
    consumer), and each residual a gradient fusion computes from it (`3 * h * h`), or `h` itself
    read by a gradient op, is a fusion of that program saving it, copying the chain too. Where
    those exceed this program's forward copies of the value, the program without remat runs it
    more often: as many counted recomputes of its opcode and size in the reading recompute fusions
    are model FLOPs in the per-opcode sum (as twin_saves' `_offsetting`; more seed 37, an offload
    policy: the tanh's and the product's recompute fusions read `h`, the program without remat
    copies it into its tanh, product, `h` and `3 * h * h` fusions, this one into its forward and
    saving fusions). A recompute fusion handing its output to a backward matmul stands for one
    more saving fusion of the program without remat (`_handed_to_gradient`). Copies left over with
    no counted recompute to offset go to `twin_copies` (the stored value's key -> how many): the
    program without remat's alone, which lower the range (module docstring)."""
    callers = one_call_site(module)
    sites_of: dict[str, list[tuple[str, int]]] = {}
    for site_key in by_site:
        sites_of.setdefault(site_key[0], []).append(site_key)
    by_value: dict[Val, list[SiteOp]] = {}
    for op in ops:
        by_value.setdefault(op.exact, []).append(op)
    fused = fused_outputs(module)
    readers_of: dict = {}  # each value's readers, taken once a stored value is found
    out: set[SiteKey] = set()
    for (comp_name, site), members in by_site.items():
        comp = module.by_name[comp_name]
        caller = callers.get(comp_name)
        if comp.root.opcode != "dynamic-update-slice" or caller is None or len(comp.root.operands) < 2:
            continue
        name = comp.root.operands[1]
        # Through views, and the identity rounding that marks a checkpoint policy's saved residual
        # (hloflops.remat.rounding): the value stored is the cheap op under it.
        while name in comp.by_name and comp.by_name[name].operands and (
                comp.by_name[name].opcode in _MOVES or is_identity_rounding(comp.by_name[name])):
            name = comp.by_name[name].operands[0]
        value = members.get(name)
        if value is None or value.marked or value.inst.opcode not in CHEAP or not value.op_name \
                or phase(value.op_name) == "backward" or value.inst.name not in cheap_chain(
                    comp, frozenset({value.inst.name})):
            continue
        readers = stack_readers(module, caller[0].name, caller[1].name)
        if not readers:
            continue
        readers_of = readers_of or value_readers(module)
        recomputes: set[tuple[str, int]] = set()
        saves: set[Val] = set()
        for reader_comp, reader in readers:
            for reader_site in sites_of.get(reader_comp, ()):
                op = by_site[reader_site].get(reader.name)
                if op is None:
                    continue
                if reader_site in chains:
                    held = [r.exact for r, keys in chains[reader_site] if op.key in keys]
                    saves |= set(held) if held else ({value.exact} if not op.marked else set())
                elif op.marked:
                    recomputes.add(reader_site)
                    saves |= _handed_to_gradient(module, reader_site, op, by_site[reader_site], fused, callers,
                                                 readers_of, op_names)
                else:
                    saves.add(value.exact)
        forward = sum(not op.marked and phase(op.op_name) != "backward" for op in by_value[value.exact])
        short = len(recomputes) + len(saves) - forward
        if short <= 0:
            continue
        kind = (value.inst.opcode, shape_key(value.inst.shape))
        offsets = sorted((op for reader_site in recomputes for op in by_site[reader_site].values()
                          if op.key in remat and op.key not in out
                          and (op.inst.opcode, shape_key(op.inst.shape)) == kind), key=lambda op: op.order)
        out |= {op.key for op in offsets[:short]}
        if twin_copies is not None and short > len(offsets):
            # Copies left with no recompute to offset: the twin's alone (the range's low end).
            twin_copies[value.key] = twin_copies.get(value.key, 0) + short - len(offsets)
    return out


def _handed_to_gradient(module: Module, site_key: tuple[str, int], reader: SiteOp, members: dict[str, SiteOp],
                        fused, callers, readers_of, op_names: OpNames) -> set[Val]:
    """The outputs of a recompute fusion reading the stored value that it hands to a matmul outside
    the recompute (a weight's gradient reads gelu's product `h * 0.5 * (1 + t)`), where the value's
    reader lies on their cheap chains: the program without remat saves each such output for that
    matmul by a fusion of its own, into which XLA copies the chain down to the value (as
    hloflops.remat.twin_saves' handed residuals)."""
    caller = callers.get(site_key[0])
    if caller is None or not read_by_backward_matmul(module, (caller[0].name, caller[1]), readers_of, op_names):
        return set()
    comp = module.by_name[site_key[0]]
    out: set[Val] = set()
    for name in fused.get(site_key[0], ()):
        output = members.get(name)
        if output is None or not output.named or output.inst.opcode not in CHEAP:
            continue
        if reads_two_whole(comp, output.inst) and comp.root.opcode not in ("bitcast", "reshape"):
            continue  # stored as computed, no chain copied (hloflops.remat.across_loops)
        if reader.inst.name in cheap_chain(comp, frozenset({name})):
            out.add(output.exact)
    return out


# Ops a narrowed residual passes through unchanged on its way to a reader (float normalization's
# widen of it, views, the fusion boundary).
_HANDS_ON = frozenset({"convert", "bitcast", "reshape", "copy", "transpose", "parameter"})


def stacked_residual_round_trips(module: Module, ops: list[SiteOp], op_names: OpNames
                                 ) -> dict[tuple[str, str], tuple[int, int, int]]:
    """The converts the program without remat spends storing, in a scan's stack, each residual
    this program's backward loop recomputes and narrows instead (the module docstring's last
    paragraph): the recompute's narrowing convert of the residual -> (sure, more): how many
    slice-sized converts per trip the program without remat surely runs for it beyond this one
    (its forward's dynamic-update-slice round trip and its backward's hoisted widen, 2 * trips + 2:
    the narrowing's own FLOPs stand for the twin's narrowing of the slice it reads back) and how
    many more it may (its forward's narrowing of a residual only it computes there, and the widens
    fused with it: 2, 1 for a kernel's cast), and how many of those are sure where this program's
    forward does not narrow the value (`forward_round_trips`: 2 for a residual, 0 for a kernel's
    cast); and a widen of that narrowing in the same fusion -> (0, 0, 0): the twin's widen of the
    slice it reads back, no remat. Compiled CPU modules only."""
    if not module.is_scheduled or is_tpu_module(module):
        return {}
    callers = one_call_site(module)
    exact = {op.key[:2]: op.exact for op in ops}
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for trips, body in backward_loop_bodies(module, op_names):
        seen: set = set()  # one stack per residual value (XLA may copy it into several fusions)
        stored: set = set()  # this program's stacks standing for one of the twin's (`_inputs`)
        for comp_in in [body] + [module.by_name[callee] for fusion in body.instructions if fusion.opcode == "fusion"
                                 for callee in fusion.called(CallRole.FUSION) if callers.get(callee)]:
            for narrow in comp_in.instructions:
                residual = _narrowed_recompute(module, comp_in, narrow, op_names, callers, body.name)
                if residual is None:
                    continue
                value = exact.get((comp_in.name, narrow.name), (comp_in.name, narrow.name))
                if value in seen or not _read_by_gradient(module, comp_in, narrow, op_names, callers, body.name):
                    continue
                seen.add(value)
                if residual[1] is not narrow:
                    matmul, inputs = _inputs(module, *residual, op_names, callers, body.name)
                    if not matmul and (not inputs or inputs not in stored):
                        stored.add(inputs)  # the first of a stored value's residuals: this program's stack
                        continue
                # A kernel's cast and its widen here stand for the twin's narrowing and widening of
                # the slice it reads back: one slice fewer than a residual float normalization narrows.
                kernel = residual[1] is narrow
                out[(comp_in.name, narrow.name)] = (2 * trips + 2, 1 if kernel else 2, 0 if kernel else 2)
                # Its widen in the same fusion stands for the twin's widen of the slice it reads back.
                out.update(((comp_in.name, widen.name), (0, 0, 0)) for widen in comp_in.instructions
                           if widen.opcode == "convert" and widen.operands == (narrow.name,)
                           and bits(widen.shape) == 32)
    return out


def _narrowed_recompute(module: Module, comp, inst, op_names: OpNames, callers, body: str):
    """The recomputed value a convert narrows from f32 to bfloat16 or f16 that the program without
    remat saves in a stack: an unnamed convert (float normalization's, or one named for its call)
    of an op in the checkpoint's recompute scope computed from a recomputed matmul, or the
    recompute's own named cast of a value the loop reads in (a layer's kernel, sliced from the
    stacked weights) or of a value it computes (a layer norm's output cast for the next matmuls);
    None for any other."""
    if inst.opcode != "convert" or not inst.operands or bits(inst.shape) != 16:
        return None
    named = op_names.of(comp.name, inst)
    source = _source(module, comp, comp.by_name.get(inst.operands[0]), callers, body)
    name = op_names.of(source[0].name, source[1]) if source is not None else ""
    # A convert named for the call enclosing its operand (a prefix of the operand's name) is float
    # normalization's narrowing of the call's result, as an unnamed one.
    if named and not name.startswith(named + "/"):  # a cast jax named in the recompute
        if REMAT_SCOPE not in named or phase(named) != "backward" or not named.endswith("convert_element_type"):
            return None
        if source is None or bits(source[1].shape) != 32:
            return None
        if _loop_input(module, *source, callers, body):
            return comp, inst
        # The recompute's cast of a value it computes (a layer norm's output, cast for the next
        # matmuls and read by their weights' gradients): the program without remat stacks that
        # bf16 value as it does float normalization's narrowings (more 73, held-out more 155), for
        # the weight gradient's matmul; other readers of such a cast are left as they were.
        return source if REMAT_SCOPE in name and phase(name) == "backward" and _read_by_gradient(
            module, comp, inst, op_names, callers, body, matmul=True) else None
    if source is None or bits(source[1].shape) != 32:
        return None
    return source if REMAT_SCOPE in name and phase(name) == "backward" else None


def _source(module: Module, comp, inst, callers, body: str):
    """(computation, instruction) computing a value, through views and fusion parameters."""
    for _ in range(16):
        if inst is None:
            return None
        if inst.opcode in ("bitcast", "reshape", "copy") and inst.operands:
            inst = comp.by_name.get(inst.operands[0])
        elif inst.opcode == "parameter" and comp.name != body:
            caller = callers.get(comp.name)
            if caller is None or caller[0].name != body:
                return None
            comp, inst = caller[0], caller[0].by_name.get(caller[1].operands[parameter_number(inst)])
        elif inst.opcode == "fusion":
            fused = inst.called(CallRole.FUSION)
            if not fused:
                return None
            comp = module.by_name[fused[0]]
            inst = comp.root
        else:
            return comp, inst
    return None


def _loop_input(module: Module, comp, inst, callers, body: str) -> bool:
    """Is the value a slice of what the loop reads in (its parameter), through views and slices?"""
    for _ in range(16):
        if inst.opcode == "get-tuple-element" and comp.name == body:
            return True
        if inst.opcode not in ("dynamic-slice", "slice") or not inst.operands:
            return False
        found = _source(module, comp, comp.by_name.get(inst.operands[0]), callers, body)
        if found is None:
            return False
        comp, inst = found
    return False


def _inputs(module: Module, comp, inst, op_names: OpNames, callers, body: str) -> tuple[bool, frozenset]:
    """Whether the value is computed, within the loop body, from a matmul of the recompute (one the
    policy did not save), and the loop inputs it reads otherwise (their get-tuple-elements)."""
    todo, seen, inputs = [(comp, inst)], set(), set()
    while todo and len(seen) < 256:
        comp, inst = todo.pop()
        if (comp.name, inst.name) in seen:
            continue
        seen.add((comp.name, inst.name))
        if inst.opcode in ("dot", "convolution"):
            name = op_names.of(comp.name, inst)
            if REMAT_SCOPE in name and phase(name) == "backward":
                return True, frozenset()
            continue
        found = _source(module, comp, inst, callers, body) if inst.opcode in ("parameter", "fusion") else (comp, inst)
        if found is None:
            continue
        if found[1].opcode == "get-tuple-element" and found[0].name == body:
            inputs.add(found[1].name)
            continue
        if found != (comp, inst):
            todo.append(found)
            continue
        todo += [(comp, comp.by_name[o]) for o in inst.operands if o in comp.by_name]
    return False, frozenset(inputs)


def _read_by_gradient(module: Module, comp, inst, op_names: OpNames, callers, body: str, depth: int = 0,
                      matmul: bool = False) -> bool:
    """Is the value read, through widens, views and fusion boundaries within the loop body, by a
    gradient op (a named op of the backward outside the recompute scope; with `matmul`, a gradient
    matmul: a weight's gradient reading a recomputed cast)?"""
    if depth > 8:
        return False
    readers = [r for r in comp.instructions if inst.name in r.operands]
    if inst.is_root and comp.name != body:
        caller = callers.get(comp.name)
        if caller is not None and caller[0].name == body:
            if _read_by_gradient(module, caller[0], caller[1], op_names, callers, body, depth + 1, matmul):
                return True
    for reader in readers:
        name = op_names.of(comp.name, reader)
        if reader.opcode == "fusion":
            for callee in reader.called(CallRole.FUSION):
                fused = module.by_name[callee]
                indices = {i for i, operand in enumerate(reader.operands) if operand == inst.name}
                params = [p for p in fused.instructions if p.opcode == "parameter" and parameter_number(p) in indices]
                if any(_read_by_gradient(module, fused, p, op_names, callers, body, depth + 1, matmul) for p in params):
                    return True
            continue
        if reader.opcode == "tuple" and reader.is_root and comp.name != body:  # a fusion's outputs
            caller = callers.get(comp.name)
            if caller is not None and any(
                    _read_by_gradient(module, caller[0], out, op_names, callers, body, depth + 1, matmul)
                    for out in caller[0].instructions if out.opcode == "get-tuple-element"
                    and out.operands == (caller[1].name,)
                    and int(out.attributes.get("index", "-1")) in [i for i, o in enumerate(reader.operands)
                                                                   if o == inst.name]):
                return True
            continue
        if name:
            if REMAT_SCOPE not in name and phase(name) == "backward" and (
                    not matmul or reader.opcode in ("dot", "convolution")):
                return True
            continue
        if reader.opcode in _HANDS_ON and _read_by_gradient(module, comp, reader, op_names, callers, body,
                                                            depth + 1, matmul):
            return True
    return False


def forward_round_trips(rows: list[Row], index):
    """The index with a residual's 2 forward converts (`RematIndex.twin_store_forward`) moved from
    its `twin_copies` to its `twin_stores` where its narrowing's row was not counted as remat before
    `twin_store_rows` rewrites it: the pairing found no recompute in that convert, so this program's
    forward narrows no such value, and the twin's narrowing of the residual in its forward (and the
    widen XLA fuses with it into the stack's update) is its alone (module docstring). A narrowing
    counted as remat pairs a value this forward narrows too: those 2 stay a hinge."""
    forward = index.twin_store_forward
    if not forward:
        return index
    settled = {key: n for r in rows if (n := forward.get(key := (r.computation, r.name))) and not r.remat}
    if not settled:
        return index
    copies = {key: n - settled.get(key, 0) for key, n in index.twin_copies.items()}
    return replace(index, twin_copies={key: n for key, n in copies.items() if n > 0},
                   twin_stores={key: n + settled.get(key, 0) for key, n in index.twin_stores.items()})


def twin_store_rows(rows: list[Row], stores: Mapping[tuple[str, str], int]) -> list[Row]:
    """The rows of ops whose FLOPs the program without remat surely runs k more times than this
    one (`RematIndex.twin_stores`: a bf16 stack's round trips, `stacked_residual_round_trips`),
    with k of their totals taken off their remat share: the per-opcode remat FLOPs are this
    program's less its twin's, and model FLOPs (the twin's) then exceed this program's own count of
    that opcode by the twin's extra work. The row is remat (its share may be negative), over what
    it counted as remat before (all, a share, or nothing)."""
    out = []
    for row in rows:
        k = stores.get((row.computation, row.name))
        out.append(row if k is None else replace(row, remat=True, remat_part=(-k, 1)) if k
                   else replace(row, remat=False, remat_part=None))  # k = 0: the twin runs it too
    return out


def twin_stores(rows: list[Row], stores: Mapping[tuple[str, str], int]) -> tuple[RematTwinStore, ...]:
    """What `twin_store_rows` took off the remat FLOPs, per row."""
    if not stores:
        return ()
    return tuple(RematTwinStore(r.name, r.computation, r.opcode, k * r.executions, k * r.total.flops)
                 for r in rows if (k := stores.get((r.computation, r.name))) and r.total.flops)
