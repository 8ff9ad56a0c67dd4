"""Pairing where value numbering cannot see: a recompute with the forward op of the same signature
and name (`by_signature`), and, in modules without names, an op marked only by an optimization
barrier with an op of another frame that computes the same from inputs of the same shapes
(`across_frames`). hloflops.remat.pairing asks these after pairing by equal values."""

from __future__ import annotations

from collections import Counter

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.expensive_chains import unit_free
from hloflops.remat.forward_twins import same_inputs
from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.inputs import FrameInputs
from hloflops.remat.names import REMAT_SCOPE, ends_with, inner_tail, remat_depth, remat_level
from hloflops.remat.op_kinds import EXPENSIVE, MATMUL_OPCODES, shape_key
from hloflops.remat.recompute_only_casts import RecomputeOnlyCasts
from hloflops.remat.partitioned import is_partitioned, partitioned_alike, partitioned_key
from hloflops.remat.signature import signature, unit_dimension_free_signature
from hloflops.remat.stored_forward_narrows import StoredForwardNarrows, WideForwardReaders
from hloflops.remat.sites import SiteKey, SiteOp, by_number
from hloflops.remat.values import Val
from hloflops.scopes import model_components, phase, split_components
from hloparse.ir import Module


def by_signature(ops: list[SiteOp], named_ops: list[SiteOp], sizes: Counter, settled: set[SiteKey],
                  module: Module, own: set[SiteKey] = frozenset()
                  ) -> tuple[set[SiteKey], set[SiteKey], set[SiteKey]]:
    """Remat-named ops whose value matched nothing exactly. XLA simplifies a recompute and its
    forward independently (a reshape moved across an rsqrt, a fusion boundary elsewhere), so
    equal values do not always get equal numbers after optimization, and a recompute in a
    backward loop reads its inputs from another loop state than its forward. Such an op pairs
    with an op of the same signature (opcode, shapes, dimension numbers) whose op_name ends with
    the recompute's name inside its innermost checkpoint (`block_0/mlp/Dense_0/dot_general`)
    and that nothing else recomputes yet; each twin serves one recompute per remat depth and number
    of checkpoints around it (`names.enclosing_checkpoints`), a forward whose value one level's
    recompute matched exactly (`_same_value`) the other levels still (`_levels_by_value`). A
    recompute CSE merged into its forward has no such twin left and stays unpaired.

    The twin must not be the backward's own work (an unnamed op of the backward pass), and in
    the recompute's own frame it must read the same inputs (`FrameInputs`: the same layer's
    weights), so that ops of different layers never pair. Returns the recomputes found, and
    those of them paired in their own frame without their inputs compared (a callee of several
    call sites): the pairing is weak (`RematIndex.weak`), and those paired with an op of another
    frame (a scan's backward loop body against its forward loop body). Both ways (the same
    inputs in one frame; another frame) it is the rule, checked on the generated programs
    (tests/remat/test_remat_generated.py)."""
    candidates = [op for op in named_ops if op.key not in settled and sizes[op.exact] == 1]
    if not candidates:
        return set(), set(), set()
    opcodes = {op.inst.opcode for op in candidates}
    shapes = {inst.name: shape_key(inst.shape) for _, inst in module.instructions()}
    # A forward op whose value a recompute matched exactly has served that recompute's level only:
    # nested remat recomputes a layer at two levels, and the inner level's copy may read its
    # inputs from other ops (its value numbered apart: base seeds 208, 249, an encoder-decoder's
    # decoder block recomputed by the stack's checkpoint and by its own). The forward is the twin
    # of that copy too, at the other level (`names.enclosing_checkpoints`).
    served = _levels_by_value(ops, sizes, settled)
    pool: dict[tuple, list[SiteOp]] = {}
    for op in ops:
        if op.inst.opcode in opcodes and op.key not in settled and (sizes[op.exact] == 1 or op.exact in served):
            pool.setdefault(signature(op, shapes), []).append(op)
    # The twin of the shortest name first: the recompute's name inside its checkpoint names the op
    # as exactly as it can, and a longer name that ends the same way is another op's (a residual
    # add, `rematted_computation/add`, took the forward's `multi_head_attention_1/linear/add`
    # from the projection's bias add when both twins were in sight: more seeds 53, 54). A twin
    # that no recompute matched by value before one that serves a level already.
    for twins in pool.values():
        twins.sort(key=lambda twin: (sizes[twin.exact] > 1, len(model_components(twin.op_name))))
    # Sharded, a recompute's matmul may be partitioned another way than its forward (other local
    # shapes, the same FLOPs on each device: hloflops.remat.partitioned). Its twins of another
    # signature come after those of its own, and only in its frame, reading the same known inputs.
    arrays = {inst.name: inst.shape for _, inst in module.instructions()} if is_partitioned(module) else {}
    by_flops: dict[tuple[str, int], list[tuple[tuple, SiteOp]]] = {}
    for key, twins in pool.items():
        for twin in twins:
            if arrays and (flops := partitioned_key(twin.inst, arrays)) is not None:
                by_flops.setdefault(flops, []).append((key, twin))
    # A fusion's outputs and unfused ops first: a copy inside a fusion is decided with its fusion
    # (`fusion_copies`), and must not take the twin of the op it copies. Of the copies inside
    # fusions, those of a fusion handing out a recompute before those of a gradient fusion (its
    # outputs all unmarked), whose copy `fusion_copies` drops as the program without remat's own:
    # it must not take the twin of the recompute (base seed 125, bf16: the last block's gelu
    # product, recomputed in a fusion that hands it out through a bf16 round trip for the weight
    # gradient's matmul, lost the forward's twin to its copy in gelu's gradient fusion).
    outputs = fused_outputs(module)
    # A longer name first, counting the wrappers (`jit(_var)`) that `ends_with` skips: layer norm's
    # `jit(_var)/div` would otherwise lose its twin to a shorter `layer_norm/div` of jvp's own.
    # Before optimization nothing rewrote either copy, so a recompute that applies its twin's very
    # computation to inputs of the same shapes (equal abstract numbers) is surely one: those pair
    # first, each with such a twin first. A remat-named op that matches no twin so is either the
    # primal reading a saved residual (its forward computed that value) or the linearization's own
    # work (a derivative's coefficient of the same shape and name, base seed 79): it takes a twin
    # only where one is left (an unrolled gradient accumulation's microbatches all draw from the
    # pool of one callee's forward).
    structural = {twin.abstract for twins in pool.values() for twin in twins if not twin.marked} \
        if not module.is_scheduled else set()
    recomputing = {(op.key[0], op.key[2]) for op in ops  # fusions handing out a marked value
                   if op.marked and op.key[0] in outputs and op.inst.name in outputs[op.key[0]]}
    candidates.sort(key=lambda op: (op.key[0] in outputs and op.inst.name not in outputs[op.key[0]],
                                    op.key[0] in outputs and (op.key[0], op.key[2]) not in recomputing,
                                    bool(structural) and op.abstract not in structural,
                                    -len(inner_tail(op.op_name)), -len(_raw_tail(op.op_name)), op.order))
    inputs = FrameInputs(module)
    entry = module.entry_name
    used: set[tuple[SiteKey, tuple[int, int]]] = {
        (op.key, level) for op in ops if op.exact in served for level in served[op.exact]}
    found: set[SiteKey] = set()
    weak: set[SiteKey] = set()
    across: set[SiteKey] = set()  # paired with an op of another frame
    beside: list[SiteOp] = []  # paired in their own frame after optimization
    # The linearization's own ops that jax named in the recompute: what the forward computes
    # nowhere, and what the recompute computes from it (`linearization_only`). Before optimization
    # too: an LSTM cell's recompute names sigmoid's `s * (1 - s)`, which took the twin of the
    # forward's `o * tanh(c)`, a value the backward never recomputes (base seeds 107, 138).
    jvp_own = linearization_only(ops, settled)
    # XLA may lay out a recompute's elementwise op with a unit dimension its forward lacks (one
    # attention head: the scaled scores `[b, 1, q, k]` against the forward's `[b, q, k]`): a
    # recompute left without a twin of its own signature takes one equal but for unit dimensions,
    # after every recompute has had its own signature's (more 170). Not an expensive op: the value
    # numbering pairs its twin read through unit-dimension views by value (a layer norm's
    # `[b, t, 1]` rsqrt, hloflops.remat.views); a cast only where nothing but the recompute reads
    # it (below).
    # Not on TPU, whose tiled layouts keep a scan's stacked unit dimension in both copies (TPU
    # draw 29, flax's remat_scan: a layer norm's chain of its inner recompute loop took such twins
    # and its multiplies moved further over).
    squeezed: dict[tuple, list[SiteOp]] = {}
    for key, twins in pool.items() if not is_tpu_module(module) else ():
        squeezed.setdefault(unit_dimension_free_signature(key), []).extend(twins)
    recompute_only = RecomputeOnlyCasts(module, ops, inputs) if squeezed else None
    # What an unnamed recompute cast pairing with itself, another marked op or an unnamed op rests
    # on: a sure pairing only where the forward stores a narrow of the same value or reads it wide
    # (hloflops.remat.stored_forward_narrows). Only on TPU's programs (the draws that showed it).
    stored = StoredForwardNarrows(module, ops, shapes, outputs) \
        if module.is_scheduled and is_tpu_module(module) else None
    wide = WideForwardReaders(module, ops) if stored is not None else None
    for op, fallback in [(op, False) for op in candidates] + [(op, True) for op in candidates]:
        if op.key in found:
            continue
        if any((op.key[0], name, op.key[2]) in own for name in op.inst.operands):
            continue  # reads the linearization's own copy: the linearization's work too
        if op.key in jvp_own:
            # A recompute computes what the forward does from what the forward computes: one
            # reading a value the forward computes nowhere is the linearization's own work
            # (softmax's `1 / (s * s)`, the derivative of `1 / s`, named in the recompute, took
            # the forward's `1 / s` where CSE merged that recompute away: base seeds 78, 111,
            # more 119). Its twin stays free for the real recompute of `1 / s`.
            continue
        # without a name, named by its inputs (`inherit_names`): one checkpoint deep
        tail, depth = inner_tail(op.op_name), 1 if op.inherited else remat_depth(op.op_name)
        level = _level(op)
        own_signature = signature(op, shapes)
        twins = pool.get(own_signature, [])
        if fallback and op.inst.opcode in EXPENSIVE:
            continue  # an expensive op's reshaped twin pairs by value (hloflops.remat.views)
        if fallback and op.inst.opcode == "convert" and \
                (recompute_only is None or not recompute_only.holds(*op.key[:2])):
            # A cast of model parameters only the recompute reads (a layer's bf16 bias cast,
            # sliced from the stacked f32 parameters in the backward loop and cast there `[h]`, the
            # forward's `[1, h]`): the program without remat, whose backward recomputes nothing,
            # casts it only in its forward (more 60: Conv_0's bias; more 73: attention's four
            # biases). One a gradient op reads too (a weight's cast for the input gradient), or a
            # cast of a residual read back from the stack the forward saved (base 235), that
            # program casts in its backward as well: the widen and cast counts decide it
            # (hloflops.remat.recompute_only_casts).
            continue
        if fallback:
            twins = [twin for twin in squeezed.get(unit_dimension_free_signature(own_signature), ())
                     if twin not in twins]
        if arrays and (flops := partitioned_key(op.inst, arrays)) is not None:
            twins = [*twins, *(twin for key, twin in by_flops.get(flops, ())
                               if key != own_signature and twin.frame == op.frame
                               and _known_same_inputs(inputs, op, twin)
                               and partitioned_alike(op.inst, twin.inst, arrays))]
        if structural and op.abstract in structural:
            twins = sorted(twins, key=lambda twin: twin.abstract != op.abstract)
        for twin in twins:
            if remat_depth(twin.op_name) >= depth or (twin.key, level) in used:
                continue
            if twin.op_name and not ends_with(twin.op_name, tail):
                continue
            if not twin.named and phase(twin.op_name) == "backward":  # the backward's own work is no forward twin
                continue
            same_frame = twin.frame == op.frame
            if not same_frame and twin.frame == entry and op.frame != entry and len(tail) < 2:
                # A loop body's recompute pairs with an op outside every loop (a weight's cast
                # hoisted out of the forward scan) only where its name inside the checkpoint names
                # a part of the model: a bare `mul` would take the loss's multiply (seeds 27, 55:
                # jvp's own multiplies of gelu and layer norm in the backward loop).
                continue
            if same_frame and not module.is_scheduled and op.abstract != twin.abstract and \
                    op.inst.opcode not in MATMUL_OPCODES:
                # Before optimization nothing rewrote either copy: in one frame an elementwise twin
                # computes the same from inputs of the same shapes (equal abstract numbers); else
                # it is the linearization's own work (a derivative's coefficient), which reads the
                # same inputs as the forward's ops. A recompute's dot is always the primal's (the
                # recompute may read a saved stack's slice where the forward read its carry).
                continue
            if same_frame and not same_inputs(inputs, op, twin):  # another layer's op
                continue
            used.add((twin.key, level))
            found.add(op.key)
            if op.inherited and op.inst.opcode == "convert" and (twin is op or twin.marked or not twin.op_name) \
                    and stored is not None and not stored.holds(op) and not wide.wide(op.key[0], op.inst):
                weak.add(op.key)  # no stored forward narrow: the twin may cast its own (a hinge)
            if same_frame and (inputs.of(*op.key[:2]) is None or inputs.of(*twin.key[:2]) is None):
                weak.add(op.key)  # the inputs could not be compared
            elif same_frame and module.is_scheduled:
                beside.append(op)
            elif not same_frame:
                across.add(op.key)
            break
    # A recompute computes what the forward does, from what the forward computes: one that reads a
    # marked op paired with nothing, in its own frame, may be the linearization's own work instead
    # (softmax's `1 / (s * s)`, named in the recompute, took the forward's `1 / s` where CSE merged
    # that recompute away: more seed 119). Its pairing is weak.
    marked = {op.key: op for op in ops if op.marked}
    for op in beside:
        if any(key in marked and key not in found and key not in settled
               for key in ((op.key[0], name, op.key[2]) for name in op.inst.operands)):
            weak.add(op.key)
    return found, weak, across


def _known_same_inputs(inputs: FrameInputs, op: SiteOp, twin: SiteOp) -> bool:
    """Do two ops of one frame read the same inputs of it, both known? A matmul partitioned
    another way pairs on its inputs alone (its shapes differ), so unknown inputs are no."""
    mine = inputs.of(*op.key[:2])
    return mine is not None and mine == inputs.of(*twin.key[:2])


def linearization_only(ops: list[SiteOp], settled: set[SiteKey]) -> set[SiteKey]:
    """Remat-named ops left without a twin by value (not in `settled`) whose
    opcode, result (its unit dimensions aside) and name inside the checkpoint no op outside the
    backward pass has: the forward computes nothing like them, so they are not its recompute
    but the linearization's own work that jax named inside the recompute (softmax's `s * s`
    for the derivative of `1 / s`; the program without remat computes it in its forward). An
    unnamed op outside the backward (XLA's) may be any op's copy and counts as a possible twin.
    A layer norm's `rsqrt` read with a unit dimension more (one value with the forward's, through
    its views) is no such op, nor is a matmul: sharded, the partitioner may give the recompute's
    another result shape than the forward's (hloflops.remat.partitioned), and a matmul named in
    the recompute is the primal's (its tangent's matmuls are transposed into the backward)."""
    forward: dict[tuple, list[str]] = {}
    for op in ops:
        if not op.marked and phase(op.op_name) != "backward":
            forward.setdefault((op.inst.opcode, unit_free(op.inst.shape)), []).append(op.op_name)
    out: set[SiteKey] = set()
    for op in ops:
        if not op.named or op.inherited or not op.op_name or op.key in settled or op.inst.shape.is_tuple \
                or op.inst.opcode in MATMUL_OPCODES:
            continue
        tail = inner_tail(op.op_name)
        names = forward.get((op.inst.opcode, unit_free(op.inst.shape)), ())
        if tail and not any(not name or ends_with(name, tail) for name in names):
            out.add(op.key)
    # What the recompute computes from them is the linearization's too (`1 / (s * s)`), and so is
    # the bf16 round trip XLA's float normalization puts between them (`convert(convert(s * s))`,
    # named by its inputs: base seed 77).
    readers = [op for op in ops if op.named and op.key not in settled and op.key not in out]
    grown = bool(out)
    while grown:
        grown = False
        for op in readers:
            if op.key not in out and any((op.key[0], name, op.key[2]) in out for name in op.inst.operands):
                out.add(op.key)
                grown = True
    return out


def _level(op: SiteOp) -> tuple[int, int]:
    """A recompute's level (`by_signature`): `names.remat_level`."""
    return remat_level(op.op_name, op.inherited)


def _levels_by_value(ops: list[SiteOp], sizes: Counter, settled: set[SiteKey]) -> dict[Val, set[tuple[int, int]]]:
    """The values an unmarked op computes whose remat-named copies all paired by value
    (`_same_value`), with the levels those copies recompute at: the unmarked op, the forward, can
    still be the twin of a recompute at another level whose value was numbered apart."""
    unmarked: set[Val] = set()
    levels: dict[Val, set[tuple[int, int]]] = {}
    loose: set[Val] = set()  # a marked copy left unpaired: the class is not settled by value
    for op in ops:
        if sizes[op.exact] < 2 or isinstance(op.exact, tuple):
            continue
        if not op.marked:
            unmarked.add(op.exact)
        elif op.named and op.key in settled:
            levels.setdefault(op.exact, set()).add(_level(op))
        else:
            loose.add(op.exact)
    return {number: found for number, found in levels.items() if number in unmarked and number not in loose}


def _raw_tail(op_name: str) -> list[str]:
    """A recompute's name inside its checkpoint, wrappers kept (`layer_norm/jit(_var)/div`)."""
    return split_components(op_name.rpartition(REMAT_SCOPE)[2])


def across_frames(ops: list[SiteOp], sizes: Counter, settled: set[SiteKey], remat_named: bool) -> set[SiteKey]:
    """Ops marked only by an optimization barrier (modules without names: jax's lowered text)
    left without a same-value twin in their own frame: a recompute in a loop body pairs with an
    unmarked op of another frame (the forward loop's body) that applies the same computation to
    inputs of the same shapes (equal abstract number). Before optimization nothing has
    rewritten either of them, so the structure is the same. Where jax named the recompute, an op
    it named otherwise is not one, barrier or not: the gradient of a checkpointed block reads the
    cotangent through the same barrier (a conv's bias gradient under `nn.scan(nn.remat)` paired
    with the stem's bias gradient, whose reduce has the same shapes)."""
    if len({op.frame for op in ops}) < 2:  # a twin must lie in another frame than its recompute
        return set()
    if not any(op.marked and not op.named and op.key not in settled for op in ops):
        return set()
    # The frames each abstract number of an unmarked op is computed in.
    frames_of: dict[object, set[str]] = {}
    for number, members in by_number([op for op in ops if not op.marked], exact=False).items():
        frames_of[number] = {t.frame for t in members}
    found: set[SiteKey] = set()
    for op in ops:
        if op.named or not op.marked or op.key in settled or sizes[op.exact] > 1 or (remat_named and op.op_name):
            continue
        number = op.abstract
        if isinstance(number, tuple):
            continue
        frames = frames_of.get(number)
        if frames and (len(frames) > 1 or op.frame not in frames):
            found.add(op.key)
    return found
