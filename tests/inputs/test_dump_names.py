"""Dump discovery that knows the names XLA writes (issue 31): the name XLA leaves out of long file
names, libtpu's changelist stamp, its extra stages, proto dumps beside text dumps, and files in a
dump directory that hold no HLO (skipped, with the reason, never a failure)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from hloflops.batch.discovery import DumpName, discover, parse_dump_name
from hloflops.batch.run import NoModulesFound, run_batch

MODULE = ("HloModule {name}\n\nENTRY %main (p: f32[4]) -> f32[4] {{\n  %p = f32[4] parameter(0)\n"
          "  ROOT %n = f32[4] negate(%p)\n}}\n")


@pytest.mark.parametrize("name, expected", [
    # XLA drops the module name when the file name would pass 255 characters
    ("module_4561.before_optimizations.txt", DumpName("", 4561, "", "before_optimizations")),
    ("module_4561.cpu_after_optimizations.txt", DumpName("", 4561, "", "cpu_after_optimizations")),
    # builds that stamp a changelist: not part of the module name
    ("module_0965.jit_f.cl_878201828.after_optimizations.txt",
     DumpName("", 965, "jit_f", "after_optimizations", changelist="878201828")),
    # libtpu's stages
    ("module_0000.jit_step.cl_933746096.after_optimizations_before_buffer_assignment.txt",
     DumpName("", 0, "jit_step", "after_optimizations_before_buffer_assignment", changelist="933746096")),
    ("module_0000.jit_step.after_optimizations_after_buffer_assignment.txt",
     DumpName("", 0, "jit_step", "after_optimizations_after_buffer_assignment")),
    ("module_0000.jit_step.cl_933746096.after_codegen.txt",
     DumpName("", 0, "jit_step", "after_codegen", changelist="933746096")),
    # --xla_dump_hlo_as_proto, and --xla_dump_compress_protos
    ("module_0006.jit_f.cpu_after_optimizations.hlo.pb",
     DumpName("", 6, "jit_f", "cpu_after_optimizations", format="proto")),
    ("module_0006.jit_f.before_optimizations.hlo.pb.gz",
     DumpName("", 6, "jit_f", "before_optimizations", format="proto")),
    # during a pass (DumpHloModuleDuringPassIfEnabled: step.pass.step_name)
    ("module_0001.jit_f.0003.spmd-partitioning.after_propagation.txt",
     DumpName("", 1, "jit_f", "0003.spmd-partitioning.after_propagation")),
])
def test_names_xla_writes(name: str, expected: DumpName) -> None:
    assert parse_dump_name(name) == expected


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_truncated_name_is_read_from_the_file(tmp_path: Path) -> None:
    long_name = "jit_" + "very_long_function_name_" * 10
    _write(tmp_path / "module_4561.before_optimizations.txt", MODULE.format(name=long_name))
    _write(tmp_path / "module_4561.cpu_after_optimizations.txt", MODULE.format(name=long_name))
    found = discover([tmp_path])
    assert [f.path.name for f in found.files] == ["module_4561.cpu_after_optimizations.txt"]
    assert found.files[0].dump.module_name == long_name
    assert found.missing_stage == ()


def test_changelist_stamp_and_tpu_stages(tmp_path: Path) -> None:
    base = "module_0000.jit_step.cl_933746096"
    for stage in ("before_optimizations", "after_optimizations", "after_optimizations_before_buffer_assignment",
                  "after_optimizations_after_buffer_assignment", "after_codegen"):
        _write(tmp_path / f"{base}.{stage}.txt", MODULE.format(name="jit_step"))
    for side in ("execution_options", "tpu_comp_env", "target_arguments", "hlo_module_config", "transfer_stats",
                 "basic_compiler_metadata", "after_optimizations-buffer-assignment"):
        _write(tmp_path / f"{base}.{side}.txt", "not a module\n")
    found = discover([tmp_path])
    assert [f.path.name for f in found.files] == [f"{base}.after_optimizations.txt"]
    assert found.files[0].dump.module_name == "jit_step" and found.skipped == ()
    chosen = discover([tmp_path], stage="*before_buffer_assignment")
    assert [f.stage for f in chosen.files] == ["after_optimizations_before_buffer_assignment"]
    assert len(discover([tmp_path], stage="all").files) == 5


def test_text_and_proto_of_one_module_count_once(tmp_path: Path) -> None:
    for suffix in (".txt", ".hlo.pb"):
        for stage in ("before_optimizations", "cpu_after_optimizations"):
            _write(tmp_path / f"module_0006.jit_f.{stage}{suffix}", MODULE.format(name="jit_f"))
    assert [f.path.name for f in discover([tmp_path]).files] == ["module_0006.jit_f.cpu_after_optimizations.txt"]
    assert sorted(f.path.name for f in discover([tmp_path], stage="all").files) == [
        "module_0006.jit_f.before_optimizations.txt", "module_0006.jit_f.cpu_after_optimizations.txt"]
    # a proto alone is the module
    only_proto = tmp_path / "p"
    _write(only_proto / "module_0007.jit_g.cpu_after_optimizations.hlo.pb", "x")
    assert [f.dump.format for f in discover([only_proto]).files] == ["proto"]


def test_stray_files_are_skipped_with_the_reason(tmp_path: Path) -> None:
    _write(tmp_path / "module_0001.jit_f.cpu_after_optimizations.txt", MODULE.format(name="jit_f"))
    _write(tmp_path / "notes.txt", "Run 17: lr 3e-4, batch 256\nlooked fine\n")
    _write(tmp_path / "readme.txt", "\n\n# How this dump was made\n")
    (tmp_path / "log.txt.gz").write_bytes(gzip.compress(b"step 1 loss 2.3\n"))
    (tmp_path / "blob.txt").write_bytes(bytes(range(256)))
    _write(tmp_path / "kept.txt", MODULE.format(name="plain"))  # HLO in a .txt: taken
    _write(tmp_path / "headless.txt", "ENTRY %main {\n  ROOT %c = f32[] constant(1)\n}\n")
    _write(tmp_path / "broken.txt", "HloModule b\nENTRY %main {\n  ROOT %c = f32[] constant(\n}\n")
    found = discover([tmp_path])
    assert sorted(f.path.name for f in found.files) == [
        "broken.txt", "headless.txt", "kept.txt", "module_0001.jit_f.cpu_after_optimizations.txt"]
    skipped = {Path(p).name: why for p, why in found.skipped}
    assert set(skipped) == {"notes.txt", "readme.txt", "log.txt.gz", "blob.txt"}
    assert skipped["notes.txt"] == ("not HLO: text that is not HLO (first line 'Run 17: lr 3e-4, batch 256'; "
                                    "no HloModule line or computation heading)")
    assert skipped["log.txt.gz"].startswith("not HLO: gzip of text that is not HLO")
    assert skipped["blob.txt"].startswith("not HLO: binary data that is not an HLO proto")


def test_stray_files_are_no_failure_and_broken_hlo_still_is(tmp_path: Path) -> None:
    _write(tmp_path / "module_0001.jit_f.cpu_after_optimizations.txt", MODULE.format(name="jit_f"))
    _write(tmp_path / "notes.txt", "notes\n")
    db = tmp_path / "out.sqlite"
    summary = run_batch([tmp_path], db=db, processes=1, progress=False)
    assert summary.exit_code == 0 and summary.failed == 0 and summary.files == 1
    assert [Path(p).name for p, _ in summary.skipped] == ["notes.txt"]
    from hloflops.batch.summary import format_summary

    assert "skipped 1 files that hold no HLO" in format_summary(summary)
    _write(tmp_path / "broken.txt", "HloModule b\nENTRY %main {\n  ROOT %c = f32[] constant(\n}\n")
    summary = run_batch([tmp_path], db=db, processes=1, progress=False)
    (row,) = [r for r in summary.rows if r["path"].endswith("broken.txt")]
    assert summary.exit_code == 1 and row["status"] == "parse_error"
    assert row["error"].startswith(f"{tmp_path / 'broken.txt'}:4:1: ")


def test_directory_without_modules_says_so_and_writes_nothing(tmp_path: Path) -> None:
    _write(tmp_path / "in" / "readme.txt", "This directory holds the dumps of run 17.\n")
    db = tmp_path / "out.sqlite"
    with pytest.raises(NoModulesFound, match="no HLO modules found.*1 files skipped, not HLO.*readme.txt"):
        run_batch([tmp_path / "in"], db=db, processes=1, progress=False)
    assert not db.exists()
