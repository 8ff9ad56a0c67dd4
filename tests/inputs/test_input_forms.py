"""Every form in which users hold their programs (issue 31), each built by a real jax run and
proved to give the numbers of the HLO text of the same program: XLA's proto dumps (`.hlo.pb`,
`.hlo.pb.gz`) at both stages, a jax.profiler profile directory (every program in its xplane),
StableHLO (`lowered.as_text()`, a `.mlir` file), through `analyze`, the CLI and batch."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hloflops import analyze
from hloflops.batch.run import run_batch

pytest.importorskip("jax")

SCRIPT = r'''
import os, sys
out = sys.argv[1]
os.environ["XLA_FLAGS"] = f"--xla_dump_to={out}/dump --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"
import jax, jax.numpy as jnp

def f(x, w):
    def body(c, _):
        return jnp.tanh(c @ w), None
    y, _ = jax.lax.scan(body, x, None, length=5)
    return y.sum()

def g(x):
    return jnp.exp(x).mean(axis=0)

x, w = jnp.ones((8, 16)), jnp.ones((16, 16))
f_jit, g_jit = jax.jit(f), jax.jit(g)
f_jit(x, w).block_until_ready(); g_jit(x).block_until_ready()
with jax.profiler.trace(f"{out}/profile"):
    f_jit(x, w).block_until_ready(); g_jit(x).block_until_ready()
lowered = f_jit.lower(x, w)
open(f"{out}/f.mlir", "w").write(lowered.as_text())
open(f"{out}/f_lowered.hlo", "w").write(lowered.as_text(dialect="hlo"))
'''

KEYS = ("flops", "transcendentals", "bytes_accessed", "model_flops", "remat_flops")


def numbers(report) -> dict[str, int]:  # noqa: ANN001
    return {k: getattr(report, k) for k in KEYS}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("forms")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-c", SCRIPT, str(out)], check=True, env=env, timeout=600,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def _dump(run_dir: Path, name: str, stage: str, suffix: str) -> Path:
    (path,) = (run_dir / "dump").glob(f"module_*.{name}.{stage}{suffix}")
    return path


@pytest.mark.parametrize("stage", ["before_optimizations", "cpu_after_optimizations"])
def test_proto_dumps_give_the_numbers_of_the_text_dumps(run_dir: Path, stage: str, tmp_path: Path) -> None:
    for name in ("jit_f", "jit_g"):
        text = analyze(_dump(run_dir, name, stage, ".txt"))
        proto = _dump(run_dir, name, stage, ".hlo.pb")
        assert numbers(analyze(proto)) == numbers(text) and text.flops > 0
        assert analyze(proto).module_name == text.module_name == name
        zipped = tmp_path / (proto.name + ".gz")
        zipped.write_bytes(gzip.compress(proto.read_bytes()))
        assert numbers(analyze(zipped)) == numbers(text)
        assert numbers(analyze(proto.read_bytes())) == numbers(text)  # the bytes themselves
    # the scan's 5 trips are found in the proto as in the text
    assert [lp.trip_count for lp in analyze(_dump(run_dir, "jit_f", stage, ".hlo.pb")).loops] == [5]


def test_cli_reads_a_proto_and_names_what_is_not_hlo(run_dir: Path, tmp_path: Path) -> None:
    proto = _dump(run_dir, "jit_f", "cpu_after_optimizations", ".hlo.pb")
    text = _dump(run_dir, "jit_f", "cpu_after_optimizations", ".txt")
    cli = [sys.executable, "-m", "hloflops"]
    by_proto = subprocess.run([*cli, str(proto), "--json"], capture_output=True, text=True, timeout=300)
    by_text = subprocess.run([*cli, str(text), "--json"], capture_output=True, text=True, timeout=300)
    assert by_proto.returncode == 0, by_proto.stderr
    assert {k: json.loads(by_proto.stdout)[k] for k in KEYS} == {k: json.loads(by_text.stdout)[k] for k in KEYS}
    notes = tmp_path / "notes.txt"
    notes.write_text("learning rate 3e-4\n")
    proc = subprocess.run([*cli, str(notes)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("this does not look like HLO text: no HloModule line or computation "
                                        "heading (expected 'HloModule name' or a computation heading such as "
                                        "'ENTRY %main {' or a stack-frame table or end of input)"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_profile_directory_every_program_as_xla_named_it(run_dir: Path, tmp_path: Path) -> None:
    (xplane,) = (run_dir / "profile").rglob("*.xplane.pb")
    assert xplane.parent.parent.name == "profile" and xplane.parent.parent.parent.name == "plugins"
    summary = run_batch([run_dir / "profile"], db=tmp_path / "p.sqlite", processes=1, progress=False)
    assert summary.exit_code == 0, [(r["path"], r["error"]) for r in summary.rows]
    by_program = {r["path"].split("::", 1)[1]: r for r in summary.rows}
    assert all(r["path"].startswith(str(xplane) + "::") for r in summary.rows)
    names = {re.sub(r"\(\d+\)$", "", name) for name in by_program}
    assert {"jit_f", "jit_g"} <= names
    for program, row in by_program.items():
        module_id = int(re.search(r"\((\d+)\)$", program).group(1))
        name = program[: program.rindex("(")]
        (text,) = (run_dir / "dump").glob(f"module_{module_id:04d}.{name}.cpu_after_optimizations.txt")
        report = analyze(text)
        assert {k: row[k] for k in KEYS} == numbers(report), program
        assert row["module_name"] == name


def test_stablehlo_is_converted_through_jax(run_dir: Path) -> None:
    mlir = run_dir / "f.mlir"
    expected = numbers(analyze(run_dir / "f_lowered.hlo"))
    assert numbers(analyze(mlir)) == expected
    assert numbers(analyze(mlir.read_text())) == expected  # lowered.as_text() itself
    assert expected["flops"] > 0


def test_without_jax_protos_are_read_and_stablehlo_is_one_line_naming_the_fix(run_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "nojax"
    for name in ("jax", "jaxlib"):
        (blocker / name).mkdir(parents=True)
        (blocker / name / "__init__.py").write_text("raise ImportError('no jax here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "hloflops", str(run_dir / "f.mlir")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1 and "StableHLO" in line and "hloflops[jax]" in line and "as_text()" in line
    # a proto is read without jax (hloparse.proto_text), with the numbers of the text dump
    for stage in ("before_optimizations", "cpu_after_optimizations"):
        for name in ("jit_f", "jit_g"):
            proto, text = (_dump(run_dir, name, stage, suffix) for suffix in (".hlo.pb", ".txt"))
            proc = subprocess.run([sys.executable, "-m", "hloflops", str(proto), "--json"], capture_output=True,
                                  text=True, env=env, timeout=300)
            assert proc.returncode == 0, proc.stderr
            assert {k: json.loads(proc.stdout)[k] for k in KEYS} == numbers(analyze(text))


def test_batch_takes_a_proto_only_dump(run_dir: Path, tmp_path: Path) -> None:
    only = tmp_path / "protos"
    only.mkdir()
    for path in (run_dir / "dump").glob("*.hlo.pb"):
        (only / path.name).write_bytes(path.read_bytes())
    summary = run_batch([only], db=tmp_path / "b.sqlite", processes=1, progress=False)
    assert summary.exit_code == 0
    for row in summary.rows:
        text = Path(str(run_dir / "dump" / Path(row["path"]).name).removesuffix(".hlo.pb") + ".txt")
        assert {k: row[k] for k in KEYS} == numbers(analyze(text))
    # XProf's tool names its files `<module>(<program_id>).hlo_proto.pb`
    xprof = tmp_path / "xprof"
    xprof.mkdir()
    proto = _dump(run_dir, "jit_f", "cpu_after_optimizations", ".hlo.pb")
    (xprof / "jit_f(6).hlo_proto.pb").write_bytes(proto.read_bytes())
    summary = run_batch([xprof], db=tmp_path / "x.sqlite", processes=1, progress=False)
    assert summary.exit_code == 0 and [r["module_name"] for r in summary.rows] == ["jit_f"]
    assert {k: summary.rows[0][k] for k in KEYS} == numbers(analyze(xprof / "jit_f(6).hlo_proto.pb"))
    # and a mixed dump: each module once, from its text
    summary = run_batch([run_dir / "dump"], db=tmp_path / "m.sqlite", processes=1, progress=False)
    assert all(r["path"].endswith(".txt") for r in summary.rows) and len(summary.rows) == len(
        list((run_dir / "dump").glob("*.cpu_after_optimizations.txt")))


TPU_SCRIPT = r'''
import os, sys
os.environ["XLA_FLAGS"] = f"--xla_dump_to={sys.argv[1]} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
s = SingleDeviceSharding(topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0])
def loss(p, x):
    return ((jnp.tanh(x @ p["w1"]) @ p["w2"]) ** 2).mean()
def step(p, x):
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, jax.grad(loss)(p, x))
p = {"w1": jax.ShapeDtypeStruct((128, 256), jnp.float32, sharding=s),
     "w2": jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=s)}
jax.jit(step, donate_argnums=0).lower(p, jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=s)).compile()
'''


def test_tpu_proto_dumps_every_stage_give_the_numbers_of_the_text(tmp_path: Path) -> None:
    """libtpu's dump (compiled ahead of time for v5e on this CPU host): every stage it writes, text
    and proto, through jax and through the wire reader, the same numbers."""
    pytest.importorskip("libtpu")
    from hloparse import protowire
    from hloparse.proto_text import module_text

    env = dict(os.environ, ALLOW_MULTIPLE_LIBTPU_LOAD="1")  # other test processes may hold libtpu's lock
    proc = subprocess.run([sys.executable, "-c", TPU_SCRIPT, str(tmp_path)], env=env, timeout=600,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    protos = sorted(tmp_path.glob("module_*.cl_*.hlo.pb"))
    stages = {p.name.split(".")[-3] for p in protos}
    assert {"before_optimizations", "after_optimizations", "after_optimizations_before_buffer_assignment",
            "after_optimizations_after_buffer_assignment", "after_codegen"} <= stages
    for proto in protos:
        text = numbers(analyze(Path(str(proto).removesuffix(".hlo.pb") + ".txt")))
        assert numbers(analyze(proto)) == text, proto.name
        wire = module_text(protowire.module_proto_of(proto.read_bytes()))
        assert numbers(analyze(wire)) == text, proto.name
    from hloflops.batch.discovery import discover

    assert {f.dump.stage for f in discover([tmp_path], stage="all").files} == stages
