"""Write the HLO that the running jax prints for tests/programs/old_jax_remat.py's programs.

    /tmp/venvs/jax0.4.13/bin/python tests/data/remat_old_jax/generate.py tests/data/remat_old_jax/0.4.13

(run from the repository root, on CPU). The venvs that wrote the stored files (pip, Python 3.11;
each also with msgpack rich PyYAML typing_extensions, and flax installed `--no-deps`):

    0.4.13: jax==jaxlib==0.4.13 'numpy<2' 'scipy<1.13' 'ml_dtypes<0.3' optax==0.1.7 chex==0.1.82 flax==0.7.2
    0.4.20: jax==jaxlib==0.4.20 'numpy<2' 'scipy<1.13' 'ml_dtypes<0.4' optax==0.1.7 chex==0.1.85 flax==0.7.5
    0.4.26: jax==jaxlib==0.4.26 'numpy<2' 'scipy<1.13' 'ml_dtypes<0.5' optax==0.2.2 chex==0.1.86 flax==0.8.2
 For each program it writes `<name>.after.hlo.gz`, the
optimized module (`compiled.as_text()`, what XLA runs), and `<name>.before.hlo.gz`, the module
before optimization as XLA's `--xla_dump_to` dump holds it: with op_name metadata, which is what
old jax's `lowered.as_text()` leaves out (its `debug_info=True` came later). The dump is read
rather than a jax API because it is the one printer every release from 0.4.13 on has.
`versions.json` records the versions of jax, jaxlib and flax and the programs written. (The
dump's own optimized module is the same module in XLA's short printing: `as_text()` is kept, as
users read it.)
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DUMP = tempfile.mkdtemp(prefix="hloflops-oldjax-")
# XLA reads its flags once, when the backend starts: set before jax is imported.
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={DUMP}".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(ROOT))


def _dumped(module: str, stage: str) -> str:
    files = sorted(glob.glob(os.path.join(DUMP, f"module_*.{module}.{stage}.txt")))
    if len(files) != 1:
        raise RuntimeError(f"{module}: expected one {stage} dump, found {files}")
    return Path(files[0]).read_text()


def _write(path: Path, text: str) -> None:
    # mtime=0: the same text gives the same bytes, so regenerating changes nothing in git
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(text.encode())


def main(outdir: str) -> None:
    import flax
    import jax
    import jaxlib

    from tests.programs import old_jax_remat

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    programs = []
    for name in old_jax_remat.names():
        fn, args, options = old_jax_remat.build(name)

        def step(*xs, fn=fn):
            return fn(*xs)

        step.__name__ = step.__qualname__ = name  # the module is jit_<name>: its dump files are found by it
        compiled = jax.jit(step, **options).lower(*args).compile()
        after = compiled.as_text()
        _write(out / f"{name}.after.hlo.gz", after)
        _write(out / f"{name}.before.hlo.gz", _dumped(f"jit_{name}", "before_optimizations"))
        programs.append(name)
    meta = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__, "programs": programs}
    (out / "versions.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(json.dumps(meta))
    shutil.rmtree(DUMP, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
