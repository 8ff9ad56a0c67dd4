"""The remat split of sharded TPU programs against their twins (issue 28): the issue's 6-layer
bf16 transformer under FSDP and under tensor parallelism on a v5e 2x2 mesh
(tests/programs/remat_sharded.py), `lax.scan` over `jax.checkpoint`'d layers and the Flax LM with
`nn.remat` per block in a Python loop.

Measured (per device, libtpu 0.0.42.1 of jax 0.10.2): the recompute runs 1,811,939,328 matmul
FLOPs in each of the four programs, the issue's truth. The scan programs split exactly before and
after this test was written; in the Python-loop LM the rule of the first round of issue 28 found
704,643,072 (FSDP) and 0 (tensor parallel): TPU's async collectives return a weight's all-gather
from a fusion whose tuple also carries the collective's destination buffer, sync flags and
overlapped work of other layers, so the recompute looked as if it read other inputs than its
forward (`hloflops.remat.inputs`), and the pairing refused it as another layer's op.

The stored modules (2 layers, tests/data/remat_tpu) run without libtpu; the issue's 6-layer
programs compile live where libtpu is installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

import hloparse  # noqa: E402
from hloflops.accounting import account  # noqa: E402
from tests.programs.remat_sharded import CASES, STORED, compile_case, stored  # noqa: E402
from tests.remat.judge import by_opcode  # noqa: E402

ISSUE_TRUTH = 1_811_939_328  # recompute matmul FLOPs per device of the issue's 6-layer programs


def _matmul(d: dict[str, int]) -> int:
    return d.get("dot", 0) + d.get("convolution", 0)


def _split(texts: dict[str, str]) -> tuple[int, int]:
    """(remat matmul FLOPs hloflops reports, the program's minus its twin's)."""
    accs = {w: account(hloparse.parse(texts[w]), xla={"flops": 0.0}) for w in ("remat", "plain")}
    assert by_opcode(accs["plain"], remat=True) == {}  # the twin has no remat
    return _matmul(by_opcode(accs["remat"], remat=True)), \
        _matmul(by_opcode(accs["remat"])) - _matmul(by_opcode(accs["plain"]))


@pytest.mark.parametrize("case", list(STORED))
def test_stored_sharded_python_loop_lm_splits_its_matmuls_exactly(case):
    reported, truth = _split({w: stored(case, w) for w in ("remat", "plain")})
    assert truth == ISSUE_TRUTH // 3  # 2 of the 6 layers
    assert reported == truth, (case, reported, truth)


@pytest.mark.parametrize("case", list(CASES))
def test_issue_sharded_programs_split_their_matmuls_exactly(case):
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    reported, truth = _split(compile_case(*CASES[case]))
    assert truth == ISSUE_TRUTH
    assert reported == truth, (case, reported, truth)
