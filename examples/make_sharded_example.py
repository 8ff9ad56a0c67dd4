"""Write examples/fsdp_train_step.after_optimizations.hlo: one FSDP training step on 8 devices.

    python3 examples/make_sharded_example.py

A 4-layer tanh MLP (d_model 128) as a lax.scan over stacked weights [4, 128, 128] f32, each
layer's weights split 8 ways by rows over a 2 x 4 mesh ('data', 'model') and gathered inside the
scan body; the batch (64 x 128) split 8 ways too; grad of a mean-squared loss and an SGD update
that leaves the weights sharded. Compiled for 8 host CPU devices: the script reruns itself
with XLA_FLAGS=--xla_force_host_platform_device_count=8 when fewer are visible.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "fsdp_train_step.after_optimizations.hlo"
DEVICES, LAYERS, D, BATCH = 8, 4, 128, 64


def build() -> str:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:DEVICES]).reshape(2, 4), ("data", "model"))
    sharded_w = NamedSharding(mesh, P(None, ("data", "model"), None))
    replicated = NamedSharding(mesh, P())

    def forward(ws, x):
        def layer(h, w):
            w = jax.lax.with_sharding_constraint(w, replicated)  # FSDP: gather this layer's weights
            return jnp.tanh(h @ w), None
        return jax.lax.scan(layer, x, ws)[0]

    def train_step(ws, x):
        loss, grads = jax.value_and_grad(lambda w: jnp.mean(forward(w, x) ** 2))(ws)
        return jax.lax.with_sharding_constraint(ws - 0.1 * grads, sharded_w), loss

    args = (jax.ShapeDtypeStruct((LAYERS, D, D), np.float32, sharding=sharded_w),
            jax.ShapeDtypeStruct((BATCH, D), np.float32, sharding=NamedSharding(mesh, P(("data", "model"), None))))
    return jax.jit(train_step).lower(*args).compile().as_text()


if __name__ == "__main__":
    import jax

    if len(jax.devices()) < DEVICES:
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}", JAX_PLATFORMS="cpu")
        sys.exit(subprocess.call([sys.executable, __file__], env=env))
    OUT.write_text(build())
    print(f"wrote {OUT}")
