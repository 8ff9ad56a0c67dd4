"""Custom-call kernels that carry LLM steps, beyond the GEMMs and convolutions of custom_calls.py.

Each rule is a small pure function of the computation and the instruction that returns a `Cost`
or a string saying why the cost is unknown; `kernel_cost` picks the rule by target and returns
None for a target it does not know (the caller then reports it as before).

- Fused attention (cuDNN, TransformerEngine): hloflops.cost.attention, its stated convention.
- `TopK`: XLA's TopkDecomposer runs it as a sort of the whole input (with an iota of indices)
  and slices; XLA's sort rule charges n * ceil(log2 n) flops, n the input's elements.
- `__op$block_scaled_dot` / `__cudnn$blockScaledDot` (MX / NVFP4 matmuls): lhs [.., M, K] and
  rhs [.., N, K] contract their last dimension: the dot's 2 x result x K, plus one multiply per
  lhs and rhs element (its block's scale) and one per result element for a global scale operand.
- `__cudnn$convForwardGraph`: the convolution rule on operands 0 and 1 and result element 0, as
  for the other cuDNN convolutions (the fused pointwise graph is serialized, not counted).
- Mosaic GPU (`mosaic_gpu`, `mosaic_gpu_v2`): uncounted with the reason: jax drops Pallas'
  `cost_estimate` for GPU kernels, so nothing in the HLO says what the kernel computes.
- TPU `tpu_custom_call` (Pallas / Mosaic TPU) with a `cost_estimate`: counted in custom_calls.py;
  `row_note` says the kernel's author estimated it.
"""

from __future__ import annotations

from hloflops.cost import attention
from hloflops.cost.costs import Cost
from hloflops.cost.shapes import elements, output_size, size
from hloflops.cost.windows import convolution_flops
from hloparse.ir import Computation, Instruction, Shape

BLOCK_SCALED_DOT = frozenset({"__op$block_scaled_dot", "__cudnn$blockScaledDot"})
MOSAIC_GPU = frozenset({"mosaic_gpu", "mosaic_gpu_v2"})
AUTHOR_ESTIMATED = frozenset({"tpu_custom_call"})


def kernel_cost(computation: Computation, inst: Instruction) -> Cost | str | None:
    """The cost of a kernel this module knows, a reason it cannot be costed, or None."""
    target = inst.custom_call_target or ""
    if attention.is_attention(target):
        return attention.attention_cost(computation, inst)
    rule = RULES.get(target)
    if rule is None:
        return None
    try:
        return rule(computation, inst)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError) as err:
        return f"custom-call target {target}: cannot read its dimensions ({type(err).__name__}: {err})"


def op_group(opcode: str, target: str | None) -> str:
    """The `by_opcode` key of a row: fused attention has a line of its own."""
    return attention.ATTENTION if attention.is_attention(target) else opcode


def row_note(computation: Computation, inst: Instruction) -> str | None:
    """What a counted custom-call's row says about how it was counted (None: nothing to say)."""
    if inst.opcode != "custom-call":
        return None
    target = inst.custom_call_target or ""
    if attention.is_attention(target):
        return attention.note(computation, inst)
    if target in AUTHOR_ESTIMATED:
        return "cost estimated by the kernel's author (Pallas cost_estimate in backend_config)"
    if target == "TopK":
        return "counted as XLA's sort-based decomposition (sort of the whole input)"
    return None


def _moved(computation: Computation, inst: Instruction) -> int:
    return output_size(inst.shape) + sum(size(s) for s in computation.operand_shapes(inst))


def _first(shape: Shape) -> Shape:
    return shape.tuple_shapes[0] if shape.is_tuple else shape


def topk_cost(computation: Computation, inst: Instruction) -> Cost:
    n = elements(computation.operand_shapes(inst)[0])
    log2_ceiling = (n - 1).bit_length() if n > 0 else -1  # XLA's sort rule
    return Cost(n * log2_ceiling, 0, _moved(computation, inst))


def block_scaled_dot_cost(computation: Computation, inst: Instruction) -> Cost:
    operands = computation.operand_shapes(inst)
    lhs, rhs = operands[0], operands[1]
    result = _first(inst.shape)
    if lhs.dims[-1] != rhs.dims[-1]:
        raise ValueError(f"lhs {lhs.dims} and rhs {rhs.dims} do not share their last (contracting) dimension")
    flops = 2 * elements(result) * lhs.dims[-1] + elements(lhs) + elements(rhs)
    if len(operands) > 4:  # a global scale
        flops += elements(result)
    return Cost(flops, 0, _moved(computation, inst))


def conv_graph_cost(computation: Computation, inst: Instruction) -> Cost:
    operands = computation.operand_shapes(inst)
    return Cost(convolution_flops(inst, operands[0], operands[1], _first(inst.shape)), 0, _moved(computation, inst))


def mosaic_gpu_cost(computation: Computation, inst: Instruction) -> str:
    return (f"custom-call target {inst.custom_call_target}: a Mosaic GPU kernel carries no cost estimate "
            "(jax drops Pallas' cost_estimate for GPU kernels)")


RULES = {
    "TopK": topk_cost,
    "__cudnn$convForwardGraph": conv_graph_cost,
    **{t: block_scaled_dot_cost for t in BLOCK_SCALED_DOT},
    **{t: mosaic_gpu_cost for t in MOSAIC_GPU},
}
# Every target kernel_cost answers for (a custom-call registry registers kernel_cost for each).
TARGETS = attention.TARGETS | frozenset(RULES)
