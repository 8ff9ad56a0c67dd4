"""The per-opcode cost registry: what one execution of one instruction costs.

Each rule is a small function from an instruction (with its operand shapes) to a `Charge`: the
values XLA's `HloCostAnalysis` handler for that opcode sets, kept in the form XLA computes them
(so that `hloflops.xla.estimate` can redo XLA's float32 arithmetic step by step), plus what the
exact view charges where it differs from XLA (custom-calls, ragged-dot). `own_cost` turns a
charge into exact integers (`OpCost`).

Conventions (the contract in docs/architecture.md):
- CONTROL callees (fusion bodies, while body/condition, call, conditional branches, async
  wrapped computations) are not part of the caller's own cost: the accounting walks them as
  instructions of their own. The fusion instruction carries only its boundary bytes.
- APPLIED callees (reducers, scatter combiners, map, select-and-scatter, all of which XLA costs
  as "body x count") are included, multiplied as XLA multiplies them. Bytes inside an applied
  body are never charged (XLA copies only flops/transcendentals out of a sub-computation).
- Inside a fusion body an instruction's bytes are 0: XLA charges bytes at the fusion boundary.
- XLA special case: a `kind=kCustom` fusion whose body holds a gather or scatter is costed as
  that gather/scatter alone and XLA never visits the body. In view "xla" the fusion instruction
  therefore carries the whole cost, and every instruction of that body (and below it) costs 0,
  so that the sum over instructions still equals XLA's total. In view "exact" the fusion is an
  ordinary one (boundary bytes; the fused instructions cost what they cost).
- A conditional's own cost is 0; XLA charges the per-key maximum over its branches, which only
  `xla_estimate` (or an accounting that knows which branch runs) can apply.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from hloflops.cost import custom_calls, fusion_bytes
from hloflops.cost.costs import Cost
from hloflops.cost.registry import RULES, Applied, Charge, Ctx, Term, operand_key, out_key, ratio
from hloflops.cost.registry import register_rule, utilization_key
from hloflops.cost.shapes import array_subshapes, elements, elements_recursive, output_size, size
from hloflops.cost.shapes import produced_size, transpose_is_bitcast, value_size
from hloflops.cost.windows import convolution_flops, reduce_window_count
from hloflops.cost.tpu import compiled_for_tpu
from hloparse.ir import CallRole, Computation, Instruction, Shape

VIEWS = ("exact", "xla")

# How XLA combines a CONTROL instruction with its callee's totals (see xla_estimate).
NESTED_FUSION = "fusion"  # callee's flops/transcendentals, bytes at the boundary
NESTED_CALL = "call"  # callee's totals, every key, as they are
NESTED_WHILE = "while"  # body totals + condition totals, once
NESTED_CONDITIONAL = "conditional"  # per-key maximum over the branches
NESTED_ASYNC = "async"  # callee's totals (async-start)

def default_bytes(ctx: Ctx) -> tuple[Term, ...]:
    """XLA's Preprocess: result bytes (leaf sum for a tuple result) then every operand's bytes."""
    if ctx.bytes_unread:
        return ()
    by_name = ctx.computation.by_name
    return (output_size(ctx.instruction.shape), *[produced_size(by_name[o]) for o in ctx.instruction.operands])


# ---- elementwise ------------------------------------------------------------------------------
TRANSCENDENTAL_OPCODES = frozenset({
    "exponential", "log", "logistic", "power", "sqrt", "cbrt", "rsqrt", "tanh", "sine", "cosine",
    "exponential-minus-one", "log-plus-one", "atan2", "tan", "erf",
    # newer than any readable source; measured on jaxlib 0.10.2:
    "asin", "acos", "asinh", "acosh", "atanh", "sinh", "cosh",
})
ELEMENTWISE_FLOP_OPCODES = frozenset({
    "abs", "add", "and", "bitcast-convert", "ceil", "clamp", "count-leading-zeros", "compare", "complex", "convert",
    "divide", "floor", "imag", "is-finite", "maximum", "minimum", "multiply", "negate", "not", "or",
    "mulhi", "popcnt", "real", "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even",
    "select", "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "stochastic-convert",
    "subtract", "xor",
})


@register_rule(*TRANSCENDENTAL_OPCODES)
def _transcendental(ctx: Ctx) -> Charge:
    return Charge(transcendentals=elements(ctx.shape), bytes_terms=default_bytes(ctx))


@register_rule(*ELEMENTWISE_FLOP_OPCODES)
def _elementwise(ctx: Ctx) -> Charge:
    return Charge(flops=elements(ctx.shape), bytes_terms=default_bytes(ctx))


# ---- free and data-movement ops ---------------------------------------------------------------
FREE_OPCODES = frozenset({"parameter", "constant", "get-tuple-element", "domain", "after-all", "add-dependency",
                          "bitcast"})


@register_rule(*FREE_OPCODES)
def _free(ctx: Ctx) -> Charge:
    return FREE


FREE = Charge(io_free=True)


DEFAULT_BYTES_OPCODES = frozenset({
    "broadcast", "concatenate", "copy", "copy-start", "copy-done", "dynamic-reshape", "iota", "pad",
    "reshape", "reverse", "opt-barrier", "get-dimension-size", "set-dimension-size",
    "batch-norm-training", "batch-norm-inference", "batch-norm-grad", "topk", "recv-done", "async-update",
    "async-done", "all-gather", "all-gather-start",
    "all-gather-done", "all-reduce-done", "all-to-all", "ragged-all-to-all", "reduce-scatter",
    "collective-broadcast", "collective-permute", "collective-permute-start", "collective-permute-done",
    "partition-id", "replica-id", "rng-get-and-update-state",
})


@register_rule(*DEFAULT_BYTES_OPCODES)
def _default(ctx: Ctx) -> Charge:
    return Charge(bytes_terms=default_bytes(ctx))


def _operand_sizes(ctx: Ctx) -> tuple[Term, ...]:
    return tuple(ctx.operand_size(i) for i in range(len(ctx.instruction.operands)))


# XLA's parser re-derives the shapes of send/recv and their -done ops, whatever the text says:
# send is (operand 0, u32[] context, token[]), recv is (data, u32[], token[]), send-done a token.
@register_rule("send", operands=1)
def _send(ctx: Ctx) -> Charge:
    out = ctx.operand_size(0) + 4
    return Charge(bytes_terms=(out,) + _operand_sizes(ctx), keys=((out_key(), out),))


@register_rule("recv")
def _recv(ctx: Ctx) -> Charge:
    data = ctx.shape.tuple_shapes[0] if ctx.shape.is_tuple else ctx.shape
    out = output_size(data) + 4
    return Charge(bytes_terms=(out,) + _operand_sizes(ctx), keys=((out_key(), out),))


@register_rule("send-done")
def _send_done(ctx: Ctx) -> Charge:
    return Charge(bytes_terms=(0,) + _operand_sizes(ctx), keys=((out_key(), 0),))


@register_rule("transpose", operands=1)
def _transpose(ctx: Ctx) -> Charge:
    dims = ctx.instruction.dimensions or ()
    if transpose_is_bitcast(ctx.operand_shape(0), ctx.shape, dims):
        return FREE
    return Charge(bytes_terms=default_bytes(ctx))


@register_rule("tuple")
def _tuple(ctx: Ctx) -> Charge:
    out = size(ctx.shape)
    keys = ((out_key(), out),) + tuple((operand_key(i), 0) for i in range(len(ctx.instruction.operands)))
    return Charge(bytes_terms=(out,), keys=keys)


@register_rule("infeed")
def _infeed(ctx: Ctx) -> Charge:
    keys = tuple((out_key(index), size(leaf)) for index, leaf in ctx.shape.leaves_with_index())
    total = sum(v for _, v in keys)
    return Charge(bytes_terms=(total,), keys=keys + ((out_key(), total),))


@register_rule("outfeed")
def _outfeed(ctx: Ctx) -> Charge:
    keys: list[tuple[str, float]] = [(out_key(), 0)]  # XLA's parser gives outfeed the shape token[]
    terms = []
    for i, shape in enumerate(ctx.operand_shapes()):
        total = 0
        for index, leaf in shape.leaves_with_index():
            keys.append((operand_key(i, index), size(leaf)))
            total += size(leaf)
        keys.append((operand_key(i), total))
        terms.append(total)
    return Charge(bytes_terms=tuple(terms), keys=tuple(keys))


@register_rule("slice", operands=1)
def _slice(ctx: Ctx) -> Charge:
    out = size(ctx.shape)
    used = ratio(elements(ctx.shape), elements(ctx.operand_shape(0)))
    return Charge(bytes_terms=(2 * out,), keys=((out_key(), out), (operand_key(0), out), (utilization_key(0), used)))


@register_rule("dynamic-slice", operands=2)
def _dynamic_slice(ctx: Ctx) -> Charge:
    # XLA reads only the first start index's size (operand 1), whatever the rank.
    out, index = size(ctx.shape), ctx.operand_size(1)
    used = ratio(elements(ctx.shape), elements(ctx.operand_shape(0)))
    keys = ((out_key(), out), (operand_key(0), out), (operand_key(1), index), (utilization_key(0), used))
    return Charge(bytes_terms=(2 * out + index,), keys=keys)


@register_rule("dynamic-update-slice", operands=3)
def _dynamic_update_slice(ctx: Ctx) -> Charge:
    # Operand 0 is updated in place: only the update and the first start index are charged.
    update, index = ctx.operand_size(1), ctx.operand_size(2)
    used = ratio(elements(ctx.shape) - elements(ctx.operand_shape(1)), elements(ctx.shape))
    keys = ((out_key(), update), (operand_key(0), 0), (operand_key(1), update), (operand_key(2), index),
            (utilization_key(0), used))
    return Charge(bytes_terms=(2 * update + index,), keys=keys)


def gather_charge(computation: Computation, gather: Instruction) -> Charge:
    out, indices = size(gather.shape), value_size(computation, gather.operands[1])
    used = ratio(elements(gather.shape), elements(computation.by_name[gather.operands[0]].shape))
    keys = ((operand_key(0), out), (operand_key(1), indices), (utilization_key(0), used), (out_key(), out))
    return Charge(bytes_terms=(2 * out + indices,), keys=keys)


def scatter_charge(computation: Computation, scatter: Instruction) -> Charge:
    shapes = computation.operand_shapes(scatter)
    n = (len(shapes) - 1) // 2  # operands..., indices, updates...
    updates = shapes[n + 1 :]
    keys: list[tuple[str, float]] = []
    total = 0
    for i in range(n):  # XLA pairs update i with operand i, reading it for both
        update = value_size(computation, scatter.operands[n + 1 + i])
        keys += [(operand_key(i), update), (operand_key(n + 1 + i), update)]
        total += update
    indices = value_size(computation, scatter.operands[n])
    keys += [(operand_key(n), indices), (out_key(), total)]
    moved = 3 * sum(value_size(computation, u) for u in scatter.operands[n + 1 :]) + indices
    body = scatter.called(CallRole.TO_APPLY)
    applied = (Applied(body[0], elements(updates[0])),) if body else ()
    return Charge(bytes_terms=(moved,), applied=applied, keys=tuple(keys))


@register_rule("gather", operands=2)
def _gather(ctx: Ctx) -> Charge:
    return gather_charge(ctx.computation, ctx.instruction)


@register_rule("scatter", operands=3)
def _scatter(ctx: Ctx) -> Charge:
    return scatter_charge(ctx.computation, ctx.instruction)


# ---- dot family, convolution, fft, linear algebra ---------------------------------------------
def dot_flops(lhs: Shape, result: Shape, lhs_contracting: tuple[int, ...]) -> int:
    """XLA's GetDotFlops: 2 x result elements x product of the lhs contracting dimensions."""
    width = 1
    for d in lhs_contracting:
        width *= lhs.dims[d]
    return 2 * elements(result) * width


@register_rule("dot", "scaled-dot", operands=1)
def _dot(ctx: Ctx) -> Charge:
    dnums = ctx.instruction.dot_dimension_numbers
    flops = dot_flops(ctx.operand_shape(0), ctx.shape, dnums.lhs_contracting if dnums else ())
    return Charge(flops=flops, bytes_terms=default_bytes(ctx))


@register_rule("ragged-dot", operands=2)
def _ragged_dot(ctx: Ctx) -> Charge:
    inst = ctx.instruction
    dnums = inst.dot_dimension_numbers
    contracting = dnums.lhs_contracting if dnums else ()
    groups = inst.int_list("rhs_group_dims") or ()
    # XLA deletes result dimension i for i in range(len(rhs_group_dims)) -- the loop index, not
    # the group dimension -- before applying the dot formula (HandleRaggedDot).
    kept = list(ctx.shape.dims)
    for i in range(len(groups)):
        del kept[i]
    xla = dot_flops(ctx.operand_shape(0), Shape(ctx.shape.element_type, tuple(kept)), contracting)
    # Exact: every lhs element meets each rhs free (non-contracting, non-batch, non-group) column once.
    lhs, rhs = ctx.operand_shape(0), ctx.operand_shape(1)
    skip = set(dnums.rhs_contracting if dnums else ()) | set(dnums.rhs_batch if dnums else ()) | set(groups)
    free = 1
    for d, n in enumerate(rhs.dims):
        if d not in skip:
            free *= n
    bytes_terms = default_bytes(ctx)
    exact = Cost(2 * elements(lhs) * free, 0, int(sum(bytes_terms)))
    return Charge(flops=xla, bytes_terms=bytes_terms, exact=exact)


@register_rule("convolution", operands=2)
def _convolution(ctx: Ctx) -> Charge:
    flops = convolution_flops(ctx.instruction, ctx.operand_shape(0), ctx.operand_shape(1), ctx.shape)
    return Charge(flops=flops, bytes_terms=default_bytes(ctx))


@register_rule("fft", operands=1)
def _fft(ctx: Ctx) -> Charge:
    operand = ctx.operand_shape(0)
    if operand.is_tuple:
        operand = operand.tuple_shapes[0]
    log_factors = 1
    for n in ctx.instruction.int_list("fft_length") or ():
        log_factors *= n.bit_length() - 1 if n > 0 else -1  # Log2Floor
    return Charge(flops=2 * 4 * log_factors * elements(operand), bytes_terms=default_bytes(ctx))


@register_rule("cholesky", operands=1)
def _cholesky(ctx: Ctx) -> Charge:
    a = ctx.operand_shape(0)
    half = Fraction(size(a), 2)  # XLA: half of the matrix is read, half written
    keys = ((out_key(), size(a) / 2), (operand_key(0), size(a) / 2))
    return Charge(flops=a.dims[-1] * elements(a) // 3, bytes_terms=(half, half), keys=keys)


@register_rule("triangular-solve", operands=2)
def _triangular_solve(ctx: Ctx) -> Charge:
    a, b = ctx.operand_shape(0), ctx.operand_shape(1)
    terms = (size(ctx.shape), Fraction(size(a), 2), size(b))
    # XLA writes operand 0's key twice, the second time with operand 1's size
    keys = ((out_key(), size(ctx.shape)), (operand_key(0), ctx.operand_size(1)))
    return Charge(flops=2 * a.dims[-1] * elements(b), bytes_terms=terms, keys=keys)


@register_rule("rng")
def _rng(ctx: Ctx) -> Charge:
    return Charge(transcendentals=elements(ctx.shape), bytes_terms=default_bytes(ctx))


@register_rule("rng-bit-generator")
def _rng_bit_generator(ctx: Ctx) -> Charge:
    return Charge(transcendentals=elements_recursive(ctx.shape), bytes_terms=default_bytes(ctx))


@register_rule("sort", operands=1)
def _sort(ctx: Ctx) -> Charge:
    n = elements(ctx.operand_shape(0))
    log2_ceiling = (n - 1).bit_length() if n > 0 else -1
    return Charge(flops=n * log2_ceiling, bytes_terms=default_bytes(ctx))


# ---- ops that apply a computation ------------------------------------------------------------
def _to_apply(ctx: Ctx, index: int = 0) -> str:
    return ctx.instruction.called(CallRole.TO_APPLY)[index]


@register_rule("map")
def _map(ctx: Ctx) -> Charge:
    return Charge(bytes_terms=default_bytes(ctx), applied=(Applied(_to_apply(ctx), elements(ctx.shape)),))


def _first_output(shape: Shape) -> Shape:
    return shape if not shape.is_tuple else shape.tuple_shapes[0]


@register_rule("reduce", operands=1)
def _reduce(ctx: Ctx) -> Charge:
    count = elements(ctx.operand_shape(0)) - elements(_first_output(ctx.shape))
    return Charge(bytes_terms=default_bytes(ctx), applied=(Applied(_to_apply(ctx), count),))


@register_rule("reduce-window")
def _reduce_window(ctx: Ctx) -> Charge:
    count = reduce_window_count(ctx.instruction, ctx.shape)
    return Charge(bytes_terms=default_bytes(ctx), applied=(Applied(_to_apply(ctx), count),))


@register_rule("scan", operands=2)
def _scan(ctx: Ctx) -> Charge:
    # Measured on jaxlib 0.10.2 (no readable source has HandleScan): the body is charged once per
    # element of operand 1 (the first carry for a one-input scan).
    return Charge(bytes_terms=default_bytes(ctx), applied=(Applied(_to_apply(ctx), elements(ctx.operand_shape(1))),))


@register_rule("select-and-scatter", operands=2)
def _select_and_scatter(ctx: Ctx) -> Charge:
    source = elements(ctx.operand_shape(1))
    window_elements = 1
    for w in ctx.instruction.window or ():
        window_elements *= w.size
    applied = (Applied(_to_apply(ctx, 0), source * (window_elements - 1)), Applied(_to_apply(ctx, 1), source))
    return Charge(bytes_terms=default_bytes(ctx), applied=applied)


@register_rule("all-reduce", "all-reduce-start")
def _all_reduce(ctx: Ctx) -> Charge:
    # XLA assumes two replicas: one add per output element; the reducer body is not used.
    subshapes = [s for _, s in array_subshapes(ctx.shape)]
    out_bytes = sum(size(s) for s in subshapes)
    moved = out_bytes + sum(ctx.operand_size(i) for i in range(len(ctx.instruction.operands)))
    return Charge(flops=sum(elements(s) for s in subshapes), bytes_terms=(moved,), keys=((out_key(), out_bytes),))


# ---- calls, control flow, fusion, custom-call -------------------------------------------------
@register_rule("call")
def _call(ctx: Ctx) -> Charge:
    return Charge(nested=NESTED_CALL)


@register_rule("while")
def _while(ctx: Ctx) -> Charge:
    return Charge(nested=NESTED_WHILE)


@register_rule("conditional")
def _conditional(ctx: Ctx) -> Charge:
    return Charge(nested=NESTED_CONDITIONAL)


@register_rule("async-start", "call-start")
def _async_start(ctx: Ctx) -> Charge:
    return Charge(nested=NESTED_ASYNC)


@register_rule("fusion")
def _fusion(ctx: Ctx) -> Charge:
    inst = ctx.instruction
    body = ctx.module.computation(inst.called(CallRole.FUSION)[0])
    special = custom_fusion_gather_or_scatter(inst, body)
    if special is not None:
        # XLA costs the fusion as the gather/scatter alone and never looks inside (view "xla");
        # in truth the body runs like any fused computation (view "exact": boundary bytes here,
        # the fused instructions counted as themselves).
        charge = scatter_charge(body, special) if special.opcode == "scatter" else gather_charge(body, special)
        boundary = sum(fusion_bytes.boundary_terms(ctx.module, inst, body))
        return dataclasses.replace(charge, exact=Cost(0, 0, boundary))
    return Charge(bytes_terms=tuple(fusion_bytes.boundary_terms(ctx.module, inst, body)), nested=NESTED_FUSION)


def custom_fusion_gather_or_scatter(fusion: Instruction, body: Computation) -> Instruction | None:
    """The gather/scatter XLA costs a kCustom fusion as (the first one in the body), if any."""
    if fusion.fusion_kind != "kCustom":
        return None
    for inst in body.instructions:
        if inst.opcode in ("gather", "scatter"):
            return inst
    return None


@register_rule("custom-call")
def _custom_call(ctx: Ctx) -> Charge:
    # XLA charges every custom-call -1 (flops, bytes, optimal seconds, each operand and the
    # result); the exact view asks the target's rule (hloflops.cost.custom_calls).
    known = custom_calls.exact_cost(ctx)
    if compiled_for_tpu(ctx.module):
        # XLA's TPU cost analysis charges a Mosaic kernel its cost_estimate and every other
        # custom-call nothing (checked against cost_analysis() of tests/data/tpu's modules).
        estimated = ctx.instruction.custom_call_target == "tpu_custom_call" and not isinstance(known, str)
        xla = known if estimated else Cost(0, 0, 0)
        return Charge(flops=xla.flops, transcendentals=xla.transcendentals, bytes_terms=(xla.bytes_accessed,),
                      exact_uncounted=known if isinstance(known, str) else None,
                      exact=None if isinstance(known, str) else known)
    keys = ((out_key(), -1),) + tuple((operand_key(i), -1) for i in range(len(ctx.instruction.operands)))
    if isinstance(known, str):
        return Charge(flops=-1, bytes_terms=(-1,), optimal_seconds=-1, exact_uncounted=known, keys=keys)
    return Charge(flops=-1, bytes_terms=(-1,), optimal_seconds=-1, exact=known, keys=keys)


KNOWN_OPCODES: frozenset[str] = frozenset(RULES)

# Rules that read nothing of an instruction but its opcode, its shape and what `Reads` lists: the
# engine costs each distinct combination once per context. `operands` says when a rule reads its
# operands (their shapes and the sizes they produce, `produced_size`): never, only where bytes
# are read (`default_bytes`), or always; `attributes` are the attribute values it reads, and
# `callees` whether it reads the computations it calls (by their class: hloflops.cost.classes).
NEVER, WITH_BYTES, ALWAYS = range(3)


@dataclasses.dataclass(frozen=True)
class Reads:
    operands: int = NEVER
    attributes: tuple[str, ...] = ()
    callees: bool = False


LOCAL_RULES = {
    _free: Reads(), _transcendental: Reads(WITH_BYTES), _elementwise: Reads(WITH_BYTES),
    _default: Reads(WITH_BYTES), _all_reduce: Reads(ALWAYS), _slice: Reads(ALWAYS), _dynamic_slice: Reads(ALWAYS),
    _dynamic_update_slice: Reads(ALWAYS), _gather: Reads(ALWAYS), _transpose: Reads(ALWAYS, ("dimensions",)),
    # the flops read the lhs contracting dimensions only, but all four are decoded
    _dot: Reads(ALWAYS, ("lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims")),
    _reduce: Reads(ALWAYS, callees=True),
    _fusion: Reads(attributes=("kind",), callees=True),  # the body, never the fusion's operands
}


class MalformedInstruction(ValueError):
    """An instruction its opcode's rule cannot read (too few operands): bad input, reported as
    uncounted (and XLA's estimate is unavailable: XLA's own handler would fail on it too)."""


# The reason earlier versions printed for a rule that read past the operand list; the recorded
# outputs (tests/data/golden_outputs.jsonl.gz) hold this wording.
TOO_FEW_OPERANDS = "cannot cost (IndexError: tuple index out of range)"
