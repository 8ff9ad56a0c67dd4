"""A select this program computes once and stores, which the program without remat copies into
each of its readers (hloflops.remat.pairing calls `stored_select_copies` beside
hloflops.remat.stored_scales; the range's low end only).

A select reads two values and a predicate, and XLA's instruction fusion copies it, as any cheap
elementwise producer, into each consumer fusion; where it instead hands it out of a multi-output
fusion, this program computes it once and its readers read it from memory. Two selects are stored
here because of remat alone:

* The embedding lookup's `select(in_range, gather(table, ids), 0)` (`jnp.take`'s out-of-range
  fill), in the forward. Remat adds readers to it: each checkpointed block's recompute reads the
  block's input, the first of them this value. With them XLA stores it; the program without remat,
  whose readers are the forward's and the backward's own, copies it into each (TPU seeds 26, 58:
  the twin runs it in exactly its non-recompute readers plus the fusion that computes it here,
  reducing it for the first layer norm; 3: one more than that). So the copies the program without
  remat makes beyond this program's one are its readers here that are no recompute, plus the
  fusion computing it where that fusion reads it itself, minus one. Each copy goes with the
  elementwise chain its reader runs on it (a layer norm's widen, subtract and scales): a reader the
  twin copies the select into computes that chain on the copy, where this program's recomputes run
  it on the stored value, remat-named. So each remat op of that chain in a recompute fusion reading
  the stored select (through nested fusions; with the scale it multiplies by, a product of
  broadcasts) may be the twin's own copy too: one twin copy each (TPU 3: LayerNorm_0's chain, the
  twin's copies in its q, k, v and weight-gradient fusions, convert +393,216, multiply +589,824,
  subtract +65,536 below the low end before). The select must read a gather
  (the lookup) and have a recompute among its readers: a select without the lookup's shape, or
  stored with no recompute reading it, is stored by the program without remat too.
* ReLU's gradient `select(x > 0, ct, 0)` in a scan's backward loop, in a fusion that recomputes
  the mask (`x > 0` marked), on TPU. jax computes relu's mask in the forward, a residual of its
  jvp: the program without remat stacks it in its forward loop, and its backward loop's select,
  now of two loaded values, is copied into each reader (the bias gradient's reduce, the input's
  and the weight's gradient matmuls reading its narrowing): TPU seed 40, three copies per layer
  against this program's one. Outside a loop XLA fuses the forward's compare into the backward's
  select as this program does (TPU 35, 47: as many selects in both programs), and so it does on
  CPU, in a loop too (base 71). Not where the select sits in a matmul's output fusion (it reads
  the matmul's product: the program without remat fuses it there too, TPU 51), and not where no
  reader is outside the fusion. There, the recompute's matmul fused with the mask, the chain under
  the recomputed compare (the bias add, its widens) is what the program without remat copies into
  the fusion stacking the mask in its forward, beside its forward's own: each remat op of it one
  twin copy (held-out TPU 77, linen_remat_scan relu: the twin's mask-stacking fusion holds
  `h + b` and three widens; add +1,024 and convert +3,040 below the low end before).

The count is of this program's readers, a counted fact; that XLA copies rather than stores in the
program without remat rests on how it fused that program, so the copies go to `twin_copies`
(hloflops.results.RematHinge), by whose FLOPs the low end drops: the per-opcode truth of select
is negative there, and no split of this program's ops reaches it.

On TPU a share of the lookup's copies is sure (`twin_sure`, taken off the count as
hloflops.remat.stored_twin_copies' sure stores are). The readers that feed the fill only through
a layer norm's chain into a matmul (the q, k, v projections and their weight gradients) may read,
in the program without remat, one normalized value it computes once and stores: TPU 182 (linen
loop, dots_saveable, f32) computes `LayerNorm_0` once there, narrowed to bf16, for all six, and
copies the fill 5 times where the count above says 10, this program's fusions looking as those of
TPU 157, whose twin copies it 10 times. No sign here tells the two apart: those copies stay a
hinge. The readers computing from the fill itself (the residual add, the layer norm's statistics
and its gradient: a reduce, a product with another full value) can read no such value, and the
twin copies the fill into each of them, into the fusion computing its statistics, and into one
fusion at least for the matmul readers: on every TPU draw 0-299 where the rule fires (27, the
tensor-parallel ones with no matmul reader of the fill among them) the twin's copies are at least
those."""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.fusion_copies import backward_loop_bodies, fused_outputs
from hloflops.remat.names import OpNames, is_remat_named
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.readers import output_indices, output_readers
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, value_readers
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# Ops that hand a value on unchanged (views, the get-tuple-element taking a fusion's output,
# a prefetch into another memory).
_VIEWS = frozenset({"bitcast", "reshape", "copy", "copy-start", "copy-done", "get-tuple-element"})
# Readers XLA copies no producer into: they store, move or call rather than compute.
_NOT_FUSED_INTO = frozenset({"tuple", "dynamic-update-slice", "while", "call", "conditional", "custom-call",
                             "all-gather", "all-gather-start", "all-reduce", "all-reduce-start", "reduce-scatter",
                             "all-to-all", "collective-permute", "collective-permute-start", "send", "outfeed"})


def stored_select_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey], op_names: OpNames,
                         twin_copies: dict[SiteKey, int], twin_sure: dict[SiteKey, int] | None = None) -> None:
    """`twin_copies[key] += n` for each stored select of the module docstring: n the copies the
    program without remat makes beyond this program's one. With `twin_sure`, of a lookup's copies
    those the program without remat surely makes go there instead (`_sure_lookup_copies`)."""
    callers = one_call_site(module)
    outputs = fused_outputs(module)
    readers_of = None
    backward_loops = tpu = keys = None
    for op in ops:
        inst = op.inst
        if inst.opcode != "select" or op.named or op.key in remat or len(inst.operands) != 3:
            continue
        comp = module.by_name.get(op.key[0])
        caller = callers.get(op.key[0])
        if comp is None or caller is None:
            continue
        lookup = phase(op.op_name) != "backward" and _reads_a_gather(module, comp, inst, callers)
        if not lookup:
            tpu = tpu if tpu is not None else is_tpu_module(module)
            if not tpu or phase(op.op_name) != "backward" or not _masks_a_recompute(comp, inst, op_names):
                continue
            if any(i.opcode in MATMUL_OPCODES for i in comp.instructions):
                # The recompute's matmul in the select's fusion: the mask's own chain only.
                backward_loops = backward_loops if backward_loops is not None else backward_loop_bodies(module, ops)
                if op.frame in backward_loops:
                    keys = keys if keys is not None else _keys_by_name(ops)
                    for key in _mask_chain(comp, inst, keys):
                        if key in remat:
                            twin_copies[key] = twin_copies.get(key, 0) + 1
                continue
            backward_loops = backward_loops if backward_loops is not None else backward_loop_bodies(module, ops)
            if op.frame not in backward_loops:
                continue  # the program without remat computes the mask where the select reads it
        readers_of = readers_of if readers_of is not None else value_readers(module)
        handed = _handed_out(comp, inst, outputs.get(comp.name, frozenset()))
        if not handed:
            continue
        frame, fusion = caller
        readers = output_readers(frame, fusion, output_indices(comp, handed), through=_VIEWS,
                                 passed_over=_NOT_FUSED_INTO)
        outside = [r for r in readers if not is_remat_named(r, op_names.of(frame.name, r))]
        if lookup and len(outside) == len(readers):
            continue  # no recompute reads it: the program without remat stores it too
        own = any(r.opcode not in _VIEWS and r.opcode != "tuple" and r.name not in handed
                  for r in _fused_readers(comp, inst.name))
        extra = len(outside) + own - 1
        if extra > 0:
            sure = _sure_lookup_copies(module, frame, fusion, comp, handed, outside, own, readers_of) \
                if lookup and twin_sure is not None and is_tpu_module(module) else 0  # seen on TPU only
            if sure:
                twin_sure[op.key] = twin_sure.get(op.key, 0) + sure
            if extra > sure:
                twin_copies[op.key] = twin_copies.get(op.key, 0) + extra - sure
            if lookup:
                keys = keys if keys is not None else _keys_by_name(ops)
                recomputes = [r for r in readers if r.opcode == "fusion" and all(r is not o for o in outside)]
                for key in _recomputed_chains(module, frame, fusion, comp, handed, recomputes, readers_of, keys):
                    if key in remat:
                        twin_copies[key] = twin_copies.get(key, 0) + 1


def _sure_lookup_copies(module: Module, frame: Computation, fusion: Instruction, comp: Computation,
                        handed: set[str], outside: list[Instruction], own: bool, readers_of) -> int:
    """Of the copies the program without remat makes of a stored lookup select, those it surely
    makes. A reader that feeds the select only through a layer norm's chain (broadcast factors)
    into a matmul's operand may, in the program without remat, read one stored normalized value in
    its place (TPU seed 182: the twin computes `LayerNorm_0` once, narrowed to bf16, for the q, k, v
    matmuls and their weight gradients, and copies the select 5 times, not 10; on every other TPU
    draw 0-299 it copies it into each): a hinge. A reader that computes from the select itself
    (the residual add, the layer norm's statistics and gradient: a reduce, a product with another
    full value) reads no such value: the twin copies the select into it. So the sure copies are
    those readers, the fusion computing it here where it reads it itself, and one copy for the
    matmul readers together if any, less this program's one."""
    values = _value_names(frame, fusion, comp, handed, readers_of)
    matmul_only = [r for r in outside if _feeds_matmuls_only(module, r, values)]
    return max(len(outside) - len(matmul_only) + own + bool(matmul_only) - 1, 0)


def _feeds_matmuls_only(module: Module, reader: Instruction, values: set[str]) -> bool:
    """Does the reader (a fusion) use the stored select only through elementwise ops whose other
    operands are broadcasts (a layer norm's scale, shift, mean) into matmul operands? Anything not
    plainly that (a nested fusion, a reduce, an output) counts as such a use only where it could be:
    unsure is a hinge, so the walk answers no only for a use it sees compute from the value itself."""
    if reader.opcode != "fusion":
        return reader.opcode in MATMUL_OPCODES
    called = reader.called(CallRole.FUSION)
    body = module.by_name.get(called[0]) if called else None
    if body is None:
        return True
    numbers = {i for i, name in enumerate(reader.operands) if name in values}
    chain = {i.name for i in body.instructions if i.opcode == "parameter" and parameter_number(i) in numbers}
    feeds_matmul = False
    for inst in body.instructions:  # in order: operands come first
        if not any(name in chain for name in inst.operands):
            continue
        if inst.opcode in MATMUL_OPCODES:
            feeds_matmul = True
        elif inst.opcode in ("reduce", "reduce-window", "tuple"):
            return False  # statistics of the value itself, or an output of its own
        elif inst.opcode in _CHAIN and not all(name in chain or _broadcast_side(body, name)
                                               for name in inst.operands):
            return False  # mixed with another full value (a residual add, a gradient's product)
        else:  # the chain, views, a nested fusion: taken as part of the chain (unsure, a hinge)
            chain.add(inst.name)
    return feeds_matmul and body.root.name not in chain


def _broadcast_side(body: Computation, name: str) -> bool:
    """Is the operand a side factor of a layer norm's chain: a broadcast (through elementwise ops
    of broadcasts and constants) of a smaller value?"""
    inst = body.by_name.get(name)
    for _ in range(6):
        if inst is None:
            return False
        if inst.opcode in ("broadcast", "constant"):
            return True
        if inst.opcode not in _CHAIN and inst.opcode not in ("bitcast", "reshape", "copy"):
            return False
        if not all(_broadcast_side(body, o) for o in inst.operands[1:]):
            return False
        inst = body.by_name.get(inst.operands[0]) if inst.operands else None
    return False


def _value_names(frame: Computation, fusion: Instruction, comp: Computation, handed: set[str],
                 readers_of) -> set[str]:
    """The names in the caller holding the fusion's outputs `handed` (the select's value): the
    get-tuple-elements taking them, and their views."""
    root = comp.root
    if root.opcode == "tuple":
        indices = {str(i) for i, name in enumerate(root.operands) if name in handed}
        values = {r.name for r in readers_of.get((frame.name, fusion.name), ())
                  if r.opcode == "get-tuple-element" and r.attributes.get("index") in indices}
    else:
        values = {fusion.name} if root.name in handed else set()
    todo = list(values)
    while todo:
        for reader in readers_of.get((frame.name, todo.pop()), ()):
            if reader.opcode in _VIEWS and reader.opcode != "get-tuple-element" and reader.name not in values:
                values.add(reader.name)
                todo.append(reader.name)
    return values


def _reads_a_gather(module: Module, comp: Computation, inst: Instruction, callers) -> bool:
    """Does the select pick from a gather's output (an embedding lookup), through views and the
    fusion's parameter to the op its caller hands in (a gather, or a fusion computing one)?"""
    for name in inst.operands[1:]:
        source = _through_views(comp, name)
        if source is not None and source.opcode == "parameter":
            caller = callers.get(comp.name)
            if caller is None:
                continue
            frame, fusion = caller
            number = parameter_number(source)
            if number is None or number >= len(fusion.operands):
                continue
            source = _through_views(frame, fusion.operands[number])
            if source is not None and source.opcode == "fusion":
                called = source.called(CallRole.FUSION)
                body = module.by_name[called[0]] if called else None
                source = _through_views(body, body.root.name) if body is not None else None
        if source is not None and source.opcode == "gather":
            return True
    return False


def _through_views(comp: Computation, name: str) -> Instruction | None:
    inst = comp.by_name.get(name)
    for _ in range(8):
        if inst is None or inst.opcode not in ("bitcast", "reshape", "copy", "transpose") or not inst.operands:
            return inst
        inst = comp.by_name.get(inst.operands[0])
    return inst


def _masks_a_recompute(comp: Computation, inst: Instruction, op_names: OpNames) -> bool:
    """Is the select's predicate a recomputed compare (remat-named) of its fusion?"""
    pred = _through_views(comp, inst.operands[0])
    return pred is not None and pred.opcode == "compare" and is_remat_named(pred, op_names.of(comp.name, pred))


def _fused_readers(comp: Computation, name: str) -> list[Instruction]:
    return [r for r in comp.instructions if name in r.operands]


def _handed_out(comp: Computation, inst: Instruction, outputs: frozenset[str]) -> set[str]:
    """The fusion's outputs that are the select's value: itself, or a convert of it alone (TPU's
    narrowing for the matmuls reading it), through views."""
    handed: set[str] = set()
    todo = [inst.name]
    while todo:
        name = todo.pop()
        if name in outputs:
            handed.add(name)
        for reader in _fused_readers(comp, name):
            if reader.opcode in ("bitcast", "reshape", "copy", "convert"):
                todo.append(reader.name)
    return handed


# The elementwise ops a copied producer's chain is made of (XLA copies them with it into a reader).
_CHAIN = frozenset({"convert", "add", "subtract", "multiply", "divide", "negate", "maximum", "minimum"})
# Ops that compute nothing of their own, through which a chain's side factor reads its inputs.
_SOURCES = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "iota"})


def _keys_by_name(ops: list[SiteOp]) -> dict[tuple[str, str], list[SiteKey]]:
    keys: dict[tuple[str, str], list[SiteKey]] = {}
    for op in ops:
        keys.setdefault(op.key[:2], []).append(op.key)
    return keys


def _recomputed_chains(module: Module, frame: Computation, fusion: Instruction, comp: Computation,
                       handed: set[str], recomputes: list[Instruction], readers_of,
                       keys: dict[tuple[str, str], list[SiteKey]]) -> list[SiteKey]:
    """The elementwise chain each recompute fusion of `recomputes` runs on the stored value (the
    ops reading it through elementwise ops, into nested fusions, and the side factors they multiply
    it by, computed from broadcasts alone): the chain the program without remat copies with the
    select into its own readers."""
    values = _value_names(frame, fusion, comp, handed, readers_of)
    out: list[SiteKey] = []
    for reader in recomputes:
        _chain_in(module, reader, {i for i, name in enumerate(reader.operands) if name in values}, keys, out, 0)
    return out


def _chain_in(module: Module, fusion: Instruction, numbers: set[int],
              keys: dict[tuple[str, str], list[SiteKey]], out: list[SiteKey], depth: int) -> None:
    called = fusion.called(CallRole.FUSION)
    body = module.by_name.get(called[0]) if called else None
    if body is None or not numbers or depth > 4:
        return
    chain = {i.name for i in body.instructions if i.opcode == "parameter" and parameter_number(i) in numbers}
    found: list[Instruction] = []
    for inst in body.instructions:  # in order: operands come first
        if not any(name in chain for name in inst.operands):
            continue
        if inst.opcode == "fusion":
            _chain_in(module, inst, {i for i, name in enumerate(inst.operands) if name in chain}, keys, out,
                      depth + 1)
        elif inst.opcode in _CHAIN or inst.opcode in ("bitcast", "reshape", "copy"):
            chain.add(inst.name)
            found.append(inst)
    side: set[str] = set()
    for inst in found:
        for name in inst.operands:
            factor = body.by_name.get(name)
            if factor is not None and factor.opcode in _CHAIN and name not in chain and name not in side \
                    and all(getattr(body.by_name.get(o), "opcode", None) in _SOURCES for o in factor.operands):
                side.add(name)
    for name in [i.name for i in found if i.opcode in _CHAIN] + sorted(side):
        out.extend(keys.get((body.name, name), ()))


def _mask_chain(comp: Computation, inst: Instruction, keys: dict[tuple[str, str], list[SiteKey]]) -> list[SiteKey]:
    """The cheap chain under the select's recomputed compare, up to its fusion's inputs and the
    recomputed matmul (the bias add and its widens): ops the program without remat copies into the
    fusion stacking the mask in its forward."""
    pred = _through_views(comp, inst.operands[0])
    out: list[SiteKey] = []
    seen: set[str] = set()
    todo = list(pred.operands)
    while todo:
        name = todo.pop()
        source = comp.by_name.get(name)
        if source is None or name in seen or source.opcode not in _CHAIN:
            continue
        seen.add(name)
        out.extend(keys.get((comp.name, name), ()))
        todo.extend(source.operands)
    return out
