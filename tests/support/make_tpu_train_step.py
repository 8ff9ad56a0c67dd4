"""Writes tests/data/tpu/train_step_v5e.hlo: an MLP train step with Adam (optax), parameters and
optimizer state donated, compiled for TPU v5e ahead of time through libtpu on this CPU host (no
TPU needed), as XLA prints the optimized module. The truncated-module tests cut it short.

    ALLOW_MULTIPLE_LIBTPU_LOAD=1 python3 -m tests.support.make_tpu_train_step
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "tpu" / "train_step_v5e.hlo"


def main() -> None:
    import jax
    import jax.numpy as jnp
    import optax
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    device = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    sharding = SingleDeviceSharding(device)
    sizes = [128, 256, 256, 128, 10]
    params = {f"w{i}": jnp.zeros((a, b)) for i, (a, b) in enumerate(zip(sizes, sizes[1:]))}
    params |= {f"b{i}": jnp.zeros((b,)) for i, b in enumerate(sizes[1:])}
    optimizer = optax.adam(1e-3)
    state = optimizer.init(params)

    def loss(p, x, y):
        h = x
        for i in range(len(sizes) - 1):
            h = h @ p[f"w{i}"] + p[f"b{i}"]
            h = jnp.tanh(h) if i < len(sizes) - 2 else h
        return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()

    def train_step(p, s, x, y):
        value, grads = jax.value_and_grad(loss)(p, x, y)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, value

    def spec(tree):  # noqa: ANN001, ANN202
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), tree)

    x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=sharding)
    y = jax.ShapeDtypeStruct((64,), jnp.int32, sharding=sharding)
    compiled = jax.jit(train_step, donate_argnums=(0, 1)).lower(spec(params), spec(state), x, y).compile()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(compiled.as_text())
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes); XLA's flops: {compiled.cost_analysis()['flops']:,.0f}")


if __name__ == "__main__":
    main()
