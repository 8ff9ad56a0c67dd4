"""A value the backward reads back from the host: an offload policy's saved residual (TPU; asked by
hloflops.remat.stored_gradient_chains beside its identity rounding).

An offload policy (`offload_dot_with_no_batch_dims`, `save_and_offload_only_these_names`) marks no
residual with jax's identity rounding: the forward's value itself (a matmul's output, in the output
of the matmul's fusion) is sent to the host's memory space with `copy-start` / `copy-done`, fetched
back for the backward the same way, and read there whole or as halves that the compiler slices
asynchronously (`slice-start` / `slice-done`, which the parser reads as `async-start` / `-done`) and
joins again with a `ConcatBitcast` custom-call (wtpu 306, hk_loop attention under
`offload_dot_with_no_batch_dims`: the gelu's bias add reads `h @ W` so). That round trip through
`S(5)` is what the policy saved, as an identity rounding is for a saving policy
(hloflops.remat.moved_values numbers it as a value of its own for the same reason): nothing but a
policy's residual crosses the host between a forward and its backward in these programs."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.moved_values import lies_on_host
from hloflops.remat.readers import VIEWS
from hloflops.remat.sites import source_value
from hloparse.ir import Computation, Instruction, Module

# Back from a fusion's operand to the value sent to the host: views, moves between memories, the
# asynchronous slices of a read and the custom-call joining them (its first operand: the first half).
_PASSES = VIEWS | frozenset({"async-start", "async-done", "slice-start", "slice-done"})
_JOIN = "ConcatBitcast"


def read_back_from_host(module: Module, callers: Mapping[str, tuple[Computation, Instruction] | None],
                        comp: Computation, name: str) -> bool:
    """Is the value `name` of `comp` (through the fusion's parameters, views and slices) one the
    program fetched back from the host's memory space, computed on the device before it went there?"""
    crossed: list[Instruction] = []

    def passes(inst: Instruction) -> bool:
        if inst.opcode in _PASSES or (inst.opcode == "custom-call" and inst.custom_call_target == _JOIN):
            if lies_on_host(inst.shape):
                crossed.append(inst)
            return True
        return False

    source = source_value(module, callers, comp, name, passes, 16)
    # the source is the device value the program sent out (not a parameter living on the host)
    return bool(crossed) and source is not None and not lies_on_host(source[1].shape)
