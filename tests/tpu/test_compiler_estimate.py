"""XLA's own time estimate (TPU `estimated_cycles`, GPU `reification_cost`) multiplied by the
loops: each loop's share is its body's kernels' cycles times its trip count, read here straight
from the module text, and the total is every kernel's cycles times its executions."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

import hloflops
from hloflops.report.compiler_estimate import CLOCK_HZ, kernel_estimate

DATA = Path(__file__).resolve().parents[1] / "data" / "tpu"


def text(stem: str) -> str:
    return gzip.decompress((DATA / f"{stem}.hlo.gz").read_bytes()).decode()


def computation_cycles(hlo: str) -> dict[str, int]:
    """Sum of estimated_cycles over each computation's own instructions (by the text alone)."""
    out: dict[str, int] = {}
    name = None
    for line in hlo.splitlines():
        head = re.match(r"(?:ENTRY )?%?([\w.\-]+) \(", line)
        if head and not line.startswith(" "):
            name = head.group(1)
            out[name] = 0
        elif name and line.startswith("  "):
            out[name] += sum(int(c) for c in re.findall(r'"estimated_cycles":"(\d+)"', line))
    return out


@pytest.mark.parametrize("stem", ["lm_scan.v6e", "fsdp_scan.v5e", "moe_accum.v4"])
def test_each_loop_is_its_body_times_its_trips(stem: str) -> None:
    hlo = text(stem)
    r = hloflops.analyze(hlo)
    est = r.compiler_estimate("tpu-" + stem.split(".")[1])
    per_computation = computation_cycles(hlo)
    for loop in r.loops:
        body = re.search(rf"%{re.escape(loop.name)} = .*?body=%?([\w.\-]+)", hlo).group(1)
        assert loop.trip_count and per_computation[body] > 0
        assert est.by_loop[loop.name] == loop.trip_count * per_computation[body], loop.name
    entry = re.search(r"^ENTRY %?([\w.\-]+)", hlo, re.M).group(1)
    assert est.cycles == per_computation[entry] + sum(est.by_loop[lp.name] for lp in r.loops if lp.parent is None)
    # XLA's figure counts each loop body once: the loop-aware total is larger by the repeats
    assert est.cycles > sum(per_computation[c] for c in [entry] + [
        re.search(rf"%{re.escape(lp.name)} = .*?body=%?([\w.\-]+)", hlo).group(1) for lp in r.loops])


def test_seconds_at_the_chips_clock_and_the_share_covered() -> None:
    r = hloflops.analyze(text("lm_scan.v6e"))
    assert r.compiler_estimate() is not None and r.compiler_estimate().seconds is None  # no chip: cycles only
    est = r.compiler_estimate("tpu-v6e")
    assert est.seconds == est.cycles / CLOCK_HZ["tpu-v6e"]
    assert 0 < est.estimated < est.kernels and 0.99 < est.flops_share <= 1
    assert est.roofline_s == r.roofline("tpu-v6e").lower_bound_s
    d = r.to_dict(chip="tpu-v6e")["compiler_estimate"]
    assert d["cycles"] == est.cycles and d["chip"] == "tpu-v6e"
    assert "XLA's own estimate of the step" in r.summary(chip="tpu-v6e")


def test_modules_without_estimates_say_nothing(examples_dir: Path) -> None:
    r = hloflops.analyze(examples_dir / "seed000_remat_scan.after_optimizations.hlo")
    assert r.compiler_estimate() is None and "compiler_estimate" not in r.to_dict()


def test_gpu_reification_cost_in_both_layouts() -> None:
    new = {"reification_cost": [{"end_to_end_cycles": 1980.0, "exec_time_us": 1.0, "compute_time_us": 0.5}]}
    old = {"fusion_backend_config": {"reification_cost": {"end_to_end_cycles": 3960.0, "exec_time_us": 2.0}}}
    assert kernel_estimate(new) == ("gpu reification_cost", 1980.0, 1.0)
    assert kernel_estimate(old) == ("gpu reification_cost", 3960.0, 2.0)
    assert kernel_estimate({"reification_cost": []}) is None
    assert kernel_estimate({"window_config": {"estimated_cycles": "12"}}) == ("tpu estimated_cycles", 12.0, None)
    assert kernel_estimate(json.loads('{"window_config": {"estimated_cycles": "-3"}}')) is None


def test_a_compiled_tpu_program_knows_its_chip() -> None:
    pytest.importorskip("jax")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # another process may hold libtpu's lock
    try:
        import jax
        import jax.numpy as jnp
        from jax.experimental import topologies

        topo = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")
    except Exception as error:  # no libtpu here: .ci/tpu.sh installs it and runs this
        pytest.skip(f"libtpu not available ({type(error).__name__}): the TPU job (.ci/tpu.sh) runs this")
    mesh = jax.sharding.Mesh(topo.devices, ("x",))
    arg = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16,
                               sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x")))
    compiled = jax.jit(lambda a: jnp.tanh(a @ a.T)).lower(arg).compile()
    r = hloflops.analyze(compiled)
    assert r.chip == "tpu-v5e"
    assert r.roofline().chip.name == "tpu-v5e" and r.compiler_estimate().chip == "tpu-v5e"
