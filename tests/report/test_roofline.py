# ruff: noqa: E501  (HLO instructions are long lines)
"""The static roofline: lower bounds computed by hand on three small programs for two chips,
the chip table, --chip on the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hloflops import analyze
from hloflops.report.chips import CHIPS, chip_from_dict, find_chip, load_chip

ROOT = Path(__file__).resolve().parents[2]
H100, V5E = find_chip("h100"), find_chip("tpu-v5e")

# 1. A bf16 matrix product big enough to be compute-bound: 2 x 1024^3 flops over its three
#    1024 x 1024 bf16 arrays (2 MiB each) of bytes.
DOT = """HloModule dot
ENTRY e {
  a = bf16[1024,1024]{1,0} parameter(0)
  b = bf16[1024,1024]{1,0} parameter(1)
  ROOT d = bf16[1024,1024]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
DOT_FLOPS, DOT_BYTES = 2 * 1024**3, 3 * 1024 * 1024 * 2

# 2. A fusion of exp and add on f32[1024]: 1,024 flops (exp is a transcendental), and the
#    fusion reads 4,096 bytes and writes 4,096: memory-bound everywhere.
FUSION = """HloModule fused
fused {
  p = f32[1024]{0} parameter(0)
  e = f32[1024]{0} exponential(p)
  ROOT a = f32[1024]{0} add(e, e)
}
ENTRY e {
  x = f32[1024]{0} parameter(0)
  ROOT f = f32[1024]{0} fusion(x), kind=kLoop, calls=fused
}
"""
FUSION_FLOPS, FUSION_BYTES = 1024, 2 * 4096

# 3. An all-reduce of f32[4096] (16,384 bytes) over 8 devices inside a 10-trip loop: each trip
#    sends 2 (8-1)/8 x 16,384 = 28,672 bytes per device. The loop's own ops: the counter add
#    (1 flop, 12 bytes) and body tuple (16 bytes) 10 times, the compare (1 flop, 9 bytes) 11
#    times, the initial tuple (16 bytes) once.
LOOP = (ROOT / "tests" / "data" / "allreduce_loop.hlo")
AR_SENT, AR_BYTES, AR_FLOPS = 2 * 7 * 16384 // 8, 2 * 16384, 4096
SCAFFOLD_BYTES = 10 * 12 + 10 * 16 + 11 * 9 + 16


def _expected(chip, program: str) -> tuple[float, dict[str, float]]:
    if program == "dot":
        compute, memory = DOT_FLOPS / chip.peak_flops_per_s["bf16"], DOT_BYTES / chip.hbm_bytes_per_s
        assert compute > memory  # 1,024^3 x 2 / 6 MiB = 341 flops a byte: above both ridges
        return compute, {"compute": compute, "memory": 0.0, "network": 0.0}
    if program == "fusion":
        memory = FUSION_BYTES / chip.hbm_bytes_per_s
        f32_rate = chip.peak_flops_per_s.get("f32", chip.peak_flops_per_s["bf16"])  # TPUs: bf16 rate
        assert FUSION_FLOPS / f32_rate < memory
        return memory, {"compute": 0.0, "memory": memory, "network": 0.0}
    network = 10 * AR_SENT / chip.interconnect_bytes_per_s
    assert network > 10 * AR_BYTES / chip.hbm_bytes_per_s
    memory = SCAFFOLD_BYTES / chip.hbm_bytes_per_s
    return network + memory, {"compute": 0.0, "memory": memory, "network": network}


@pytest.mark.parametrize("chip", [H100, V5E], ids=lambda c: c.name)
@pytest.mark.parametrize("program", ["dot", "fusion", "loop"])
def test_hand_computed_lower_bounds(chip, program: str) -> None:
    report = analyze({"dot": DOT, "fusion": FUSION}.get(program) or LOOP)
    if program == "dot":
        assert (report.flops, report.bytes_accessed) == (DOT_FLOPS, DOT_BYTES)
    if program == "fusion":
        assert (report.flops, report.bytes_accessed) == (FUSION_FLOPS, FUSION_BYTES)
    if program == "loop":
        assert report.communication_bytes == 10 * AR_SENT
        assert report.bytes_accessed == 10 * AR_BYTES + SCAFFOLD_BYTES
    result = report.roofline(chip)
    lower, by_bound = _expected(chip, program)
    assert result.lower_bound_s == pytest.approx(lower, rel=1e-12)
    for bound, seconds in by_bound.items():
        assert result.by_bound[bound] == pytest.approx(seconds, rel=1e-12, abs=1e-30)
    assert result.mfu_upper_bound == pytest.approx(report.model_flops / (lower * chip.peak_flops_per_s["bf16"]))
    d = result.as_dict()
    assert sum(d["share_by_bound"].values()) == pytest.approx(1.0)
    assert d["top"][0]["seconds"] == pytest.approx(lower)
    json.dumps(d)


def test_dot_mfu_upper_bound_is_one_when_compute_bound() -> None:
    assert analyze(DOT).roofline("h100").mfu_upper_bound == pytest.approx(1.0)


def test_every_builtin_chip_names_its_source() -> None:
    assert {c.name for c in CHIPS} == {"a100", "h100", "h200", "b200", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"}
    source = (ROOT / "analysis" / "hloflops" / "report" / "chips.py").read_text()
    for chip in CHIPS:
        assert chip.source and "bf16" in chip.peak_flops_per_s
        assert chip.hbm_bytes_per_s > 0 and chip.interconnect_bytes_per_s > 0
        # a datasheet comment right above each entry
        before = source[: source.index(f'Chip("{chip.name}"')].rstrip().splitlines()[-1].strip()
        assert before.startswith("#"), chip.name
    assert find_chip("H100-SXM") is H100 and find_chip("v5e") is V5E


def test_chip_from_a_json_spec(tmp_path: Path) -> None:
    spec = {"name": "mine", "peak_flops_per_s": {"bf16": 1e15}, "hbm_bytes_per_s": 1e12,
            "interconnect_bytes_per_s": 1e11, "source": "my datasheet"}
    path = tmp_path / "chip.json"
    path.write_text(json.dumps(spec))
    chip = load_chip(str(path))
    assert chip.as_dict() == {**spec, "peak_flops_per_s": {"bf16": 1e15}}
    with pytest.raises(ValueError, match="needs peak_flops_per_s"):
        chip_from_dict({"peak_flops_per_s": {"bf16": 1}})
    with pytest.raises(ValueError, match="unknown chip"):
        load_chip("z80")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hloflops.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_cli_chip() -> None:
    proc = _cli(str(LOOP), "--chip", "tpu-v5e", "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["roofline"]["chip"]["name"] == "tpu-v5e"
    assert d["roofline"]["lower_bound_s"] == pytest.approx(_expected(V5E, "loop")[0], rel=1e-12)
    assert d["communication"]["bytes_per_device"] == 10 * AR_SENT and d["devices"] == 8
    text = _cli(str(LOOP), "--chip", "h100")
    assert "roofline on h100: step time >= " in text.stdout and "communication: 286,720 bytes" in text.stdout
    bad = _cli(str(LOOP), "--chip", "z80")
    assert bad.returncode == 2 and bad.stderr.startswith("hloflops: error: --chip: unknown chip 'z80'")
    assert "roofline" not in json.loads(_cli(str(LOOP), "--json").stdout)


def test_html_shows_communication_and_time(tmp_path: Path) -> None:
    page = analyze(LOOP).to_html(chip="h100")
    assert "Communication and time" in page and "286,720 bytes sent per device" in page and "roofline on h100" in page
