"""Who computes with a value: walks from a value to the instructions that read it, through the ops
that hand it on unchanged and across fusion boundaries. Several rules ask whether XLA could have
copied a cheap producer into its readers (hloflops.remat.stored_scales, stored_selects,
stored_gradient_chains, stored_matmul_outputs) or whether a value is stored at all
(hloflops.remat.unstored_probabilities, shared_reciprocals); they differ only in which ops hand a
value on and which readers count, so each passes those as options.

Two walks:
* `output_readers`, in a fusion's caller: the readers of some of the fusion's outputs (each taken
  by its get-tuple-element), through views; the fusion's own readers are the ones XLA could copy
  a producer of the output into.
* `computing_readers`, across fusions: into the fused computations reading the value (through
  their parameters) and out of a fused computation's root to what reads its fusion, until an
  instruction computes with it."""

from __future__ import annotations

from typing import Collection, Iterator, Mapping

from hloparse.ir import CallRole, Computation, Instruction, Module

# Ops that hand a value on unchanged between fusions: views and a prefetch into another memory.
VIEWS = frozenset({"bitcast", "reshape", "copy", "copy-start", "copy-done"})


def output_indices(comp: Computation, names: Collection[str]) -> list[int] | None:
    """Where the fused computation `comp` hands out any of the values `names`: the indices into its
    root tuple; None where its root is no tuple and is one of them (the fusion's value itself)."""
    root = comp.root
    if root.opcode != "tuple":
        return None if root.name in names else []
    return [i for i, name in enumerate(root.operands) if name in names]


def output_readers(frame: Computation, fusion: Instruction, outputs: Collection[int] | None, *,
                   through: frozenset[str] = VIEWS, passed_over: frozenset[str] = frozenset(),
                   fusions_only: bool = False) -> list[Instruction]:
    """The instructions of the fusion's caller `frame` reading its outputs `outputs` (indices into
    its root tuple, each taken by a get-tuple-element; None: a fusion of one output, its own value),
    through the readers whose opcode `through` names (they hand the value on), each once, in the
    order found. Left out: readers whose opcode `passed_over` names (they neither compute with the
    value nor hand it on to a reader that counts: a tuple, a stack's dynamic-update-slice), and with
    `fusions_only` every reader but a fusion."""
    if outputs is None:
        pending = [fusion.name]
    else:
        indices = {str(i) for i in outputs}
        pending = [r.name for r in frame.users.get(fusion.name, ())
                   if r.opcode == "get-tuple-element" and r.attributes.get("index") in indices]
    found: dict[str, Instruction] = {}
    seen = set(pending)
    while pending:
        for reader in frame.users.get(pending.pop(), ()):
            if reader.opcode in through:
                if reader.name not in seen:
                    seen.add(reader.name)
                    pending.append(reader.name)
            elif reader.opcode not in passed_over and (not fusions_only or reader.opcode == "fusion"):
                found.setdefault(reader.name, reader)
    return list(found.values())


def computing_readers(module: Module, comp: Computation, inst: Instruction,
                      callers: Mapping[str, list[tuple[Computation, Instruction]]], hands_on: frozenset[str], *,
                      escapes: bool = False) -> Iterator[tuple[Computation, Instruction] | None]:
    """The instructions that compute with the value of `inst`, with the computations holding them:
    through the readers whose opcode `hands_on` names (a computation's root tuple always hands on;
    "tuple" in `hands_on` lets every tuple hand on, a loop's operand tuple among them), into the
    fusions reading it (their parameters) and out of a fused computation's root to what reads its
    fusions (`callers`: hloflops.remat.sites.fusion_callers). With `escapes`, None where the value
    leaves the walk's sight: the root of a computation no fusion calls (a loop body's output,
    stored) or a fusion whose computation is not in the module; without, the walk stops there."""
    pending, seen = [(comp, inst)], set()
    while pending:
        comp, current = pending.pop()
        if (comp.name, current.name) in seen:
            continue
        seen.add((comp.name, current.name))
        if current is comp.root:  # leaves its computation: what reads the fusion, or stored
            if comp.name in callers:
                pending += callers[comp.name]
            elif escapes:
                yield None
        for reader in comp.users.get(current.name, ()):
            if reader.opcode in hands_on or (reader.opcode == "tuple" and reader is comp.root):
                pending.append((comp, reader))
            elif reader.opcode == "fusion":
                for callee in reader.called(CallRole.FUSION):
                    body = module.by_name.get(callee)
                    if body is None:
                        if escapes:
                            yield None
                        continue
                    params = body.parameters
                    pending += [(body, params[k]) for k, name in enumerate(reader.operands)
                                if name == current.name and k < len(params)]
            else:
                yield comp, reader
