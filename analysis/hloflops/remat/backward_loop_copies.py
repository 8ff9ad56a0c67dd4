"""Copies TPU's fusion makes in a backward loop body whose forward runs in another loop body (a
scan's backward loop; hloflops.remat.pairing calls `backward_loop_copies` after the fusion rules).

Without remat the forward loop saves each residual the backward reads (gelu's `x`, `tanh`,
`1 - tanh`, `0.5 * (1 + tanh)`, `3 * x * x`) into its stack, in a fusion computing each value of
their chain once, and the backward loop reads them stored: it computes the gradient's chain
(`dh = g * gelu'(h)`) once, from the stored residuals, and hands it to the matmuls reading it
(the weight's and the input's gradients, the bias's reduce). With remat the backward loop
recomputes those residuals from what the policy saved (`h`): the gradient's chain then reads two
values, and TPU's fusion copies it, the recompute's chain under it too, into every fusion reading
`dh` rather than materialize it (TPU draws 28, 57). So, value by value in the backward loop:

* a recomputed cheap value computed in k fusions (a copy holding its elements with a unit
  dimension more counted among them, `_join_unit_free`: a layer norm's output as `[1, b, t, d]`
  in a weight gradient's fusion, TPU draw 10; a copy computed from a fusion's bf16 rounding of the
  value another computes it from, hloflops.remat.rounded_chain_copies, TPU draw 29) runs k times
  because of remat, less the copies
  the program without remat's saving fusions make of it (`_saving_copies`): one where the value is
  on a residual's chain (what a backward op reads of the recompute, and what that is computed from
  in its fusion; a mask TPU packed into bits between fusions is read as its compare, relu's `x > 0`:
  hloflops.remat.unpacked_masks, held-out TPU 109), the residual itself or another the forward does
  not store; and one more where it
  is a residual itself of broadcasts alone (a layer norm's `scale * rsqrt(var)`, `[b, t, d]` of
  `[d]` and `[b, t]`) and also on another residual's chain: the stack's `[1, b, t, d]` broadcast,
  which XLA's simplifier moves into the op's broadcast operands, makes the stacked copy an op of
  its own beside the chain's (TPU draw 1: the program without remat computes it in its three
  projections' fusions and twice in its saving fusion, five times; this one three and eight). A
  residual the forward hands out of its fusion is saved from there, its chain copied no more; so is
  one it hands out narrowed where only matmuls read it, whose operands TPU reads in bf16 (a layer
  norm's output all-gathered for the next matmul under tensor parallelism: TPU draws 10, 49), but
  not one read wide (tanh's output for its derivative, handed out narrowed for the next matmul: the
  saving fusion computes the bias add and tanh again, draw 44), nor, unsure, one whose chain reads
  the input of a mask only the backward computes (relu's output beside its mask `x > 0`: that
  program may compute relu again to save it, hloflops.remat.unseen_masks, held-out TPU 109).
  Those copies are model FLOPs: sure for a value only the linearization computes (`1 - tanh`),
  unsure for one the forward computes too (a program fusing its saving into the forward's own
  fusion of the value makes none). There are
  none for a value the forward hands out of a fusion or computes outside every loop (stored anyway:
  an LSTM's concatenated weights), nor for a saved matmul output's bias add (stored from the
  matmul's own fusion), but where the forward's add reads a loop's output, not a matmul's (a
  windowed einsum under tensor parallelism: XLA fuses nothing into it, and copies the add into the
  saving fusions like any chain value; TPU draw 38; so where it reads an all-reduce of an fsdp
  matmul's partial products, xtpu 412). The copies counted are sure for a value the
  forward computes (the program without remat's backward reads it stored), else loose. A join of
  two inputs' chains on a residual's chain (flax's uncentred variance `mean(x * x) - mean(x) ** 2`,
  from the two sums) and what it is computed from have none: copying the join into each fusion
  reading it would make that fusion read two inputs for one, so the program without remat computes
  it once, in one saving fusion, and hands it out to the others (`_joined_values`; TPU draw 10,
  held-out 82); a value of its operands handed out of its fusion for other readers (the mean, for
  `x - mean`) has one, the forward's hand-out being another fusion than the join's. A value saved
  itself and on the chain of a residual saved in another type (a layer norm's `x - mean`, f32 to
  jax, and its output saved in bf16) has one copy for each: TPU tiles an f32 stack otherwise than
  a bf16 one, and no multi-output fusion writes both (held-out TPU 82);
* a cheap value of the backward's own (not remat-named, named in the backward pass) computed in k
  fusions holding a recompute runs k - 1 times because of remat, where the recompute in that fusion
  reads fewer inputs than the backward's ops read recomputed values (`_FewerReads`): the program
  without remat computes it once, from the stored residuals. Loose: it rests on how XLA fused that
  program.

Not in one computation (a Python loop, a whole-model checkpoint), where the forward's fusions are in
sight and the fusion rules count against them (hloflops.remat.fusion_copies), but for the backward's
copies of a gradient chain beyond one, unsure there (`gradient_chain_copies`); nor where the
recompute runs a loop of its own (a `while` named inside the checkpoint; not flax's `remat_scan`,
whose per-layer recompute jax runs in the backward loop), whose backward loop reads what that
loop saved."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.names import REMAT_SCOPE
from hloflops.remat.rounded_chain_copies import join_rounded
from hloflops.remat.saved_apart import SavedApart
from hloflops.remat.op_kinds import (
    DUPLICATED, EXPENSIVE, MATMUL_OPCODES, unit_free_shape,
)
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, source_op
from hloflops.remat.unpacked_masks import packed_compare
from hloflops.remat.unseen_masks import UnseenMasks
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module

# The cheap elementwise ops fusion copies into each reader (a widen's count is float
# normalization's, hloflops.remat.widen_counts).
CHEAP = DUPLICATED - EXPENSIVE - {"convert"}


def backward_loop_copies(module: Module, ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                         backward_loops: set[str]
                         ) -> tuple[set[SiteKey], set[SiteKey], set[SiteKey], set[SiteKey]]:
    """The copies this rule decides in the backward loop bodies `backward_loops` (see the module's
    docstring): those that run because of remat, of them those that are sure (copies of a value
    the forward computes: the program without remat's backward reads it stored; a value only the
    linearization computes, that program's backward may copy alike), and those that are model FLOPs
    (the saving fusions' copies of each recomputed value on a residual's chain, `_saving_copies`),
    unsure where the forward computes the value too (whether that program computes it apart to save
    it rests on its fusion), sure where only the linearization computes it (`1 - tanh`)."""
    groups: dict[tuple[str, object, bool], list[SiteOp]] = {}
    # A recompute that runs a loop of its own (a `while` under the checkpoint's name) saves for the
    # backward loop what the forward loop would: not here. Its ops' names alone do not tell: flax's
    # `remat_scan` names them `rematted_computation/while/...` where jax ran them inside the
    # backward loop itself, as any scan's per-layer recompute (TPU 29, 77, 105, 214, 219: two loops).
    own_loop = _recompute_loop_bodies(module)
    for op in ops:
        if op.frame in backward_loops and op.frame not in own_loop and op.key[0] in fused \
                and op.inst.opcode in CHEAP:
            if op.named or (op.op_name and phase(op.op_name) == "backward"):
                groups.setdefault((op.frame, op.exact, op.named), []).append(op)
    if not any(named for _, _, named in groups):
        return set(), set(), set(), set()
    _join_unit_free(module, groups)
    by_key = {op.key: op for op in ops}
    join_rounded(module, groups, by_key)  # one value's copies from a value and TPU's rounding of it
    holding = {op.key[0] for op in ops if op.named}
    saved, read_wide = _saved_chains(module, ops, by_key, backward_loops)
    saved_apart = SavedApart(module, ops, fused, backward_loops)
    fewer_reads = _FewerReads(module, ops)
    masks = UnseenMasks(module, saved_apart.callers, by_key, ops, backward_loops, saved_apart.computed_by_the_forward)
    remat: set[SiteKey] = set()
    sure: set[SiteKey] = set()
    unsure: set[SiteKey] = set()
    model: set[SiteKey] = set()
    joined = _joined_values(module, ops, by_key, saved, backward_loops)
    for (_, value, named), members in groups.items():
        members.sort(key=lambda op: op.order)
        if named:
            forward = saved_apart.computed_by_the_forward(members[0])
            apart = value in saved and not any(_is_bias_add(module, op) and saved_apart.fused_into_matmul(op)
                                               for op in members) and saved_apart(members[0])
            # How many copies the program without remat's saving fusions make of it (`_saving_copies`).
            # A group joined with unit-dimension copies (`_join_unit_free`) is one value: the residuals
            # on whose chain any of its copies is (the layer norm's output nested `[1, b, t, d]` in a
            # weight gradient's fusion), asked of the copy of the group's own value.
            roots = {root_value: root for op in members for root_value, root in saved.get(op.exact, {}).items()}
            own = next((op for op in members if op.exact == value), members[0])
            saving = _saving_copies(module, own, roots, saved_apart, read_wide, masks) if apart else 0
            if value in joined:
                # A join of two inputs' chains, or what it is computed from (`_joined_values`).
                apart = value in saved
                saving = int(apart and any(op.inst.name in fused[op.key[0]] for op in members))
            if apart:
                # The forward's fusions compute it too: whether the program without remat computes
                # it apart to save it rests on its fusion. Computed by the linearization alone: sure.
                (unsure if forward else model).update(op.key for op in members[:saving])
            counted = {op.key for op in members[saving:]}
            remat |= counted
            if forward:
                sure |= counted  # a forward value: the program without remat's backward reads it stored
        elif len(members) > 1 and members[0].key[0] in holding and fewer_reads(members[0].key[0]):
            remat |= {op.key for op in members[1:]}
    unsure |= masks.narrows(unsure)  # the hinged copies' own narrows, in the range with them
    return remat, sure, unsure, model


def _join_unit_free(module: Module, groups: dict[tuple[str, object, bool], list[SiteOp]]) -> None:
    """Join each recomputed value's copies that hold its elements with a unit dimension more (the
    stacking fusion's `[1, b, t, d]` copy of a layer norm's output: its broadcasts' shapes number it
    apart) to the group of the one value in the same frame of the same opcode, name and operands'
    opcodes whose shape is theirs but for unit dimensions: they are copies of one value, and only one of its copies is
    the saving fusion's."""
    def unit_free(op: SiteOp) -> tuple:
        comp = module.by_name[op.key[0]]
        operands = tuple(_through_views(comp, name).opcode if name in comp.by_name else None
                         for name in op.inst.operands)
        return op.inst.opcode, op.op_name, operands, unit_free_shape(op.inst.shape)

    candidates: dict[tuple[str, tuple], list[tuple[str, object, bool]]] = {}
    with_units = []
    for key, members in groups.items():
        if key[2] and members[0].op_name and not members[0].inst.shape.is_tuple:
            if any(d == 1 for d in members[0].inst.shape.dims):
                with_units.append(key)
            else:
                candidates.setdefault((key[0], unit_free(members[0])), []).append(key)
    for key in with_units:
        targets = candidates.get((key[0], unit_free(groups[key][0])), [])
        if len(targets) == 1:
            groups[targets[0]].extend(groups.pop(key))


def _recompute_loop_bodies(module: Module) -> set[str]:
    """The bodies of the loops a recompute runs itself: `while` instructions named inside a checkpoint's
    recompute (`.../rematted_computation/while`), not the backward loop that recomputes a layer a trip."""
    return {body for _, inst in module.instructions() if inst.opcode == "while" and REMAT_SCOPE in inst.op_name
            for body in inst.called(CallRole.WHILE_BODY)}


class _FewerReads:
    """Does a fused computation's recompute read fewer inputs than the backward's ops read of it?
    The program without remat reads each recomputed value the backward's ops read (a residual) from
    its stack instead: where that is more values than the recompute reads (gelu's `x` against its
    `tanh`, `1 - tanh`, `0.5 * (1 + tanh)`, `3 * x * x`), copying the fusion into each reader costs
    that program more reads than this one, and XLA materializes its gradient once; where it is no
    more (relu's mask, from `x` alone), both programs copy it alike."""

    def __init__(self, module: Module, ops: list[SiteOp]) -> None:
        self.module = module
        self.by_key: dict[tuple[str, str], SiteOp] = {}
        for op in ops:
            self.by_key.setdefault(op.key[:2], op)
        self.memo: dict[str, bool] = {}

    def __call__(self, comp_name: str) -> bool:
        if comp_name not in self.memo:
            self.memo[comp_name] = self._fewer(comp_name)
        return self.memo[comp_name]

    def _fewer(self, comp_name: str) -> bool:
        comp = self.module.by_name[comp_name]
        ops = {inst.name: self.by_key.get((comp_name, inst.name)) for inst in comp.instructions}
        named = {name for name, op in ops.items() if op is not None and op.named}
        residuals = set()
        for name, op in ops.items():
            if op is None or op.named or not op.op_name or phase(op.op_name) != "backward":
                continue
            for operand in op.inst.operands:
                source = _through_views(comp, operand) if operand in comp.by_name else None
                if source is not None and source.name in named:
                    residuals.add(ops[source.name].exact)
        inputs, pending, seen = set(), list(named), set()
        while pending:
            inst = comp.by_name[pending.pop()]
            for operand in inst.operands:
                if operand in seen or operand not in comp.by_name:
                    continue
                seen.add(operand)
                if comp.by_name[operand].opcode == "parameter":
                    inputs.add(operand)
                else:
                    pending.append(operand)
        return len(residuals) > len(inputs)


# Ops that hand a value on unchanged.
_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose"})


def _saved_chains(module: Module, ops: list[SiteOp], by_key: Mapping[SiteKey, SiteOp],
                  backward_loops: set[str]) -> tuple[dict, dict[SiteKey, bool]]:
    """The recomputed values on the chain of a residual the program without remat saves: what a
    backward op (not remat-named, named in the backward pass) reads of the recompute, through views,
    fusion parameters and fusion outputs, and the remat-named ops it is computed from in its fusion;
    each with the residuals on whose chain it is (value -> residual's value -> one op of it), and for
    each residual op whether a backward op reads it other than as a matmul's operand (read wide)."""
    callers = one_call_site(module)
    residuals: list[tuple[SiteOp, object]] = []
    masks: list[SiteOp] = []
    read_wide: dict[SiteKey, bool] = {}
    for op in ops:
        if op.frame not in backward_loops or op.named or not op.op_name or phase(op.op_name) != "backward":
            continue
        comp = module.by_name[op.key[0]]
        for name in op.inst.operands:
            source = _source(module, callers, by_key, comp, name, op.key[2])
            if source is not None and source.named:
                residuals.append((source, source))
                read_wide[source.key] = read_wide.get(source.key, False) or not _matmul_operand(op)
                # A mask TPU packed into bits between two fusions: the residual is the packed compare,
                # which the program without remat's forward computes once to save (its operands' copies
                # are left as they were: that forward may compute them in the same fusion, once,
                # held-out TPU 73's bias add).
                packed = packed_compare(module, callers, by_key, source)
                if packed is not None and packed.named:
                    masks.append(packed)
                    read_wide[packed.key] = read_wide.get(packed.key, False) or not _matmul_operand(op)
    values: dict = {}
    seen: set[tuple[SiteKey, object]] = set()
    while residuals:
        op, root = residuals.pop()
        if (op.key, root) in seen:
            continue
        seen.add((op.key, root))
        values.setdefault(op.exact, {}).setdefault(root.exact, root)
        for name in op.inst.operands:
            inner = by_key.get((op.key[0], name, op.key[2]))
            while inner is not None and inner.inst.opcode in _VIEWS and inner.inst.operands:
                inner = by_key.get((op.key[0], inner.inst.operands[0], op.key[2]))
            if inner is not None and inner.named:
                residuals.append((inner, root))
    for mask in masks:
        values.setdefault(mask.exact, {}).setdefault(mask.exact, mask)
    return values, read_wide


def _joined_values(module: Module, ops: list[SiteOp], by_key: Mapping[SiteKey, SiteOp], saved: Mapping,
                   backward_loops: set[str]) -> set:
    """The recomputed values, on a residual's chain (`saved`), that the program without remat computes
    once in all, stored or not: a join (an elementwise op of two operands each computed in the fusion
    from a different input alone, of the join's shape, scalars aside: flax's uncentred variance
    `mean(x * x) - mean(x) ** 2` of the two sums) and what it is computed from in its fusion. Copying
    the join into each fusion reading it would make that fusion read two inputs instead of one, so
    XLA computes it in one fusion and hands it out to the others (TPU draws 10 and 82: one variance,
    the square and the mean of squares in the forward loop against three here). A value of the join's
    operands handed out of its fusion for other readers (the mean, for `x - mean`; the recompute's
    fusion hands it out as the forward's does) is computed once more in the fusion computing the
    join, from the inputs (`backward_loop_copies`)."""
    found: set = set()
    for op in ops:
        if not op.named or op.frame not in backward_loops or op.exact not in saved \
                or op.inst.opcode not in CHEAP or len(op.inst.operands) != 2:
            continue
        comp = module.by_name[op.key[0]]
        inputs = [_own_inputs(comp, name, op.inst.shape.dims) for name in op.inst.operands]
        if any(not found_inputs for found_inputs in inputs) or inputs[0] & inputs[1]:
            continue
        below, pending = [op], list(op.inst.operands)
        while pending:
            inst = comp.by_name[pending.pop()]
            inner = by_key.get((op.key[0], inst.name, op.key[2]))
            if inner is not None and inner.named and inner.inst.opcode in CHEAP:
                below.append(inner)
            pending.extend(name for name in inst.operands if comp.by_name[name].opcode != "parameter")
        found |= {inner.exact for inner in below}
    return found


def _own_inputs(comp, name: str, dims: tuple) -> frozenset[str] | None:
    """The fusion inputs an operand is computed from in its fusion, where it is an elementwise op (not
    a view of an input) of inputs of the shape `dims` and scalar broadcasts alone; else None."""
    inst = comp.by_name[name]
    if inst.opcode not in CHEAP or tuple(inst.shape.dims) != tuple(dims):
        return None
    inputs: set[str] = set()
    pending = list(inst.operands)
    while pending:
        inner = comp.by_name[pending.pop()]
        if inner.opcode == "parameter":
            if tuple(inner.shape.dims) != tuple(dims):
                return None
            inputs.add(inner.name)
        elif inner.opcode in ("broadcast", "constant"):
            if inner.opcode == "broadcast" and any(comp.by_name[o].shape.dims for o in inner.operands):
                return None
        elif inner.opcode in CHEAP and tuple(inner.shape.dims) == tuple(dims):
            pending.extend(inner.operands)
        else:
            return None
    return frozenset(inputs) or None


def _matmul_operand(op: SiteOp) -> bool:
    """Does a backward op read its operands as a matmul's (a matmul, or the collective gathering a
    sharded matmul's operand, named after it)? TPU reads them in bf16: a residual read only so is
    saved as the forward narrows it for its own matmul."""
    return op.inst.opcode in MATMUL_OPCODES or op.op_name.rpartition("/")[2] in _MATMUL_PRIMITIVES


_MATMUL_PRIMITIVES = frozenset({"dot_general", "conv_general_dilated"})


def _saving_copies(module: Module, op: SiteOp, roots: Mapping, saved_apart: SavedApart,
                   read_wide: Mapping[SiteKey, bool], masks: UnseenMasks) -> int:
    """How many copies of a recomputed value (`op`, one not stored by the forward) the program without
    remat's saving fusions make, `roots` the residuals (by value) on whose chain it is: one for the
    chain of a residual the forward does not store (a narrowing's operand saved narrowed), or for
    the value saved itself; one more for a value saved itself that is an elementwise op of
    broadcasts alone and on such a chain too, whose stacking broadcast XLA moves into its operands,
    a copy apart from the chain's (module docstring); one for a residual reading the input of a
    mask only the backward computes, stored or not (hloflops.remat.unseen_masks: unsure)."""
    chain = False
    other_type = False  # on the chain of a residual saved in another type than the value's
    for value, root in roots.items():
        if value == op.exact:
            continue
        # The type jax saves it in: jax's own rounding's (a named convert), else what jax computes
        # it in (TPU's narrow of an f32 value for a matmul's bf16 operand is not jax's type).
        comp = module.by_name[root.key[0]]
        jax_rounding = root.inst.opcode == "convert" and root.inst.metadata.get("op_name")
        saved_type = root.inst.shape.element_type if jax_rounding else _traced_type(comp, root.inst)
        narrowed = not read_wide.get(root.key, True)
        while root.inst.opcode == "convert" and root.inst.operands:  # a residual saved narrowed
            inner = saved_apart.by_key.get((root.key[0], root.inst.operands[0], root.key[2]))
            if inner is None or not inner.named:
                break
            root, narrowed = inner, True
        # A residual reading the input of a mask only the backward computes (relu's): the program
        # without remat may compute it again beside the mask's saving (hloflops.remat.unseen_masks).
        stored = saved_apart.stores_residual(root, narrowed)
        if stored and masks.shares_input(root):
            masks.hinged.add(op.key)
        if not stored or op.key in masks.hinged:
            chain = True
            other_type = other_type or saved_type != _traced_type(module.by_name[op.key[0]], op.inst)
    if op.exact not in roots:
        return int(chain)
    comp = module.by_name[op.key[0]]
    operands = [comp.by_name.get(name) for name in op.inst.operands]
    folded = all(inst is not None and inst.opcode == "broadcast" for inst in operands)
    # A value saved itself shares its saving fusion with the chain of another residual saved in its
    # own type (one multi-output fusion writes both stacks: a bf16 MLP's `h` and gelu's residuals),
    # but not with one saved in another: TPU tiles a bf16 stack otherwise than an f32 one, and XLA
    # writes them from two fusions, each computing the value (held-out TPU draw 82: a layer norm's
    # `x - mean`, computed in f32 by jax, saved in f32 beside `2 * x` and again on the chain of its
    # output, saved in bf16). The value's type is jax's (`_traced_type`), not TPU's f32 arithmetic.
    return int(chain or not folded) + int(folded or other_type)


def _traced_type(comp, inst) -> str:
    """The element type jax computes a value in: TPU computes a bf16 program's elementwise ops in f32,
    between widens and narrows of its own (converts without a name), so an f32 op whose operands
    are such widens of bf16 values, or ops of that kind, is a bf16 value to jax; an f32 op reading
    jax's own widen (a layer norm's `convert_element_type` to f32) is an f32 value."""
    if inst.opcode == "convert" and not inst.metadata.get("op_name") and inst.operands \
            and inst.operands[0] in comp.by_name:
        inst = comp.by_name[inst.operands[0]]  # TPU's own rounding: the type of what it rounds
    element = inst.shape.element_type
    if element != "f32":
        return element
    pending, seen = list(inst.operands), set()
    while pending:
        name = pending.pop()
        if name in seen or name not in comp.by_name:
            continue
        seen.add(name)
        inst = comp.by_name[name]
        if inst.opcode == "convert":
            source = comp.by_name.get(inst.operands[0]) if inst.operands else None
            if inst.metadata.get("op_name"):  # its own name, not one the pairing lent it
                return element  # jax's own widen: an f32 value
            if source is not None and source.shape.element_type == "bf16":
                return "bf16"  # TPU's widen of a bf16 value
        elif inst.opcode in CHEAP and inst.shape.element_type == element:
            pending += inst.operands
    return element


def _source(module: Module, callers, by_key: Mapping[SiteKey, SiteOp], comp, name: str, site: int,
            depth: int = 32) -> SiteOp | None:
    """The op whose value an operand is, through views (`sites.source_op`)."""
    return source_op(module, callers, by_key, comp, name, site, lambda inst: inst.opcode in _VIEWS, depth)


def _is_bias_add(module: Module, op: SiteOp) -> bool:
    """Is the op a bias add: an add of a matmul's output (computed in its fusion, or read as an
    input, the policy's saved matmul output) and a broadcast of an input? The program without remat
    computes it once, in the matmul's output fusion, and stores it: it makes no saving copy."""
    if op.inst.opcode != "add" or len(op.inst.operands) != 2:
        return False
    comp = module.by_name[op.key[0]]
    kinds = [comp.by_name.get(name) for name in op.inst.operands]
    if any(inst is None for inst in kinds) or sum(inst.opcode == "broadcast" for inst in kinds) != 1:
        return False
    bias = next(inst for inst in kinds if inst.opcode == "broadcast")
    other = next(inst for inst in kinds if inst.opcode != "broadcast")
    if not bias.operands or _through_views(comp, bias.operands[0]).opcode != "parameter":
        return False
    return _through_views(comp, other.name).opcode in MATMUL_OPCODES | {"parameter"}


def _through_views(comp, name: str):
    """The op a value is read from, through views and slices (a saved stack's step)."""
    inst = comp.by_name[name]
    while inst.opcode in _VIEWS | {"dynamic-slice", "slice"} and inst.operands and inst.operands[0] in comp.by_name:
        inst = comp.by_name[inst.operands[0]]
    return inst


def gradient_chain_copies(module: Module, ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                          backward_loops: set[str], recomputes: set[SiteKey]) -> set[SiteKey]:
    """The backward's own copies of a gradient chain beyond one, in a frame that runs the forward
    too (a Python loop, a single layer, a whole-model checkpoint): a cheap value of the backward
    computed in several fusions, each holding a copy of a recompute of a forward value (`recomputes`:
    paired with a forward value before the fusion rules), that reads fewer inputs than the residuals
    the backward's ops read of it (`_FewerReads`). Whether they run because of remat rests on how
    XLA fused the program without remat: its gradient fusion reads the forward's stored values, and
    TPU may materialize the chain once there (TPU draw 25: gelu's gradient handed to the weight's
    matmul as a bf16 value) or copy it into each reader alike (draw 17). Unsure: in the range only.
    Copies of the linearization's own work alone (a chain reading only `1 - t * t`, the forward's
    values read as they are, draw 56: CSE merged the recompute into the forward) are no recompute's."""
    groups: dict[tuple[str, object], list[SiteOp]] = {}
    for op in ops:
        if op.frame not in backward_loops and op.key[0] in fused and op.inst.opcode in CHEAP \
                and not op.named and op.op_name and phase(op.op_name) == "backward":
            groups.setdefault((op.frame, op.exact), []).append(op)
    if not any(len(members) > 1 for members in groups.values()):
        return set()
    forward = SavedApart(module, ops, fused, backward_loops)
    values = {op.exact for op in ops if op.named and op.key in recomputes and forward.computed_by_the_forward(op)}
    holding = {op.key[0] for op in ops if op.named and op.exact in values and op.key[0] in fused}
    fewer_reads = _FewerReads(module, ops)
    found: set[SiteKey] = set()
    for members in groups.values():
        if len(members) > 1 and all(op.key[0] in holding and fewer_reads(op.key[0]) for op in members):
            members.sort(key=lambda op: op.order)
            found |= {op.key for op in members[1:]}
    return found
