"""A cheap forward chain the forward only copies into its matmuls, which the recompute stores for
the gradient matmuls (hloflops.remat.pairing calls `gradient_reader_copies` on TPU).

Without a loop: a layer norm's `(x - mean) * rstd` feeding the attention's query, key and value
projections. This program's forward never stores it: XLA copies the cheap chain into each
projection's fusion (and the variance's reduce). Its weights' gradients read the value the
checkpoint's recompute computes, stores narrowed to bf16 (a fusion of its own) and gathers. The
program without remat has no recompute: each weight's gradient reads the forward's value, and
XLA copies the cheap chain into each of those gradient fusions as well (htpu 116, python_loop tp:
the twin runs `x - mean` 7 times at [8,16,16] against this forward's 4; -6,144 subtract FLOPs no
split of this program's ops reaches). How many copies it makes rests on how XLA fused that
program (it may store the value once instead): nothing here tells, so each forward matmul
fusion holding a copy of the chain stands for one more copy there (its weight's gradient), a
`twin_copies` hinge of one on each cheap op of that copy: the range's low end only, never the
split.

The sign in this program: a recompute (`rematted_computation`) fusion of its own whose root
narrows a cheap chain, read (through views and all-gathers) by a matmul fusion outside the
recompute; and forward fusions, outside every checkpoint, holding a matmul and a nested copy (at
any depth: a projection's fusion nested in the attention scores', wtpu 313, vtpu 282) of a
chain of the same ops (opcode and op_name's last part; not the same shape, the recompute's may be
a shard it gathers). A forward that stored the value would hand it to its matmuls, not copy it."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.checkpoint_input_copies import CHEAP_COPIED, FREE_OPS, fusion_readers, outside_checkpoints
from hloflops.remat.names import REMAT_SCOPE
from hloflops.remat.sites import fusion_call_counts, one_call_site
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module

_MATMULS = frozenset({"convolution", "dot"})
_PASS = frozenset({"bitcast", "copy", "reshape", "transpose", "all-gather", "all-gather-done",
                   "all-gather-start", "get-tuple-element"})
Signature = frozenset[tuple[str, str]]


def gradient_reader_copies(module: Module) -> Mapping[tuple[str, str], int]:
    """(fused computation, op) -> 1 for each cheap op of a chain copy in a forward matmul fusion
    whose chain the recompute stores for a gradient matmul (module docstring)."""
    fused = fusion_call_counts(module)  # the fused computations
    stored: set[Signature] = set()  # chains the recompute stores for gradient matmuls
    for callee, site in one_call_site(module).items():
        if site is None or site[0].name in fused:
            continue
        caller, fusion = site
        comp = module.by_name.get(callee)
        if comp is None or comp.root is None or comp.root.opcode != "convert" or fusion.shape.is_tuple:
            continue
        chain = _chain(module, comp)
        if not chain:
            continue
        names = [inst.op_name for inst in chain]
        key = _signature(chain)
        if all(REMAT_SCOPE in name for name in names):
            if any(_holds_matmul(module, inst) and REMAT_SCOPE not in inst.op_name
                   for inst in fusion_readers(caller, fusion, _PASS, root_reads=False)):
                stored.add(key)
    if not stored:
        return {}
    out: dict[tuple[str, str], int] = {}
    for callee, site in one_call_site(module).items():
        if site is None or site[0].name in fused:
            continue
        fusion = site[1]
        comp = module.by_name.get(callee)
        if comp is None or not outside_checkpoints(fusion) or phase(fusion.op_name) != "forward":
            continue
        if not any(inst.opcode in _MATMULS for inst in comp.instructions):
            continue
        # the chain's copies nested at any depth: a projection's fusion may itself be nested in the
        # fusion of the matmul reading its output (the attention scores', wtpu 313)
        pending = [name for inst in comp.instructions if inst.opcode == "fusion"
                   for name in inst.called(CallRole.FUSION)]
        while pending:
            nested_name = pending.pop()
            nested = module.by_name.get(nested_name)
            if nested is None:
                continue
            chain = _chain(module, nested)
            if chain and _signature(chain) in stored and all(outside_checkpoints(op) for op in chain):
                for op in chain:
                    out[(nested_name, op.name)] = 1
            elif not chain:
                pending.extend(name for inst in nested.instructions if inst.opcode == "fusion"
                               for name in inst.called(CallRole.FUSION))
    return out


def _signature(chain: list[Instruction]) -> Signature:
    """A chain's ops (opcode, op_name's last part): the forward's copy and the recompute's share
    them; not their shape (the recompute's may be a shard, gathered for its readers)."""
    return frozenset((inst.opcode, inst.op_name.rsplit("/", 1)[-1]) for inst in chain)


def _chain(module: Module, comp: Computation) -> list[Instruction]:
    """The cheap elementwise ops of a fused computation, none where it holds another kind of op."""
    chain: list[Instruction] = []
    for inst in comp.instructions:
        if inst.opcode == "fusion" or inst.opcode in FREE_OPS:
            if inst.opcode == "fusion":
                return []
            continue
        if inst.opcode not in CHEAP_COPIED:
            return []
        chain.append(inst)
    return chain


def _holds_matmul(module: Module, inst: Instruction) -> bool:
    """A fusion with a matmul in it (nested fusions included)."""
    if inst.opcode != "fusion":
        return False
    pending = list(inst.called(CallRole.FUSION))
    while pending:
        comp = module.by_name.get(pending.pop())
        if comp is None:
            continue
        for op in comp.instructions:
            if op.opcode in _MATMULS:
                return True
            if op.opcode == "fusion":
                pending.extend(op.called(CallRole.FUSION))
    return False
