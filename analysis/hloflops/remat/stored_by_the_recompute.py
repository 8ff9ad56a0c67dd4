"""Values the recompute stores and the forward only copies (after optimization).

XLA's fusion pass copies a cheap producer into every fusion that reads it only where all of its
readers can take it; if one cannot (a scatter, a library fusion, a reduce), the value is computed
once and stored. With remat the backward reads the recompute's copy of a forward value, so the
forward's value has forward readers only, and XLA copies its cheap chain into each of them (a
whole-model checkpoint's embedding lookup: the gather in a fusion of its own, the index clamp and
the out-of-range mask copied into each of the first layer norm's and the residual's fusions).
The recompute computes the value in one fusion and hands it out to the backward. The program
without remat, whose backward reads the forward's value, stores it the same way: its forward
computes it in one fusion like the recompute's, and its forward readers read it stored.

So where a remat-marked fusion hands out a cheap value (read from no other recompute) whose
chain the forward splits, handing a chain value out of a fusion read only by fusions copying the
chain (the gather's fusion: the split is the evidence that the forward was fused otherwise than
the program without remat's), the recompute's chain of that value (its fusion's ops under the
output) is the program without remat's forward computation of it, model FLOPs, and the forward's
copies are what remat adds: in each fusion copying the value or what it rounds (`frontier`), the
ops under the copy that the fusion computes only for it, and the splitting fusions. A fusion that
reads the chain unrounded (f32) widens its stored input where the program without remat's reader
widens the stored bf16 value: that widening is the reader's own. Another recompute fusion
storing a chain value the forward never hands out (the clamped indices, stored for the embedding
gradient's scatter) is the program without remat's too. Not for a chain with an expensive op
(XLA copies none) or a saved residual. This rests on how XLA fused both programs: the pairing's
`loose` range covers the forward copies."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, is_identity_rounding
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module, parameter_number

# Ops that hand a value on between fusions unchanged.
_HANDS_ON = frozenset({"bitcast", "copy", "reshape", "get-tuple-element"})
# Ops between a value and the one a fusion hands out that only round or relay it.
_ROUNDS = frozenset({"convert", "bitcast", "copy", "reshape"})


def stored_by_the_recompute(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                            fused: Mapping[str, frozenset[str]]) -> tuple[set[SiteKey], set[SiteKey]]:
    """The forward copies that run because of remat, and the recompute's ops that are the program
    without remat's forward (see the module's docstring). Returns (remat, model)."""
    if not fused:
        return set(), set()
    by_key = {op.key: op for op in ops}
    callers: dict[str, tuple[str, str]] = {}  # fused computation -> (caller computation, fusion)
    readers: dict[tuple[str, str], list[str]] = {}  # (computation, instruction) -> its readers' names
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                callers[callee] = (comp.name, inst.name)
        for operand in dict.fromkeys(inst.operands):
            readers.setdefault((comp.name, operand), []).append(inst.name)
    in_forward = _forward_fusions(module, ops, callers)
    forward: dict[tuple[str, object], list[SiteOp]] = {}  # (frame, value) -> unmarked forward ops
    handed_out: set[tuple[str, object]] = set()  # (frame, value) the forward hands out of a fusion or computes unfused
    for op in ops:
        if op.marked or isinstance(op.exact, tuple) or \
                not (phase(op.op_name) == "forward" if op.op_name else op.key[0] in in_forward):
            continue
        forward.setdefault((op.frame, op.exact), []).append(op)
        outputs = fused.get(op.key[0])
        if outputs is None or op.inst.name in outputs:
            handed_out.add((op.frame, op.exact))
    add: set[SiteKey] = set()
    model: set[SiteKey] = set()
    chain_values: set[tuple[str, object]] = set()
    sites: dict[tuple[str, str], list[SiteOp]] = {}
    for op in ops:
        sites.setdefault(op.key[:2], []).append(op)
    outputs_marked = [(module.by_name[name], op) for name, outputs in fused.items()
                      if name in callers and name in module.by_name
                      for out_name in outputs for op in sites.get((name, out_name), ())
                      if op.marked and op.key in remat and op.inst.opcode in DUPLICATED]
    for comp, w in outputs_marked:
        found = _chain(module, comp, w, by_key, forward, handed_out, fused, callers, readers)
        if found is not None:
            add |= found[0]
            model |= found[1]
            chain_values |= {(w.frame, by_key[key].exact) for key in found[1]}
    # Another recompute fusion handing out a value of such a chain that the forward never hands
    # out (the clamped indices, stored for the embedding gradient's scatter) is the program without
    # remat's too: its forward stores them for the same reader.
    for comp, w in outputs_marked:
        if (w.frame, w.exact) in chain_values and (w.frame, w.exact) not in handed_out and w.key not in model:
            pending, seen = [w.inst.name], {w.inst.name}
            while pending:
                inst = comp.by_name[pending.pop()]
                op = by_key.get((comp.name, inst.name, w.key[2]))
                if op is not None and (w.frame, op.exact) in chain_values:
                    model.add(op.key)
                for operand in inst.operands:
                    if operand in comp.by_name and operand not in seen:
                        seen.add(operand)
                        pending.append(operand)
    return add - model, model - add


def _chain(module: Module, comp, w: SiteOp, by_key: Mapping[SiteKey, SiteOp],
           forward: Mapping[tuple[str, object], list[SiteOp]], handed_out: set[tuple[str, object]],
           fused: Mapping[str, frozenset[str]], callers: Mapping[str, tuple[str, str]],
           readers: Mapping[tuple[str, str], list[str]]) -> tuple[set[SiteKey], set[SiteKey]] | None:
    """For the recompute's output `w`: the forward's copies of its chain and the recompute's chain
    (None where the forward computes none of it, or hands out a value of it to other readers)."""
    site, frame = w.key[2], w.frame
    chain: set[SiteKey] = set()  # the recompute's ops under w
    values: set[object] = set()
    pending, seen = [w.inst.name], {w.inst.name}
    while pending:
        inst = comp.by_name[pending.pop()]
        if inst.opcode == "parameter" and _reads_recompute(module, callers.get(comp.name), inst, by_key, fused, site,
                                                           {value for f, value in handed_out if f == frame}):
            return None  # the chain starts inside the recompute: not the forward's value stored
        op = by_key.get((comp.name, inst.name, site))
        if op is not None:
            if op.inst.opcode in EXPENSIVE or is_identity_rounding(op.inst):
                return None  # XLA copies no expensive op, and a saved residual is stored in both
            chain.add(op.key)
            values.add(op.exact)
        for operand in inst.operands:
            if operand in comp.by_name and operand not in seen:
                seen.add(operand)
                pending.append(operand)
    # The value handed out, and what it rounds (the forward's readers may read the f32 value
    # unrounded): the forward fusions copying one of these read the chain.
    tops, inst = [w.inst.name], w.inst
    while inst.opcode in _ROUNDS and len(inst.operands) == 1 and inst.operands[0] in comp.by_name:
        inst = comp.by_name[inst.operands[0]]
        tops.append(inst.name)
    frontier = [copy for name in tops if (comp.name, name, site) in by_key
                for copy in forward.get((frame, by_key[(comp.name, name, site)].exact), ())]
    if not frontier or any(op.key[0] not in callers for op in frontier):
        return None
    # The forward fusions copying the frontier, and those handing out chain values only to them.
    add: set[SiteKey] = set()
    copying = {op.key[0] for op in frontier}
    todo = [(op.key[0], [op.inst.name]) for op in frontier]
    visited: set[tuple[str, str]] = set()
    producers: set[str] = set()
    while todo:
        name, starts = todo.pop()
        body = module.by_name.get(name)
        if body is None:
            return None
        for param in _closure(body, starts, site, by_key, add, visited):
            producer = _producer(module, callers.get(name), parameter_number(param), fused)
            if producer is None or producer in producers or producer in copying:
                continue
            outs = fused[producer]
            out_ops = [by_key.get((producer, n, site)) for n in outs]
            out_ops = [op for op in out_ops if op is not None]
            caller, fusion = callers[producer]
            readers_of = _readers_through(module, caller, fusion, readers)
            reader_callees = {c for r in readers_of
                              for c in module.by_name[caller].by_name[r].called(CallRole.FUSION)}
            if not out_ops or any(op.marked or op.exact not in values for op in out_ops) or \
                    not readers_of or not reader_callees <= copying | producers | {producer}:
                continue
            producers.add(producer)
            todo.append((producer, [op.inst.name for op in out_ops]))
    if not producers:
        return None  # the forward fused the chain as the recompute did: nothing tells them apart
    # Any chain value the forward hands out elsewhere is stored by the program without remat too.
    for value in values:
        if (frame, value) in handed_out and not all(op.key[0] in producers or op.key[0] in copying
                                                    for op in forward[(frame, value)]):
            return None
    # A fusion that copies the chain but not its rounding reads in f32 what the program without
    # remat's reader widens from the stored bf16 value: its widening of a stored input is that one.
    rounded = {op.key[0] for op in frontier if op.exact == w.exact}
    size = w.inst.shape.num_elements
    for name in copying - rounded:
        body = module.by_name[name]
        for inst in body.instructions:
            if inst.opcode == "convert" and inst.shape.num_elements == size and _reads_parameter(body, inst):
                add.discard((name, inst.name, site))
    add = {key for key in add if not by_key[key].marked}
    return add, chain


def _reads_recompute(module: Module, call: tuple[str, str] | None, param, by_key: Mapping[SiteKey, SiteOp],
                     fused: Mapping[str, frozenset[str]], site: int, forward_stored: set[object]) -> bool:
    """Is the fusion's operand for `param` a remat-marked value (an op of the recompute, or a fusion
    handing one out)? Not one whose value the forward hands out too (`forward_stored`): the
    recompute's own cast of a bias, a fusion of its own beside the forward's cast of the same
    parameter, is an input the program without remat reads from its forward's cast (held-out base
    draw 227: the residual sum `x + (attn @ wo + b)`, copied into four forward fusions)."""
    if call is None:
        return False
    caller = module.by_name[call[0]]
    operands = caller.by_name[call[1]].operands
    index = parameter_number(param)
    inst = caller.by_name.get(operands[index]) if 0 <= index < len(operands) else None
    while inst is not None and inst.opcode in _HANDS_ON and inst.operands:
        inst = caller.by_name.get(inst.operands[0])
    if inst is None:
        return False
    if inst.opcode == "fusion":
        return any(by_key[key].marked and by_key[key].exact not in forward_stored
                   for callee in inst.called(CallRole.FUSION) if callee in fused
                   for key in ((callee, name, site) for name in fused[callee]) if key in by_key)
    op = by_key.get((call[0], inst.name, site))
    return op is not None and op.marked and op.exact not in forward_stored


def _reads_parameter(body, inst) -> bool:
    operand = body.by_name.get(inst.operands[0]) if inst.operands else None
    while operand is not None and operand.opcode in _HANDS_ON and operand.operands:
        operand = body.by_name.get(operand.operands[0])
    return operand is not None and operand.opcode == "parameter"


def _forward_fusions(module: Module, ops: list[SiteOp], callers: Mapping[str, tuple[str, str]]) -> set[str]:
    """Fused computations of the forward: their fusion is named in the forward pass, or, unnamed,
    every named op inside is an unmarked forward op."""
    named: dict[str, list[SiteOp]] = {}
    for op in ops:
        if op.op_name and op.key[0] in callers:
            named.setdefault(op.key[0], []).append(op)
    out = set()
    for name, (caller, fusion) in callers.items():
        call_name = module.by_name[caller].by_name[fusion].op_name
        inside = named.get(name, [])
        if phase(call_name) == "forward" if call_name else \
                (inside and all(not op.marked and phase(op.op_name) == "forward" for op in inside)):
            out.add(name)
    return out


def _closure(body, starts: list[str], site: int, by_key: Mapping[SiteKey, SiteOp], add: set[SiteKey],
             visited: set[tuple[str, str]]) -> list:
    """The ops under `starts` in a fused computation that it computes only for them, into `add`
    (one the fusion also reads elsewhere, a widened input its own arithmetic reads too, is no copy
    of the chain's); returns the parameters reached."""
    users: dict[str, list[str]] = {}
    for inst in body.instructions:
        for operand in inst.operands:
            users.setdefault(operand, []).append(inst.name)
    under = set(starts)
    for inst in reversed(body.instructions):  # users before operands: the text is in order
        if inst.name not in under and users.get(inst.name) and all(u in under for u in users[inst.name]):
            under.add(inst.name)
    params = []
    pending = [s for s in starts if (body.name, s) not in visited]
    visited.update((body.name, s) for s in pending)
    while pending:
        inst = body.by_name[pending.pop()]
        if inst.opcode == "parameter":
            params.append(inst)
            continue
        key = (body.name, inst.name, site)
        if key in by_key:
            add.add(key)
        for operand in inst.operands:
            if operand in body.by_name and operand in under and (body.name, operand) not in visited:
                visited.add((body.name, operand))
                pending.append(operand)
    return params


def _producer(module: Module, call: tuple[str, str] | None, index: int,
              fused: Mapping[str, frozenset[str]]) -> str | None:
    """The fused computation whose fusion computes a fusion's `index`th operand (through views)."""
    if call is None:
        return None
    caller = module.by_name[call[0]]
    operands = caller.by_name[call[1]].operands
    if not 0 <= index < len(operands):
        return None
    inst = caller.by_name.get(operands[index])
    while inst is not None and inst.opcode in _HANDS_ON and inst.operands:
        inst = caller.by_name.get(inst.operands[0])
    if inst is None or inst.opcode != "fusion":
        return None
    callees = [c for c in inst.called(CallRole.FUSION) if c in fused]
    return callees[0] if len(callees) == 1 else None


def _readers_through(module: Module, caller: str, name: str, readers: Mapping[tuple[str, str], list[str]]
                     ) -> list[str]:
    """The fusions reading `name` in `caller`, through views; [] where anything else reads it."""
    comp = module.by_name[caller]
    out, pending, seen = [], [name], {name}
    while pending:
        for reader in readers.get((caller, pending.pop()), ()):
            inst = comp.by_name[reader]
            if inst.opcode in _HANDS_ON:
                if reader not in seen:
                    seen.add(reader)
                    pending.append(reader)
            elif inst.opcode == "fusion":
                out.append(reader)
            else:
                return []
    return out
