"""Remat as older jax names it, from the HLO text it printed (tests/data/remat_old_jax/, written by
its generate.py in a venv per jax; no old jax is needed here).

jax 0.4.13 and 0.4.20 name the transpose of a checkpoint `.../remat/...` (recompute and backward
ops alike), 0.4.26 `.../checkpoint/rematted_computation/...` for the recompute only. For every
stored jax and stage (optimized; before optimization with op_names, as the dump holds it) and
both programs (seed 000's nn.remat_scan train step; a lax.scan of a jax.checkpoint'd layer):

    remat dot FLOPs == dot FLOPs(remat program) - dot FLOPs(program without remat)
    model dot FLOPs == dot FLOPs(program without remat)

the same for transcendentals (silu's logistic, recomputed), and the split is the one today's jax
gives for the same programs. A model with a submodule a user named `remat` has no recompute.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import pytest

import hloparse
from hloflops.accounting import account
from hloflops.remat import OpNames, find_remat, inner_tail
from hloflops.remat.names import OldRematFrames, old_frames, remat_depth
from tests.programs import old_jax_remat
from tests.programs.old_jax_remat import DENSE, LAYERS, PAIRS

DATA = Path(__file__).resolve().parents[1] / "data" / "remat_old_jax"
VERSIONS = sorted(p.parent.name for p in DATA.glob("*/versions.json"))
STAGES = ("after", "before")


def test_the_stored_versions_are_there() -> None:
    # the oldest supported jax, one between, and the first printing `rematted_computation`
    assert {"0.4.13", "0.4.20", "0.4.26"} <= set(VERSIONS)
    for version in VERSIONS:
        meta = json.loads((DATA / version / "versions.json").read_text())
        assert meta["jax"] == version and sorted(meta["programs"]) == sorted(old_jax_remat.names())


@functools.lru_cache(maxsize=None)
def text(version: str, name: str, stage: str) -> str:
    with gzip.open(DATA / version / f"{name}.{stage}.hlo.gz", "rt") as f:
        return f.read()


@functools.lru_cache(maxsize=None)
def split(version: str, name: str, stage: str) -> dict[str, int]:
    """Dot FLOPs and transcendentals, all / remat / model, of one stored module (or, for
    version "today", of the module the installed jax prints)."""
    source = today(name, stage) if version == "today" else text(version, name, stage)
    rows = account(hloparse.parse(source), xla={"flops": 0.0}).rows
    out = {"remat_any": sum(r.total.flops for r in rows if r.remat)}
    for key, value, rows_of in (("dot", lambda r: r.total.flops, lambda r: r.opcode == "dot"),
                                ("trans", lambda r: r.total.transcendentals, lambda r: True)):
        out[key] = sum(value(r) for r in rows if rows_of(r))
        out[f"{key}_remat"] = sum(value(r) for r in rows if rows_of(r) and r.remat)
        out[f"{key}_model"] = sum(value(r) for r in rows if rows_of(r) and not r.remat)
    return out


@functools.lru_cache(maxsize=None)
def today(name: str, stage: str) -> str:
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    import jax

    fn, args, options = old_jax_remat.build(name)
    lowered = jax.jit(fn, **options).lower(*args)
    if stage == "before":
        return lowered.as_text(dialect="hlo", debug_info=True)
    return lowered.compile().as_text()


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("version", VERSIONS)
def test_remat_is_the_difference_to_the_program_without_remat(version: str, pair: str, stage: str) -> None:
    remat, plain = split(version, f"{pair}_remat", stage), split(version, f"{pair}_plain", stage)
    assert plain["dot"] == LAYERS * 6 * DENSE  # forward 2 Dense a layer, backward 4 (dx and dW of each)
    assert plain["dot_remat"] == plain["trans_remat"] == plain["remat_any"] == 0
    assert remat["dot"] > plain["dot"]  # the recompute runs: the check below has something to find
    assert remat["dot_remat"] == remat["dot"] - plain["dot"]
    assert remat["dot_model"] == plain["dot"]
    assert remat["trans_remat"] == remat["trans"] - plain["trans"] > 0
    assert remat["trans_model"] == plain["trans"]


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("version", VERSIONS)
def test_the_split_is_todays(version: str, pair: str, stage: str) -> None:
    """Old jax's dot and transcendental split of a program is the one the installed jax gives."""
    keys = ("dot_remat", "dot_model", "trans_remat", "trans_model")
    old, new = split(version, f"{pair}_remat", stage), split("today", f"{pair}_remat", stage)
    assert [old[k] for k in keys] == [new[k] for k in keys]


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("version", VERSIONS + ["today"])
def test_a_module_a_user_named_remat_is_no_recompute(version: str, stage: str) -> None:
    """`nn.Dense(name="remat")` without any checkpoint: its backward ops read
    `transpose(jvp(Model))/remat/...` like older jax's frame, but its forward runs under
    `jvp(Model)/remat/...`, which jax's frame never does."""
    source = today("user_remat_name", stage) if version == "today" else text(version, "user_remat_name", stage)
    module = hloparse.parse(source)
    names = OpNames(module)
    whole = [names.of(comp.name, inst) for comp in module.computations for inst in comp.instructions]
    assert any(old_frames(name) for name in whole)  # the names do look like jax's frame
    assert not OldRematFrames(whole)
    index = find_remat(module, op_names=names)
    assert (index.remat_named, len(index.remat)) == (0, 0)
    assert split(version, "user_remat_name", stage)["remat_any"] == 0


def test_old_frame_names() -> None:
    jit = "jit(step)/jit(main)"
    scan = f"{jit}/transpose(jvp(StackedMLPs))/while/body/remat/while/body/stack/Dense_0/dot_general"
    assert inner_tail(scan) == ("stack", "Dense_0", "dot_general")
    assert remat_depth(scan) == 1
    assert inner_tail(f"{jit}/transpose(jvp(remat))/Stack/layer_0/Dense_0/dot_general") == (
        "Stack", "layer_0", "Dense_0", "dot_general")
    nested = f"{jit}/transpose(jvp(remat))/remat/tanh"
    assert remat_depth(nested) == 2 and inner_tail(nested) == ("tanh",)
    # no transpose: a checkpoint outside any gradient recomputes nothing; flax's automatic names
    for name in (f"{jit}/remat/dot_general", f"{jit}/jvp(remat)/dot_general", f"{jit}/transpose(jvp(M))/remat_0/add",
                 f"{jit}/transpose(jvp(M))/Remat_0/add"):
        assert old_frames(name) == [] and remat_depth(name) == 0, name
    # new names are read as before
    new = f"{jit}/transpose(jvp(M))/checkpoint/rematted_computation/remat/Dense_0/dot_general"
    assert remat_depth(new) == 1 and inner_tail(new) == ("Dense_0", "dot_general")


def test_user_module_or_jax_frame() -> None:
    jit = "jit(step)/jit(main)"
    jax_frame = f"{jit}/transpose(jvp(Stack))/remat/layer_0/Dense_0/dot_general"
    forward = f"{jit}/jvp(Stack)/layer_0/Dense_0/dot_general"
    assert jax_frame in OldRematFrames([jax_frame, forward])
    user_forward = f"{jit}/jvp(Stack)/remat/Dense_0/dot_general"
    assert jax_frame not in OldRematFrames([jax_frame, forward, user_forward])
    assert f"{jit}/transpose(jvp(remat))/Stack/dot_general" in OldRematFrames([user_forward,
                                                                             f"{jit}/transpose(jvp(remat))/Stack/dot_general"])


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("version", ["0.4.13", "0.4.20"])
def test_backward_ops_under_the_old_frame_are_not_listed_as_merged(version: str, stage: str) -> None:
    """Older jax's frame holds the checkpoint's backward ops (dx, dW) with its recompute: they
    have no forward twin and are backward work, not recomputes CSE merged (`remat_unpaired`
    would warn that the split may be low)."""
    for pair in PAIRS:
        accounting = account(hloparse.parse(text(version, f"{pair}_remat", stage)), xla={"flops": 0.0})
        assert any(old_frames(r.scope) for r in accounting.rows if r.opcode == "dot")
        assert accounting.remat_unpaired == ()
