"""The issue's sharded TPU remat programs (issue 28): a 6-layer bf16 transformer under FSDP and
under tensor parallelism on a v5e 2x2 mesh, compiled ahead of time by libtpu on this CPU host (no
TPU needed), each with its twin without the remat wrapper.

    python3 -m tests.programs.remat_sharded [OUT_DIR]

writes `CASE.remat.hlo.gz` and `CASE.plain.hlo.gz` (`compiled.as_text()`) of the `STORED` cases
into OUT_DIR (default tests/data/remat_tpu, which tests/remat/test_remat_tpu_sharded.py reads
without libtpu): the Python-loop LM at 2 layers (each layer's text is ~40 KB gzipped; 2 layers
already show the split, one layer's recompute beside another's forward), where the issue's
6-layer cases are compiled live where libtpu is installed.

Sharding: FSDP shards every parameter's largest dimension that 4 divides over all four devices
and the batch over the same axis (XLA all-gathers each weight where a layer reads it, in the
forward and again in the recompute); tensor parallel is a (data 2, model 2) mesh, every weight's
last even dimension over `model` (not the layer axis of a stacked scan), the batch over `data`.
"""

from __future__ import annotations

import gzip
import os
import sys
from dataclasses import replace
from pathlib import Path

from tests.programs import Program
from tests.programs.remat_forms import Form, build

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "remat_tpu"
SIZES = dict(layers=6, batch=8, tokens=128, width=256, hidden=1024, heads=4, dtype="bfloat16")
FORMS = {
    # the form: lax.scan over jax.checkpoint'd layers
    "scan_over_checkpointed_layers": Form("scan", arch="attn", **SIZES),
    # the Flax LM with nn.remat per block in a Python loop (the "Python-loop twin")
    "python_loop_nn_remat_lm": Form("linen_loop", arch="lm", **SIZES),
}
CASES = {f"{mesh}_{name}": (mesh, form) for mesh in ("fsdp", "tp") for name, form in FORMS.items()}
STORED = {f"{mesh}_python_loop_nn_remat_lm_2_layers": (mesh, FORMS["python_loop_nn_remat_lm"].with_(layers=2))
          for mesh in ("fsdp", "tp")}


def _spec(mesh: str, shape: tuple[int, ...], layers: int):
    from jax.sharding import PartitionSpec as P

    if mesh == "fsdp":
        dims = [i for i, n in enumerate(shape) if n % 4 == 0 and n >= 64]
        if not dims:
            return P()
        i = max(dims, key=lambda i: shape[i])
        return P(*([None] * i + ["fsdp"]))
    dims = [i for i, n in enumerate(shape) if n % 2 == 0 and n >= 4 and n != layers]
    if not dims:
        return P()
    i = dims[-1] if len(shape) >= 2 else dims[0]
    return P(*([None] * i + ["model"]))


def _devices():
    # Other processes (a TPU catalogue job) may hold libtpu's lockfile: no chip is used here.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import numpy as np
    from jax.experimental import topologies

    return np.array(topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices)


def placed(program: Program, mesh_kind: str, layers: int, opt_state: bool = False) -> Program:
    """The program with its args placed on a v5e: one device (`single`), or sharded over the 2x2
    mesh (`fsdp`, `tp`: parameters by `_spec`, inputs by their first dimension where the batch
    axis divides it); lowering it lowers for TPU. `opt_state`: args[1] is an optimizer state,
    sharded as the parameters are."""
    import jax
    from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
    from jax.sharding import PartitionSpec as P

    devices = _devices()
    if mesh_kind == "single":
        one = SingleDeviceSharding(devices.flat[0])

        def param(s):
            return one

        def data(s):
            return one
    else:
        if mesh_kind == "fsdp":
            mesh, axis, size = Mesh(devices.reshape(4), ("fsdp",)), "fsdp", 4
        else:
            mesh, axis, size = Mesh(devices.reshape(2, 2), ("data", "model")), "data", 2

        def param(s):
            return NamedSharding(mesh, _spec(mesh_kind, s.shape, layers))

        def data(s):
            return NamedSharding(mesh, P(axis) if s.shape and s.shape[0] % size == 0 else P())

    def put(tree, where):
        return jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=where(s)), tree)

    n = 2 if opt_state else 1
    args = tuple(put(a, param) for a in program.args[:n]) + tuple(put(a, data) for a in program.args[n:])
    return replace(program, name=f"{program.name}_tpu_{mesh_kind}", args=args)


def compile_case(mesh_kind: str, form: Form) -> dict[str, str]:
    """The optimized module text of the form's program and of its twin on the mesh ("fsdp" or
    "tp"): {"remat": ..., "plain": ...}."""
    import jax

    pair = build(form)
    texts = {}
    for which in ("remat", "plain"):
        program = placed(getattr(pair, which), mesh_kind, form.layers)
        texts[which] = jax.jit(program.fn).lower(*program.args).compile().as_text()
    return texts


def stored(case: str, which: str, data_dir: Path = DATA_DIR) -> str:
    return gzip.decompress((data_dir / f"{case}.{which}.hlo.gz").read_bytes()).decode()


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else DATA_DIR
    out.mkdir(parents=True, exist_ok=True)
    for case, (mesh_kind, form) in STORED.items():
        for which, text in compile_case(mesh_kind, form).items():
            with open(out / f"{case}.{which}.hlo.gz", "wb") as raw, \
                    gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as f:
                f.write(text.encode())
        print("wrote", case)


if __name__ == "__main__":
    main(sys.argv[1:])
