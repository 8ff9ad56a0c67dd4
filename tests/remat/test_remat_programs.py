"""Remat attribution on programs written the way users write them (tests/programs/remat_programs.py).

Each program is compiled twice: with its remat wrapper and without it. XLA runs the dots and
convolutions of the program without remat once; whatever the remat program runs beyond that
is recomputation. So, exactly, for each stage: the optimized module (`after`), the module before
optimization with op_name metadata as `--xla_dump_to` writes it (`before`), and the same
without any metadata as `lowered.as_text()` prints it (`before_unnamed`):

    remat dot+conv FLOPs (ours, remat program)  == dot+conv(remat program) - dot+conv(plain program)
    model dot+conv FLOPs (ours, remat program)  == dot+conv(plain program)

and the program without remat has no remat FLOPs at all.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

import hloparse  # noqa: E402
import jax  # noqa: E402
from hloflops.accounting import account  # noqa: E402
from tests.programs.compile import compile_program, lowered_debug_text  # noqa: E402
from tests.programs.remat_programs import BY_NAME, PAIRS  # noqa: E402

MATMUL = ("dot", "convolution")


@functools.lru_cache(maxsize=None)
def accounts(name: str, which: str):
    pair = BY_NAME[name]
    program = pair.remat if which == "remat" else pair.plain
    compiled, lowered, _ = compile_program(program)
    texts = {"after": compiled, "before": lowered_debug_text(program), "before_unnamed": lowered}
    return {stage: account(hloparse.parse(text), xla={"flops": 0.0}) for stage, text in texts.items()}


def matmul_flops(acc, *, remat: bool | None = None) -> int:
    return sum(r.total.flops for r in acc.rows if r.opcode in MATMUL and (remat is None or r.remat == remat))


def test_catalogue_is_large_enough():
    assert len(PAIRS) >= 30


# Known gaps, checked to still fail (strict xfail) so that a fix shows up. All are modules
# before optimization WITHOUT op_name metadata (`lowered.as_text()`); the same modules with
# names (as --xla_dump_to writes them) pass. Without names the only remat marker left is the
# optimization barrier jax puts on a recompute's inputs.
NO_MARKER = ("prevent_cse=False: no barrier and no name, so nothing marks the recompute (a duplicate alone "
             "is not taken as remat: hand-written modules duplicate ops too)")
NO_LOOP_TWIN = ("recompute in the backward loop body, unnamed: its inputs are built differently from the forward "
                "loop's (e.g. the LSTM's kernel is concatenated inside the backward loop), so no same-structure "
                "twin is found")
KNOWN_GAPS: dict[tuple[str, str], str] = {
    ("lm_block_no_prevent_cse", "before_unnamed"): NO_MARKER,
    ("mlp_remat_alias_no_cse", "before_unnamed"): NO_MARKER,
    ("mlp_remat_scan_4x1", "before_unnamed"): NO_MARKER + "; nn.remat_scan uses prevent_cse=False",
    ("mlp_remat_scan_2x2", "before_unnamed"): NO_MARKER + "; nn.remat_scan uses prevent_cse=False",
    ("mlp_remat_scan_2x3", "before_unnamed"): NO_MARKER + "; nn.remat_scan uses prevent_cse=False",
    ("lstm_scan", "before_unnamed"): NO_LOOP_TWIN,
}
# lm_scan_block_dots_no_batch before_unnamed was one too, until a policy's saved residual (an
# identity rounding) counted as an input for the abstract number: the recompute reads the saved
# dots back from the stack, the forward read the rounding (hloflops.remat.values).


def _case(name: str, stage: int):
    if (name, stage) in KNOWN_GAPS:
        return pytest.param(name, stage, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[(name, stage)]))
    return pytest.param(name, stage)


STAGES = ("after", "before", "before_unnamed")


@pytest.mark.parametrize(("name", "stage"), [_case(p.name, s) for p in PAIRS for s in STAGES])
def test_remat_matmul_flops_are_the_difference_to_the_program_without_remat(name, stage):
    remat, plain = accounts(name, "remat")[stage], accounts(name, "plain")[stage]
    assert matmul_flops(plain) > 0
    assert matmul_flops(plain, remat=True) == 0
    assert matmul_flops(remat, remat=True) == matmul_flops(remat) - matmul_flops(plain)
    assert matmul_flops(remat, remat=False) == matmul_flops(plain)


def all_flops(acc, *, remat: bool | None = None) -> int:
    """Flops of every opcode but reduce-precision (see the test below)."""
    return sum(r.total.flops for r in acc.rows
               if r.opcode != "reduce-precision" and (remat is None or r.remat == remat))


def test_remat_flops_of_all_opcodes_are_near_the_difference_after_optimization():
    """Elementwise and reduce ops follow the dots' rule, checked on the optimized modules: remat
    FLOPs of all opcodes against the difference of the two programs' totals. Not exact: with
    remat XLA fuses differently (a cheap op is copied into each consumer fusion, and the fusions
    are not the same with and without remat), so the count of copies of an elementwise op in the
    two programs differs by a few beyond the recompute. reduce-precision is left out on both
    sides: jax puts an identity reduce-precision on each residual a policy saves, which runs
    because of remat but recomputes nothing (counted as model FLOPs). Measured on this
    catalogue (jax 0.10.2): every program within 39,936 flops of its difference (the worst:
    lm_scan_block_dots_no_batch, of 113,024, and lm_scan_block, of 375,168, both short: copies
    of the softmax's cheap ops and of gelu's multiplies in the backward loop that the pairing
    leaves unpaired); over the catalogue 94,228 flops of excess and deficit together (asserted: at
    most 96,000, was 130,000 before the sixth round), where
    counting every remat-named copy gave 904,860. Sharing forward values among recompute classes
    of one name (issue 28, sixth round) made eight LM programs exact (layer norm's `1/n`
    scalings were +192 / +336) and lm_scan_block's layer norms too, and took one 4,096-flop gelu
    multiply that had made up part of that program's shortfall (-23,040 -> -27,520). The seeds'
    programs are exact (test below). The backward loop's recompute of gelu's product, handed
    reshaped to the next weight's gradient, is the copy the program without remat makes in its
    saving fusion (hloflops.remat.saved_copies; its fusion of `Dense_0/add`, `mlp/add` and the two
    `mlp/mul` is the twin's saving fusion, op for op): no longer counted, it no longer hides part
    of the two scan programs' shortfall (-27,648 -> -31,744 and -23,552 -> -39,936; the catalogue
    73,748 -> 94,228)."""
    misses = {}
    for pair in PAIRS:
        remat, plain = accounts(pair.name, "remat")["after"], accounts(pair.name, "plain")["after"]
        assert all_flops(plain, remat=True) == 0
        difference = all_flops(remat) - all_flops(plain)
        misses[pair.name] = (all_flops(remat, remat=True) - difference, difference)
    # Pinned, not tolerated. Its backward loop copies gelu's and the layer norms' residual chains
    # into three gradient fusions (the input's, the weight's and the bias's gradient), which
    # twin_saves (hloflops.remat.twin_saves) once took for three saving fusions of the program
    # without remat, where that program saves each residual once, and the gelu product the
    # backward hands reshaped to Dense_1's gradient (hloflops.remat.saved_copies) stood for a
    # saving copy in neither count: -44,032 before the eleventh round. Left: the attention's
    # bias adds (+2,048) and gelu's `0.5 * (1 + tanh)`, whose forward count matched two ops of
    # its name and no copy is moved on it (-4,992 of multiply with the layer norms' +3,200).
    # Then the attention's value `v + b`, handed out transposed heads-major through moves, counted
    # as the twin's saving copy (hloflops.remat.saved_copies): add exact, -2,944 -> -4,992
    # (multiply alone; lm_scan_block's add +4,096 -> +2,048).
    # Then residuals the recompute hands to backward matmuls (twin_saves): the softmax `e / sum`,
    # which the twin saves by a copy, is model FLOPs: -4,992 -> -6,016 (-1,024 of multiply).
    # Then exact: gelu's `0.5 * (1 + tanh)` counted against its own forward copies only
    # (hloflops.remat.twin_saves counts the forward per value), and the layer norms' `x * x`
    # recompute offset by the `2 * x` the twin saves and XLA folds here
    # (hloflops.remat.folded_coefficients).
    pinned = {"lm_scan_block_dots_no_batch": 0}
    assert {name: misses[name][0] for name in pinned} == pinned
    too_far = {name: m for name, m in misses.items() if abs(m[0]) > 40_960 and name not in pinned}
    assert not too_far
    assert sum(abs(m[0]) for m in misses.values()) <= 96_000


def test_seed_programs_split_every_opcode_exactly_after_optimization():
    """Seed 000's model (nn.remat_scan against the same nested nn.scan, tests/programs/
    old_jax_remat.py) and seed 004's (tied_dense_blocks), compiled by the installed jax: remat
    FLOPs of every opcode equal the difference to the program without remat. The one exception
    is seed 000's 24 flops of one more loop-index subtract in the backward loop (the reversed
    index of one more saved residual's slice), which recomputes nothing."""
    from tests.programs import old_jax_remat

    def by_opcode(acc, remat=None):
        out: dict[str, int] = {}
        for r in acc.rows:
            if remat is None or r.remat == remat:
                out[r.opcode] = out.get(r.opcode, 0) + r.total.flops
        return {k: v for k, v in out.items() if v}

    texts = {}
    for which in ("remat", "plain"):
        fn, args, opts = old_jax_remat.build(f"seed000_{which}")
        texts[which] = jax.jit(fn, **opts).lower(*args).compile().as_text()
    seed000 = {w: account(hloparse.parse(t), xla={"flops": 0.0}) for w, t in texts.items()}
    seed004 = {w: accounts("tied_dense_blocks", w)["after"] for w in ("remat", "plain")}
    for accs, index_subtract in ((seed000, 24), (seed004, 0)):
        total, plain = by_opcode(accs["remat"]), by_opcode(accs["plain"])
        difference = {op: total.get(op, 0) - plain.get(op, 0) for op in total.keys() | plain.keys()}
        difference["subtract"] = difference.get("subtract", 0) - index_subtract
        assert by_opcode(accs["remat"], remat=True) == {op: d for op, d in difference.items() if d}
