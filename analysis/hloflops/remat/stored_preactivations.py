"""A recomputed pre-activation the recompute's matmul fusion stores narrowed and the backward
widens back (after optimization, TPU only).

The recompute's convolution fusion computes `z = conv(x, w) + b`, hands out `z` narrowed to bf16
(beside relu's packed mask) and a loop fusion widens it back to take relu for the weight
gradient. The program without remat makes the same round trip in its forward: it stores bf16 `z`
for its backward, which widens it alike, and widens it once more for its own relu (held-out TPU
draw 60: this program's forward fuses conv, bias, relu and the narrow of the activation, and never
narrows `z`). So the narrow and the widen are not surely remat (the pairing counted both, sure,
+65,536 convert FLOPs), and the program without remat may run one more widen than this one: a
`twin_copies` hinge of one on the widen, lowering the range's low end only.

Only a narrowing convert (fewer bits out) of a remat-counted bias add of a matmul's output in the
same fused computation, handed out of its fusion, and widened back to the bias add's type as the
whole of a parameter by a fusion reading that output; both converts remat-counted.
"""

from __future__ import annotations

import re

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloparse.ir import CallRole, Computation, Instruction, Module


def stored_preactivation_trips(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> dict[SiteKey, SiteKey]:
    """Each such narrow -> the widen reading it back (module docstring)."""
    if not is_tpu_module(module):
        return {}
    by_inst = {op.key[:2]: op for op in ops}
    sites = one_call_site(module)
    found: dict[SiteKey, SiteKey] = {}
    for callee, site in sites.items():
        comp = module.by_name.get(callee)
        if site is None or comp is None:
            continue
        elements = list(comp.root.operands) if comp.root.opcode == "tuple" else [comp.root.name]
        for index, name in enumerate(elements):
            narrow = comp.by_name.get(name)
            op = by_inst.get((callee, name))
            if narrow is None or op is None or op.key not in remat or not _is_narrow(comp, narrow):
                continue
            source = by_inst.get((callee, narrow.operands[0]))
            if source is None or source.key not in remat or not _matmul_bias_add(comp, source.inst):
                continue
            widen = _widen_reading(module, sites, site, index if comp.root.opcode == "tuple" else None,
                                   source.inst.shape.element_type)
            if widen is None:
                continue
            widen_op = by_inst.get(widen)
            if widen_op is not None and widen_op.key in remat:
                found[op.key] = widen_op.key
    return found


def _is_narrow(comp: Computation, inst: Instruction) -> bool:
    source = comp.by_name.get(inst.operands[0]) if inst.opcode == "convert" and inst.operands else None
    return source is not None and _bits(inst.shape.element_type) < _bits(source.shape.element_type)


def _matmul_bias_add(comp: Computation, inst: Instruction) -> bool:
    """An `add` of one broadcast and a matmul's output, in the same fused computation."""
    if inst.opcode != "add" or len(inst.operands) != 2:
        return False
    operands = [comp.by_name.get(name) for name in inst.operands]
    if any(o is None for o in operands) or sum(o.opcode == "broadcast" for o in operands) != 1:
        return False
    return any(o.opcode in MATMUL_OPCODES for o in operands)


def _widen_reading(module: Module, sites: dict, site: tuple[Computation, Instruction], index: int | None,
                   wide: str) -> tuple[str, str] | None:
    """The one widen to `wide` of the output (`index` of a tuple) as a fusion parameter's whole
    value, in the fusions reading it or those nested in them (TPU nests the widen and relu in the
    weight gradient's convolution fusion): (fused computation, convert)."""
    caller, fusion = site
    names = {fusion.name} if index is None else {
        inst.name for inst in caller.instructions if inst.opcode == "get-tuple-element"
        and inst.operands == (fusion.name,) and inst.attr("index") == str(index)}
    widens = _widens_of(module, caller, names, wide, 0)
    return widens[0] if len(widens) == 1 else None


def _widens_of(module: Module, comp: Computation, names: set[str], wide: str, depth: int) -> list[tuple[str, str]]:
    """Converts to `wide` of the values `names` of `comp`, followed into the fusions reading them."""
    found: list[tuple[str, str]] = []
    for reader in comp.instructions:
        if not names.intersection(reader.operands):
            continue
        if reader.opcode == "convert" and reader.shape.element_type == wide and depth > 0:
            found.append((comp.name, reader.name))
        elif reader.opcode == "fusion" and depth < 3:
            called = reader.called(CallRole.FUSION)
            body = module.by_name.get(called[0]) if len(called) == 1 else None
            if body is None:
                continue
            positions = {i for i, name in enumerate(reader.operands) if name in names}
            params = {inst.name for inst in body.instructions if inst.opcode == "parameter"
                      and int(inst.attributes["parameter_number"]) in positions}
            found += _widens_of(module, body, params, wide, depth + 1)
    return found


def _bits(element_type: str) -> int:
    digits = re.findall(r"\d+", element_type)
    return int(digits[0]) if digits else 0
