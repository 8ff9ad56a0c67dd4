"""Finding modules for batch analysis: XLA dump naming, stages, side files, plain and gzip files."""

from __future__ import annotations

from pathlib import Path

import pytest

from hloflops.batch.discovery import DumpName, discover, parse_dump_name, stage_matches


@pytest.mark.parametrize(
    "name, expected",
    [
        ("module_0004.jit_f.cpu_after_optimizations.txt", DumpName("", 4, "jit_f", "cpu_after_optimizations")),
        ("module_0001.jit_f.after_optimizations.txt", DumpName("", 1, "jit_f", "after_optimizations")),
        ("module_0012.jit_step.before_optimizations.txt", DumpName("", 12, "jit_step", "before_optimizations")),
        # GPU after-optimizations names carry the compute capability, dot included
        ("module_0003.jit_f.sm_9.0_gpu_after_optimizations.txt",
         DumpName("", 3, "jit_f", "sm_9.0_gpu_after_optimizations")),
        ("module_0003.jit_f.gfx90a_gpu_after_optimizations.txt",
         DumpName("", 3, "jit_f", "gfx90a_gpu_after_optimizations")),
        # a module name with dots, a name prefix (e.g. a timestamp), gzip, more than 4 digits
        ("module_0002.jit_a.b.cpu_after_optimizations.txt", DumpName("", 2, "jit_a.b", "cpu_after_optimizations")),
        ("1700000000.module_0002.jit_f.before_optimizations.txt.gz",
         DumpName("1700000000", 2, "jit_f", "before_optimizations")),
        ("module_12345.pmap_f.after_optimizations.txt", DumpName("", 12345, "pmap_f", "after_optimizations")),
        # between-passes dumps (--xla_dump_hlo_pass_re)
        ("module_0001.jit_f.0007.simplification.after_algsimp.before_dce.txt",
         DumpName("", 1, "jit_f", "0007.simplification.after_algsimp.before_dce")),
    ],
)
def test_dump_names(name: str, expected: DumpName) -> None:
    assert parse_dump_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "module_0004.jit_f.cpu_after_optimizations-buffer-assignment.txt",
        "module_0004.jit_f.cpu_after_optimizations-buffer-assignment-values.txt",
        "module_0004.jit_f.cpu_after_optimizations-memory-usage-report.txt",
        "module_0004.jit_f.cpu_after_optimizations-live-range.txt",
        "module_0004.jit_f.thunk_sequence.txt",
        "module_0004.jit_f.debug_options",
        "module_0004.jit_f.cpu_after_optimizations-memory-usage-report.pb",
        "module_0004.jit_f.cl_933746096.execution_options.txt",
        "module_0004.jit_f.cl_933746096.tpu_comp_env.txt",
        "module_0004.jit_f.after_optimizations.dot",
        "module_0004.jit_f.ir-no-opt.ll",
        "module_0004.jit_f.obj-file.kernel.o",
        "plain.hlo",
    ],
)
def test_not_dump_module_texts(name: str) -> None:
    assert parse_dump_name(name) is None


def test_stage_selection() -> None:
    assert stage_matches("cpu_after_optimizations", "after_optimizations")
    assert stage_matches("sm_8.0_gpu_after_optimizations", "after_optimizations")
    assert stage_matches("after_optimizations", "after_optimizations")
    assert not stage_matches("before_optimizations", "after_optimizations")
    assert stage_matches("before_optimizations", "before_optimizations")
    assert not stage_matches("cpu_after_optimizations", "before_optimizations")
    assert stage_matches("0007.simplification.after_algsimp.before_dce", "*after_algsimp*")
    assert not stage_matches("0008.simplification.after_dce.before_cse", "*after_algsimp*")
    assert stage_matches("anything", "all")


def _touch(path: Path, text: str = "HloModule m\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_discover_dump_and_plain_files(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    for mid, name in ((1, "jit_f"), (2, "jit_g")):
        base = f"module_{mid:04d}.{name}"
        _touch(dump / f"{base}.before_optimizations.txt")
        _touch(dump / f"{base}.cpu_after_optimizations.txt")
        _touch(dump / f"{base}.cpu_after_optimizations-buffer-assignment.txt")
        _touch(dump / f"{base}.cpu_after_optimizations-memory-usage-report.txt")
        _touch(dump / f"{base}.debug_options")
        _touch(dump / f"{base}.ir-no-opt.ll")
        _touch(dump / base / "module.mlir")
    _touch(dump / "module_0003.jit_h.before_optimizations.txt")  # compiled without an after text
    _touch(tmp_path / "nested" / "deeper" / "a.hlo")
    _touch(tmp_path / "nested" / "b.txt")
    _touch(tmp_path / "nested" / "c.hlo.gz")
    _touch(tmp_path / "nested" / "bench.module_0019.hlo")  # a .hlo is never an XLA side file
    _touch(tmp_path / "nested" / "notes.md")
    _touch(tmp_path / ".hidden" / "x.hlo")

    found = discover([tmp_path])
    names = sorted(str(f.path.relative_to(tmp_path)) for f in found.files)
    assert names == [
        "dump/module_0001.jit_f.cpu_after_optimizations.txt",
        "dump/module_0002.jit_g.cpu_after_optimizations.txt",
        "nested/b.txt",
        "nested/bench.module_0019.hlo",
        "nested/c.hlo.gz",
        "nested/deeper/a.hlo",
    ]
    by_name = {f.path.name: f for f in found.files}
    assert by_name["module_0001.jit_f.cpu_after_optimizations.txt"].stage == "cpu_after_optimizations"
    assert by_name["c.hlo.gz"].compressed and by_name["c.hlo.gz"].stage is None
    assert found.missing_stage == (f"{dump}/module_0003.jit_h",)
    assert found.problems == ()

    before = discover([dump], stage="before_optimizations")
    assert sorted(f.path.name for f in before.files) == [
        "module_0001.jit_f.before_optimizations.txt",
        "module_0002.jit_g.before_optimizations.txt",
        "module_0003.jit_h.before_optimizations.txt",
    ]
    assert len(discover([dump], stage="all").files) == 5


def test_one_after_text_per_module(tmp_path: Path) -> None:
    # Some platforms write both names for one compilation: analyse the module once.
    _touch(tmp_path / "module_0001.jit_f.after_optimizations.txt")
    _touch(tmp_path / "module_0001.jit_f.cpu_after_optimizations.txt")
    found = discover([tmp_path])
    assert [f.path.name for f in found.files] == ["module_0001.jit_f.after_optimizations.txt"]


def test_explicit_files_and_missing_paths(tmp_path: Path) -> None:
    odd = _touch(tmp_path / "module.weird-extension")
    side = _touch(tmp_path / "module_0001.jit_f.cpu_after_optimizations-buffer-assignment.txt")
    found = discover([odd, side, tmp_path / "nope"])
    assert sorted(f.path.name for f in found.files) == sorted([odd.name, side.name])
    assert found.problems == ((str(tmp_path / "nope"), "no such file or directory"),)
    # the same file named twice, directly and through its directory, is one file
    again = discover([tmp_path, odd, tmp_path])
    assert [f.path.name for f in again.files] == [odd.name]
