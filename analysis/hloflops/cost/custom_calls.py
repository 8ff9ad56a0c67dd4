"""Exact costs of custom-calls whose arithmetic the instruction itself tells us.

XLA's cost analysis charges every custom-call -1 flops and -1 bytes. Our exact view costs the
targets below from their operands, result and attributes, and lists every other target as
uncounted with its name (never 0, never folded into a total):

- cuBLAS / cuBLASLt GEMMs (`__cublas$gemm`, `__cublas$lt$matmul*`): the dot dimension numbers in
  `backend_config.gemm_backend_config` -> 2 x result elements x contracted size, the same
  number an HLO `dot` of those operands gets.
- cuDNN convolutions (`__cudnn$conv*`): `window` and `dim_labels` -> XLA's convolution formula
  on operands 0, 1 and result element 0 (the rest of the result tuple is scratch).
- CPU LAPACK (`lapack_?potrf*`, `lapack_?trsm*` / `blas_?trsm*`): the formulas XLA uses for the
  HLO `cholesky` and `triangular-solve` ops; `lapack_?getrf*` (LU with partial pivoting): the
  operation count of the unblocked algorithm, 2mn^2-style (equal to LAPACK Working Note 41's
  count, 2n^3/3 - n^2/2 - n/6 for a square matrix). QR, eigen and SVD factorizations (geqrf,
  orgqr, syevd, gesdd, ...) are listed as uncounted: their counts are models, not exact.
- Pallas / Mosaic TPU calls (`tpu_custom_call`) that carry a `cost_estimate` in their
  backend_config: that estimate.
- `xla_builder.*` composites (e.g. `xla_builder.math.Cosh`) with a called computation: that
  computation's cost, once (it is the op's definition).
- Sharding / layout / placement annotations (`Sharding`, `xla.sdy.*`, `Pin`, ...) and TPU's
  markers (`AsyncCollectiveStart` / `Done`, `ConcatBitcast`, `AllocateBuffer`): nothing;
  host/device moves and dynamic-shape padding (`MoveToHost`, `SliceToDynamic`, ...): bytes only.
Bytes for a costed call are its operands plus its result's leaves (XLA's default rule).
Fused attention, TopK, block-scaled dots, cuDNN conv graphs and Mosaic GPU: the rules of
hloflops.cost.kernels, registered here for each of its targets.
"""

from __future__ import annotations

from typing import Any

from hloflops.cost import kernels
from hloflops.cost.costs import Cost
from hloflops.cost.registry import Ctx, NotCounted, custom_call_rule, register_custom_call
from hloflops.cost.shapes import elements, output_size, size
from hloflops.cost.windows import convolution_flops
from hloparse.ir import CallRole, Instruction, Shape

# Annotations the compiler removes or turns into nothing: no arithmetic, no memory traffic.
ANNOTATIONS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "LayoutConstraint", "annotate_device_placement",
    "Pin", "Unpin", "ShardBarrierFrom", "ShardBarrierTo", "SetBound", "AllocateBuffer",
    "__xla_internal_call_marker_before", "__xla_internal_call_marker_after",
})
# TPU's markers: `AsyncCollectiveStart` / `AsyncCollectiveDone` end the fusions that start and
# finish an async collective (the collective beside them is what moves data; their tuples are the
# collective's in-flight buffers, aliased), `ConcatBitcast` concatenates operands already laid out
# one after another in memory (a bitcast: nothing computed, nothing copied).
TPU_MARKERS = frozenset({"AsyncCollectiveStart", "AsyncCollectiveDone", "ConcatBitcast"})
# Data movement only: no arithmetic; bytes as XLA's default rule would charge them.
DATA_MOVEMENT = frozenset({"MoveToHost", "MoveToDevice", "SliceToDynamic", "PadToStatic"})
_LAPACK_KINDS = ("potrf", "trsm", "getrf")
# The exceptions a malformed backend_config (JSON the compiler wrote, read as data) raises
# while a rule reads it: the call is then uncounted, with the reason.
_UNREADABLE = (KeyError, IndexError, ValueError, TypeError, AttributeError)


def exact_cost(ctx: Ctx) -> Cost | str:
    """The exact cost of one custom-call by its target's registered rule, or a string saying
    why it is not known (no rule for the target, or the rule raised NotCounted)."""
    target = ctx.instruction.custom_call_target or ""
    fn = custom_call_rule(target)
    if fn is None:
        return f"custom-call target {target}: arithmetic unknown"
    try:
        return fn(ctx)
    except NotCounted as why:
        return f"custom-call target {target}: {why}"
    except _UNREADABLE as err:
        return f"custom-call target {target}: cannot read its dimensions ({type(err).__name__}: {err})"


def io_bytes(ctx: Ctx) -> int:
    """XLA's default bytes for a call: its result's leaves plus each operand's shape."""
    return output_size(ctx.shape) + sum(size(s) for s in ctx.operand_shapes())


@register_custom_call(*sorted(ANNOTATIONS), *sorted(TPU_MARKERS), "xla.sdy.*")
def _annotation(ctx: Ctx) -> Cost:
    return Cost(0, 0, 0)


@register_custom_call(*sorted(DATA_MOVEMENT))
def _data_movement(ctx: Ctx) -> Cost:
    return Cost(0, 0, io_bytes(ctx))


@register_custom_call("xla_builder.*")
def _xla_builder(ctx: Ctx) -> Cost:
    called = ctx.instruction.called(CallRole.CUSTOM_CALL)
    if len(called) != 1 or ctx.callee_total is None:
        raise NotCounted("arithmetic unknown")
    body = ctx.callee_total(called[0])
    if isinstance(body, str):
        raise NotCounted(f"its called computation cannot be costed ({body})")
    return Cost(body.flops, body.transcendentals, io_bytes(ctx))


@register_custom_call("__cublas$gemm", "__cublas$lt$matmul*")
def _gemm(ctx: Ctx) -> Cost:
    return Cost(gemm_flops(ctx.instruction, ctx.operand_shapes()), 0, io_bytes(ctx))


@register_custom_call(*(f"__cudnn$conv{kind}" for kind in
                        ("Forward", "BackwardInput", "BackwardFilter", "BiasActivationForward")))
def _cudnn_conv(ctx: Ctx) -> Cost:
    operands = ctx.operand_shapes()
    flops = convolution_flops(ctx.instruction, operands[0], operands[1], _first(ctx.shape))
    return Cost(flops, 0, io_bytes(ctx))


def _lapack_rule(kind: str):
    def rule(ctx: Ctx) -> Cost:
        return Cost(_lapack_flops(kind, ctx.instruction, ctx.operand_shapes()), 0, io_bytes(ctx))

    rule.__name__ = f"_lapack_{kind}"
    return rule


for _kind in _LAPACK_KINDS:
    register_custom_call(*(f"{lib}_{t}{_kind}{ffi}" for lib in ("lapack", "blas") for t in "sdcz"
                           for ffi in ("", "_ffi")))(_lapack_rule(_kind))


@register_custom_call(*sorted(kernels.TARGETS))
def _kernel(ctx: Ctx) -> Cost:
    cost = kernels.kernel_cost(ctx.computation, ctx.instruction)
    if isinstance(cost, str):  # kernels words its reasons whole; exact_cost adds the target again
        raise NotCounted(cost.removeprefix(f"custom-call target {ctx.instruction.custom_call_target}: "))
    if cost is None:
        raise NotCounted("arithmetic unknown")
    return cost


@register_custom_call("tpu_custom_call")
def _tpu_custom_call(ctx: Ctx) -> Cost:
    estimate = _cost_estimate(ctx.instruction.backend_config)
    if estimate is None:
        raise NotCounted("no cost_estimate in backend_config")
    return estimate


def gemm_flops(inst: Instruction, operands: tuple[Shape, ...]) -> int:
    config = inst.backend_config
    gemm = config.get("gemm_backend_config", config) if isinstance(config, dict) else None
    if not isinstance(gemm, dict) or "dot_dimension_numbers" not in gemm:
        raise ValueError("no gemm_backend_config.dot_dimension_numbers in backend_config")
    dnums = gemm["dot_dimension_numbers"]
    lhs = operands[0]
    width = 1
    for d in dnums.get("lhs_contracting_dimensions", []):
        width *= lhs.dims[int(d)]
    return 2 * elements(_first(inst.shape)) * width


def _lapack_flops(kind: str, inst: Instruction, operands: tuple[Shape, ...]) -> int:
    a = operands[0]
    m, n = a.dims[-2], a.dims[-1]
    batch = elements(a) // (m * n) if m * n else 0
    if kind == "potrf":  # XLA's cholesky rule: n * elements(a) / 3
        return n * elements(a) // 3
    if kind == "trsm":  # XLA's triangular-solve rule: 2 * a.dims[-1] * elements(b)
        return 2 * n * elements(operands[1])
    if kind == "getrf":  # LU with partial pivoting, m x n, k = min(m, n)
        return batch * _lu_flops(m, n)
    raise ValueError(kind)


def _lu_flops(m: int, n: int) -> int:
    # Step j (0-based, j < k): m-j-1 divisions, then (m-j-1)(n-j-1) multiply-adds (pivot search
    # comparisons are not arithmetic).
    k = min(m, n)
    return sum((m - j - 1) + 2 * (m - j - 1) * (n - j - 1) for j in range(k))


def _cost_estimate(config: Any) -> Cost | None:
    if not isinstance(config, dict):
        return None
    estimate = config.get("cost_estimate")
    if estimate is None and isinstance(config.get("custom_call_config"), dict):
        estimate = config["custom_call_config"].get("cost_estimate")
    if not isinstance(estimate, dict):
        return None
    return Cost(
        int(estimate.get("flops", 0)),
        int(estimate.get("transcendentals", 0)),
        int(estimate.get("bytes_accessed", 0)),
    )


def _first(shape: Shape) -> Shape:
    return shape.tuple_shapes[0] if shape.is_tuple else shape
