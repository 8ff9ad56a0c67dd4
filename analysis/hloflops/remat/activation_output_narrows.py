"""The forward's narrow of an activation nested, matmul and all, in the next matmul's fusion, where
the backward reads the activation's output wide (after optimization, TPU).

TPU feeds a matmul's operands to its MXU in bf16 at default precision. A value the matmul reads
from memory in f32 is rounded on the way in, no op of its own; a producer XLA nests inside the
matmul's fusion ends in an unnamed convert that narrows it. Where a checkpoint recomputes a layer's
first matmul and its activation in the backward, the forward's activation `t = tanh(x @ w + b)` is
read by the next matmul alone, and XLA nests the whole chain in that matmul's fusion, narrowing `t`
there. The program without remat keeps `t` for its backward, whose derivative reads it wide
(tanh's `1 - t * t`, the recompute's output read here by an f32 gradient op): it computes the chain
in a fusion of its own storing `t` in f32, and its next matmul reads the stored value with no
convert (TPU draws 140 and 168, tanh MLPs: convert -1,024 and -49,152 after optimization). So the
narrow runs only because of remat. hloflops.remat.nested_forward_narrows counts it where the chain
reads a value twice (gelu's `x * f(x)`); a chain of single reads is this rule's, and only where:

- the recompute of the narrowed value (a remat op of its opcode, shape and name inside the
  checkpoint) is its fusion's root and read wide by a backward op that is no matmul, no convert
  and no view: its derivative reads it, so the program without remat stores it wide. A value the
  backward reads only in matmuls (a key projection's `x @ wk + b`, TPU draw 2) may be stored
  narrowed by that program too, the narrow its as well;
- the forward runs outside any loop body. In a scan's forward body the program without remat
  writes `t` into its residual stack with a fusion that also hands the next matmul a narrowed
  copy, the same narrow (TPU draw 13, an offloaded scan's tanh).

It rests on how XLA fused the program without remat: in the range (loose), as every fusion
rule's op."""

from __future__ import annotations

from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.nested_forward_narrows import chain_matmul, read_by_a_matmul
from hloflops.remat.op_kinds import LAYOUT_VIEWS, MATMUL_OPCODES, NO_WORK_OPERANDS, shape_key
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.remat.type_corrections import bits
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Module, parameter_number


def activation_output_narrows(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The unnamed narrows at the root of a fusion nested in a matmul's fusion, outside loop bodies,
    of a chain of single reads from a forward matmul whose recompute exists, where the backward
    reads the narrowed value's recompute wide (see the module's docstring)."""
    callers = one_call_site(module)
    fused = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
             for callee in inst.called(CallRole.FUSION)}
    recomputed = [op for op in ops if op.key in remat and op.marked and op.op_name]
    by_key = {op.key: op for op in ops}
    entry = module.entry_name
    out: set[SiteKey] = set()
    for op in ops:
        inst = op.inst
        if op.marked or op.key in remat or inst.opcode != "convert" or op.frame != entry:
            continue
        comp = module.by_name[op.key[0]]
        site = callers.get(comp.name)
        if comp.root is not inst or site is None or site[0].name not in fused or not inst.operands:
            continue
        source = by_key.get((comp.name, inst.operands[0], op.key[2]))
        if source is None or source.marked or not source.op_name or not 0 < bits(inst.shape) < bits(source.inst.shape):
            continue
        matmul, _ = chain_matmul(comp, source.inst.name, by_key, op.key[2])
        if matmul is None or not read_by_a_matmul(site[0], site[1].name):
            continue
        if not _recomputed(matmul, recomputed):
            continue
        if any(_read_wide_by_backward(module, callers, by_key, r) for r in _recomputed(source, recomputed)):
            out.add(op.key)
    return out


def _recomputed(forward: SiteOp, recomputed: list[SiteOp]) -> list[SiteOp]:
    """The remat ops of the forward op's opcode and shape whose name inside the checkpoint ends
    the forward's name."""
    return [r for r in recomputed if r.inst.opcode == forward.inst.opcode
            and shape_key(r.inst.shape) == shape_key(forward.inst.shape)
            and ends_with(forward.op_name, inner_tail(r.op_name))]


def _read_wide_by_backward(module: Module, callers, by_key: dict[SiteKey, SiteOp], recompute: SiteOp) -> bool:
    """Is the recompute its fusion's root (or unfused), read by an unmarked backward op that is no
    matmul, convert or view, without a narrow between (into the fusions reading it, nested ones
    too)?"""
    comp = module.by_name[recompute.key[0]]
    site = callers.get(comp.name)
    if site is None:
        return _has_wide_reader(module, comp, recompute.inst.name, by_key, recompute.key[2])
    if comp.root is not recompute.inst:
        return False
    return _has_wide_reader(module, site[0], site[1].name, by_key, recompute.key[2])


def _has_wide_reader(module: Module, comp: Computation, name: str, by_key: dict[SiteKey, SiteOp], site: int,
                     depth: int = 4) -> bool:
    """Does a wide gradient op read the computation's value `name` (through views, and into the
    fusions reading it)?"""
    pending, seen, values = [name], set(), {name}
    while pending:
        for user in comp.users.get(pending.pop(), ()):
            if user.name in seen:
                continue
            seen.add(user.name)
            if user.opcode in LAYOUT_VIEWS:
                pending.append(user.name)
                values.add(user.name)
            elif user.opcode == "fusion" and depth:
                callee = module.by_name[user.called(CallRole.FUSION)[0]]
                numbers = {k for k, operand in enumerate(user.operands) if operand in values}
                if any(_has_wide_reader(module, callee, p.name, by_key, site, depth - 1)
                       for p in callee.parameters if parameter_number(p) in numbers):
                    return True
            elif _is_wide_gradient_op(by_key.get((comp.name, user.name, site))):
                return True
    return False


def _is_wide_gradient_op(op: SiteOp | None) -> bool:
    """An unmarked backward op computing on the value as it is: no matmul (which narrows its
    operands itself), no convert, no view."""
    return op is not None and not op.marked and bool(op.op_name) and phase(op.op_name) == "backward" \
        and op.inst.opcode not in MATMUL_OPCODES and op.inst.opcode != "convert" \
        and op.inst.opcode not in LAYOUT_VIEWS and op.inst.opcode not in NO_WORK_OPERANDS

