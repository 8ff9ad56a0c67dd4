"""A recomputed cheap chain a fusion stores once, narrowed, for several matmuls, which the program
without remat may copy into each of them (TPU; hloflops.remat.pairing calls `stored_chain_copies`
beside hloflops.remat.stored_scales).

A gradient through a cheap activation (gelu's `dy * gelu'(h)`, with `h` and `gelu'(h)` rebuilt by
the recompute from a saved matmul output) is read by two matmuls, the input's gradient and the
weight's. TPU's fusion may compute the chain once in a loop fusion (with the bias gradient's reduce,
say) and store it narrowed for both, or copy the whole chain into the operand side of each matmul's
fusion. Which one it picks rests on how it fused the whole program: the program without remat
reads its forward's stored `h` where this one rebuilds it, and may copy the chain into each reader
(TPU draw 43, dots_saveable gelu: the twin runs the 14-multiply chain in the reduce's fusion and in
both matmuls' fusions, three copies per layer against this program's one, so the per-opcode truth
of multiply and add is negative and no split of this program's ops reaches it). The fusion may as
well be the output fusion of the matmul computing the cotangent the chain scales (the next layer's
input gradient, `dy @ w.T`): held-out TPU 102 and 115, f32 MLPs under dots_saveable, store the
chain so once per layer, and the twin copies it into both readers' fusions on one of the layers
(the weight gradient's fusion nests it as a loop fusion), 2 x 14 multiplies more than this program.
The chain then stops at the matmul: its operands are its own inputs, and XLA copies only the cheap
ops (`InstructionFusion` never duplicates a matmul), so the matmul is no part of what is copied.

So for each such stored value, the chain under its narrowing (the cheap ops of the fusion it is
computed from, one of them at least a recompute) may run once per matmul reader in the program
without remat: k readers, k - 1 copies beyond this program's, or k where another output of the
fusion (the reduce) needs the op too. They go to `twin_copies` (hloflops.results.RematHinge): they
lower the range's low end only, never the count, as for hloflops.remat.stored_scales: XLA copies a
cheap producer at most once into each reader. A recompute of the chain stays a "maybe remat" hinge
as well where it was one (kept apart from the twin copies other rules find, which are no hinge of
their own). The narrowing itself is not counted: a reader that computes the chain reads it wide.

Only a chain with a recompute that rebuilds the activation's input from a policy's saved residual
(an identity rounding of a matmul's output, or an offload policy's matmul output read back from the
host: hloflops.remat.host_read_residuals, wtpu 306) and another input of the fusion (the bias add): there
the two programs' chains start from different stored values (the saved matmul output and the
recomputed bias add here, the twin's stored activation input there), so this program's fusion says
nothing of the twin's. Without a recompute the value is the backward's own, computed alike from the
same stored values. Where the saved value is the activation's input itself, it is the value the
twin stores too, and both programs stored the chain alike: TPU 0 (no bias, the recomputed gelu
reads the saved matmul output with constants only; three chain fusions in each program) and TPU
41 (save_only_these_names without prevent_cse: the policy saves gelu's input, CSE merged the
recomputed gelu with the forward's, and the only remat-named ops left in the chain are the
linearization's own `1 - tanh` and `3 * x**2`; exact). A chain rebuilt from a recomputed matmul (nothing saveable) was
stored once by the twin too on every TPU draw of 0-59 (2, 24: exact); so was a short chain read
through a sharded conv's all-reduce (47: exact), while 40, of the same structure, is the twin's copy
again (relu's narrow in each matmul's fusion): left out of the rule, no test in this program tells
them apart."""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.host_read_residuals import read_back_from_host
from hloflops.remat.offloaded_chain_residuals import offloaded_chain
from hloflops.remat.op_kinds import DUPLICATED, MATMUL_OPCODES, is_identity_rounding
from hloflops.remat.readers import VIEWS, output_readers
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, source_value
from hloflops.remat.type_corrections import bits
from hloparse.ir import CallRole, Computation, Instruction, Module


def stored_chain_copies(module: Module, ops: list[SiteOp]) -> dict[SiteKey, int]:
    """Each cheap op of a chain the module docstring describes -> the copies the program without
    remat may make of it beyond this program's (`twin_copies`: a recompute among them stays a
    "maybe remat" hinge too, as it was)."""
    twin_copies: dict[SiteKey, int] = {}
    if not is_tpu_module(module):
        return twin_copies
    by_name: dict[tuple[str, str], list[SiteOp]] = {}
    for op in ops:
        by_name.setdefault(op.key[:2], []).append(op)
    callers = one_call_site(module)
    for comp_name in fused_outputs(module):
        comp = module.by_name.get(comp_name)
        caller = callers.get(comp_name)
        if comp is None or caller is None:
            continue
        outputs = list(comp.root.operands) if comp.root.opcode == "tuple" else [comp.root.name]
        for index, name in enumerate(outputs):
            narrow = comp.by_name.get(name)
            if not _is_narrow(comp, narrow):
                continue
            chain = _chain(comp, narrow.operands[0])
            # the gate reads the recomputes' inputs: only a recompute adding the bias to the saved
            # value starts the chain from another stored value than the twin's (module docstring)
            recomputes = {key for key in chain if any(op.marked for op in by_name.get((comp_name, key), ()))}
            if not recomputes:
                continue
            readers = output_readers(caller[0], caller[1], [index] if comp.root.opcode == "tuple" else None)
            if len(readers) < 2 or not all(_is_matmul(module, reader) for reader in readers) \
                    or not _rebuilds_from_saved(module, callers, comp, recomputes, offloaded_chain(comp, chain)):
                continue
            shared = set()  # the chain's ops another output of the fusion reads too
            for other in outputs:
                if other != name:
                    shared |= _chain(comp, other)
            for key in chain:
                inst = comp.by_name[key]
                if inst.opcode not in DUPLICATED:
                    continue
                extra = len(readers) - (0 if key in shared else 1)
                for op in by_name.get((comp_name, key), ()):
                    twin_copies[op.key] = twin_copies.get(op.key, 0) + extra
    return twin_copies


def _is_narrow(comp: Computation, inst: Instruction | None) -> bool:
    """A convert to a narrower float type of a value computed in the fusion."""
    if inst is None or inst.opcode != "convert" or len(inst.operands) != 1:
        return False
    source = comp.by_name.get(inst.operands[0])
    return source is not None and source.opcode != "parameter" and 0 < bits(inst.shape) < bits(source.shape)


def _chain(comp: Computation, name: str) -> set[str]:
    """The instructions of the fusion the value is computed from, itself included (not parameters),
    up to a matmul: in a matmul's output fusion the chain scales the matmul's result, and neither the
    matmul nor its operands are copied with the chain."""
    out: set[str] = set()
    stack = [name]
    while stack:
        inst = comp.by_name.get(stack.pop())
        if inst is None or inst.name in out or inst.opcode == "parameter":
            continue
        if inst.opcode in MATMUL_OPCODES:  # the chain's input, as a fusion parameter is
            continue
        out.add(inst.name)
        stack.extend(inst.operands)
    return out


def _is_matmul(module: Module, inst: Instruction) -> bool:
    """A matmul, or a fusion computing one."""
    if inst.opcode in MATMUL_OPCODES:
        return True
    return inst.opcode == "fusion" and any(i.opcode in MATMUL_OPCODES for callee in inst.called(CallRole.FUSION)
                                            for i in module.by_name[callee].instructions)



def _rebuilds_from_saved(module: Module, callers, comp: Computation, recomputes: set[str],
                         offload: bool = False) -> bool:
    """Does a recompute of the chain rebuild the activation's input from a policy's saved residual
    and another input of the fusion (the bias add: the saved matmul output plus the broadcast bias)?
    The program without remat stores that sum, this one the matmul output: the chains start from
    different stored values. Where the saved value is the activation's input itself (no bias, TPU 0;
    the named activation saved, TPU 41) the recomputes read it with constants and each other only."""
    for name in recomputes:
        operands = comp.by_name[name].operands
        saved = [o for o in operands if _is_saved(module, callers, comp, o, offload)]
        if saved and any(not _is_saved(module, callers, comp, param, offload) for o in operands if o not in saved
                         for param in _parameters(comp, o)):
            return True
    return False


def _parameters(comp: Computation, name: str) -> set[str]:
    """The fusion's parameters the value is computed from, up to a matmul."""
    out: set[str] = set()
    seen: set[str] = set()
    stack = [name]
    while stack:
        inst = comp.by_name.get(stack.pop())
        if inst is None or inst.name in seen or inst.opcode in MATMUL_OPCODES:
            continue
        seen.add(inst.name)
        if inst.opcode == "parameter":
            out.add(inst.name)
        stack.extend(inst.operands)
    return out


def _is_saved(module: Module, callers, comp: Computation, name: str, offload: bool = False) -> bool:
    """Is the value a policy's saved residual (an identity rounding, in the forward matmul's fusion
    or unfused; with `offload`, for a chain holding an expensive recompute
    (hloflops.remat.offloaded_chain_residuals), a value read back from the host too:
    hloflops.remat.host_read_residuals), through the fusion's parameters and views?"""
    source = source_value(module, callers, comp, name, lambda inst: inst.opcode in VIEWS, 8)
    return source is not None and is_identity_rounding(source[1]) \
        or offload and read_back_from_host(module, callers, comp, name)
