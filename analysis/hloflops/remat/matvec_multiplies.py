"""The unnamed multiply of a small matrix-vector product TPU rewrote as `reduce(broadcast(v) * w)`:
one dot, so the multiply shares its reduce's answer (hloflops.remat.pairing calls
`with_matvec_multiplies` on the finished index; TPU, after optimization).

For a dot with a vector operand XLA's TPU pipeline may replace the dot by an elementwise product
and a reduce over the contracted dimension: `reduce(multiply(broadcast(v), w), dims={k})`. The
broadcast and the reduce keep the dot's op_name; the multiply is left without metadata. Where the
dot is a recompute, its reduce is remat-named and the pairing decides it (counted, weak, or
unsure where its forward ran as another form: a windowed loop under tensor parallelism, whose
partial products pair with nothing). The multiply is the same dot's other half, so it runs
exactly where the reduce does: remat where the reduce is, a hinge of the same kind where the
reduce is one. `hloflops.remat.marks.inherit_names` names such a multiply where `w` is an entry
parameter (TPU draw 31); in a scan's backward loop `w` is a slice of the loop's carried weight
stack, no entry parameter, and the multiply stayed model FLOPs, not even in the range: TPU draw
210 (nnx_scan, tensor parallel: the recompute's matvec reduce 1,440 unsure, its multiply 1,536
certain; truth counts both) and 191 (whole_model, tensor parallel).

The broadcast vector carries a dot's name, not always the reduce's: where XLA fused a recompute's
matvec with the backward's use of the same vector, the broadcast keeps the backward dot's name
(`transpose(jvp())/.../dot_general`) and the reduce the recompute's (utpu 191: three recomputed
reduces unsure, their multiplies model FLOPs, multiply -16,260 above the high end). A broadcast
named for any dot marks the multiply as a dot's product half."""

from __future__ import annotations

from dataclasses import replace

from hloflops.remat.index import RematIndex
from hloflops.remat.sites import Key
from hloparse.ir import Computation, Instruction, Module


def matvec_multiplies(module: Module) -> dict[Key, Key]:
    """(computation, multiply) -> (computation, reduce) for each unnamed multiply of a broadcast
    named for a dot that only a reduce named for a dot reads (module docstring)."""
    found: dict[Key, Key] = {}
    for comp in module.computations:
        readers: dict[str, list[Instruction]] = {}
        for inst in comp.instructions:
            for name in inst.operands:
                readers.setdefault(name, []).append(inst)
        for inst in comp.instructions:
            if inst.opcode != "multiply" or inst.op_name or len(inst.operands) != 2:
                continue
            users = readers.get(inst.name, [])
            if len(users) != 1 or users[0].opcode != "reduce" or not _is_dot_name(users[0].op_name):
                continue
            if any(_dot_broadcast(comp, name) for name in inst.operands):
                found[(comp.name, inst.name)] = (comp.name, users[0].name)
    return found


def with_matvec_multiplies(module: Module, index: RematIndex) -> RematIndex:
    """The index with each matvec multiply given its reduce's answer: remat, weak or unsure."""
    pairs = {multiply: reduce for multiply, reduce in matvec_multiplies(module).items()
             if multiply not in index.remat and multiply not in index.unsure and reduce not in index.partial}
    if not pairs:
        return index
    remat = frozenset(m for m, r in pairs.items() if r in index.remat)
    weak = frozenset(m for m, r in pairs.items() if r in index.weak)
    unsure = frozenset(m for m, r in pairs.items() if r in index.unsure)
    if not (remat or unsure):
        return index
    return replace(index, remat=index.remat | remat, weak=index.weak | weak, unsure=index.unsure | unsure)


def _is_dot_name(op_name: str) -> bool:
    """Named for a dot (jax's `dot_general`, as the last component)."""
    return op_name.rsplit("/", 1)[-1].startswith("dot_general")


def _dot_broadcast(comp: Computation, name: str) -> bool:
    """A broadcast named for a dot: a dot's vector operand (module docstring)."""
    inst = comp.by_name.get(name)
    return inst is not None and inst.opcode == "broadcast" and _is_dot_name(inst.op_name or "")
