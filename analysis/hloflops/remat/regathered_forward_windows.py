"""A forward matmul TPU runs as a windowed einsum because the backward gathers the same activation
again, in the same frame, for the matmul's transpose (after optimization; TPU, tensor parallel).

XLA's TPU pipeline turns an all-gather feeding a matmul into a windowed einsum (a `while` passing
the shards around with `collective-permute`, accumulating `acc' = select(first trip, 0, acc) +
x_i @ w_i`) only where the gathered activation has that matmul alone for its reader. The program
without remat reads the activation `x` with the forward matmul and with the backward's weight
gradient (`dW = x^T dy`) as one value: one all-gather serves both, and the forward matmul stays a
plain matmul. With remat the backward reads `x` as the checkpoint's residual, through the
optimization barrier jax puts on it (`prevent_cse`): the partitioner gathers that value apart,
under the transpose's name, and after the barrier is gone both gathers read the same value but
the forward's has one reader, so it becomes a window loop. The loop's accumulating adds and
selects and its counters run because of remat; its matmuls do not (the program without remat runs
the same product as one matmul). TPU draws 211 (jax.checkpoint in a scan unrolled into one
frame: add 1,032, select 1,024, counters 26) and 247 (nnx, a layer loop unrolled).

The sign, in this program: an all-gather named for a transpose (`transpose(` in its name) in the
window loop's own computation gathers the very value the loop windows (through views, converts and
fusion boundaries). hloflops.remat.regathered_windowed_einsums covers the backward gathering a
recompute instead; this one the backward gathering the saved residual. Where the forward and the
backward run in different loop bodies (a scan's; TPU 38, 44, 138) no gather is shared in either
program and the program without remat keeps the window loop: the sign needs the one frame. On TPU
draws 0-359 it fires on 99, 211 and 247 (each a window loop the program without remat lacks) and
on no program without remat.

As there, the weight's narrow feeding only the loop is a stand-in (that program may narrow the
weight for its plain matmul too). Matmuls XLA writes as multiply and reduce (a matrix-vector
product: TPU 191, 293) are left out: the windows' partial reductions differ from one product's."""

from __future__ import annotations

from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.regathered_windowed_einsums import GATHERS, forward_permuting_loops, only_for, window_loop
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, source_value
from hloparse.ir import Computation, Instruction, Module

# What a walk to the gathered value passes by: views and the narrows XLA puts before a gather.
_PASSES = frozenset({"bitcast", "reshape", "copy", "transpose", "convert", "reduce-precision"})


def regathered_forward_windows(module: Module, ops: list[SiteOp]) -> tuple[set[SiteKey], set[SiteKey]]:
    """(the FLOPs of forward window loops whose activation the backward gathers again in the same
    frame, but their matmuls: remat; the narrows feeding only such a loop: stand-ins), per the
    module docstring."""
    callers = one_call_site(module)
    loop_comps: set[str] = set()
    feeds: set[tuple[str, str]] = set()
    for comp, inst, inside, held in forward_permuting_loops(module):
        if not window_loop(inst, [i for i in held if i.opcode in MATMUL_OPCODES]):
            continue
        if not _gathered_again(module, callers, comp, inst):
            continue
        loop_comps |= inside
        feeds |= only_for(comp, inst)
    if not loop_comps:
        return set(), set()
    counted = {op.key for op in ops if op.key[0] in loop_comps and op.inst.opcode not in MATMUL_OPCODES}
    narrows = {op.key for op in ops if op.inst.opcode == "convert"
               and ((op.key[0], op.key[1]) in feeds or (op.frame, op.key[0]) in feeds)}
    return counted, narrows


def _gathered_again(module: Module, callers: dict[str, tuple[Computation, Instruction] | None],
                    comp: Computation, loop: Instruction) -> bool:
    """Does an all-gather named for a transpose, in `loop`'s computation, gather a value the loop
    starts from (its state tuple's elements), each traced to its source?"""
    start = comp.by_name.get(loop.operands[0]) if loop.operands else None
    if start is None or start.opcode != "tuple":
        return False

    def source(name: str) -> tuple[str, str] | None:
        found = source_value(module, callers, comp, name, lambda i: i.opcode in _PASSES, 24)
        return None if found is None else (found[0].name, found[1].name)

    windowed = {source(name) for name in start.operands} - {None}
    return any(i.opcode in GATHERS and "transpose(" in i.op_name and i.operands
               and source(i.operands[0]) in windowed for i in comp.instructions)
