"""A recompute's cheap copy that TPU nested inside the fusion of a *recomputed* matmul, itself nested
in a gradient fusion: a hinge (hloflops.remat.fusion_copies puts it among its stand-ins).

TPU nests a matmul's cheap elementwise producers (gelu's chain) as a loop fusion inside the matmul's
output fusion, once per matmul reading them, and may nest that whole matmul fusion in turn inside a
gradient fusion that reads its output. `_nested_in_gradient_matmuls` judges a nested copy by the
outermost fusion's outputs: a gradient fusion's, so model FLOPs, as the twin builds the value inside
its own gradient matmuls the same way. But where the matmul the copy feeds directly is itself a
recompute (remat-named, in the recompute set: the forward's `Dense_1` run again in the backward),
the twin has no such matmul, so no such copy there; whether its count is one the twin makes
elsewhere (a second forward copy nested in a matmul that stores the value for the backward) rests
on how XLA fused the twin's forward, which this program does not show. The copy stays model FLOPs,
and the high end counts it (TPU ytpu 456: gelu nested in the recomputed `Dense_1` inside gelu's
gradient fusion; the twin keeps a second forward copy instead, 98,304 multiply FLOPs of truth).
"""

from __future__ import annotations

from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp, fusion_callers
from hloparse.ir import Computation, Module

# views XLA puts between a nested producer fusion and the matmul that reads it
_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose"})


def recomputed_matmul_nests(module: Module, ops: list[SiteOp], nested: set[SiteKey],
                            remat: set[SiteKey]) -> set[SiteKey]:
    """Remat-named copies taken for model FLOPs (not in `remat`) that run for a matmul in the
    recompute set where that matmul's fusion is nested in another: those of `nested` in the
    matmul's own fused computation (its epilogue), and those in a fused computation called by a
    fusion the matmul reads, directly or through views (its nested producers)."""
    callers = fusion_callers(module)
    verdict: dict[tuple[str, int], bool] = {}
    found: set[SiteKey] = set()
    for op in ops:
        key = op.key
        comp_name, site = key[0], key[2]
        if not op.marked or (key in remat and key not in nested) or comp_name not in callers:
            continue
        if key in nested and _recomputed_matmul_in(module.by_name[comp_name], site, remat, None):
            found.add(key)
            continue
        if (comp_name, site) not in verdict:
            host, fusion = callers[comp_name][-1]
            verdict[(comp_name, site)] = host.name in callers and \
                _recomputed_matmul_in(host, site, remat, fusion.name)
        if verdict[(comp_name, site)]:
            found.add(key)
    return found


def _recomputed_matmul_in(host: Computation, site: int, remat: set[SiteKey], fusion: str | None) -> bool:
    """Does `host` run a matmul of the recompute set (reading `fusion`, through views, if given)?"""
    names: set[str] = set()
    if fusion is not None:
        names, frontier = {fusion}, [fusion]
        while frontier:  # the fusion's value through views
            name = frontier.pop()
            for inst in host.users.get(name, ()):
                if inst.opcode in _VIEWS and inst.name not in names:
                    names.add(inst.name)
                    frontier.append(inst.name)
    return any(inst.opcode in MATMUL_OPCODES and (host.name, inst.name, site) in remat
               and (fusion is None or names.intersection(inst.operands)) for inst in host.instructions)
