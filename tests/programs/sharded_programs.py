"""Sharded jax programs on 8 host devices, with the bytes each device sends written by hand.

Run as a script (`python3 -m tests.programs.sharded_programs OUT.json`) it needs
`XLA_FLAGS=--xla_force_host_platform_device_count=8` set BEFORE jax starts, which is why
tests/programs/sharded_compile.py runs it in a subprocess: the flag never reaches the test
process. Importing this module does not import jax; `build()` does.

Per device every shard_map block is B = 16 x 32 f32 = 2,048 bytes and the group is all 8
devices (n = 8), so by the ring formulas (hloflops.cost.communication):

    psum          2 (n-1)/n x B          = 3,584
    all_gather      (n-1)/n x (n x B)    = 14,336
    psum_scatter    (n-1)/n x B          = 1,792
    all_to_all      (n-1)/n x B          = 1,792
    ppermute        B                    = 2,048   (a ring: every device sends)

each multiplied by how often it runs: once at top level, 3 times in a scan of length 3, 4 in a
fori_loop of 4, and 2 x 3 = 6 in a scan of 2 around a fori_loop of 3.
"""

from __future__ import annotations

import json
import sys

DEVICES = 8
BLOCK = (16, 32)  # per-device block of every shard_map program, f32
B = BLOCK[0] * BLOCK[1] * 4
N = DEVICES

PER_EXECUTION = {
    "psum": 2 * (N - 1) * B // N,
    "all_gather": (N - 1) * (N * B) // N,
    "psum_scatter": (N - 1) * B // N,
    "all_to_all": (N - 1) * B // N,
    "ppermute": B,
}
OPCODE = {
    "psum": "all-reduce",
    "all_gather": "all-gather",
    "psum_scatter": "reduce-scatter",
    "all_to_all": "all-to-all",
    "ppermute": "collective-permute",
}
LOOPS = {"top": 1, "scan3": 3, "fori4": 4, "scan2_fori3": 6}

# jax.jit + NamedSharding on a 2 x 4 mesh ('data', 'model'); what each device sends, by hand:
# - dp: grad of sum((x @ w)^2) w.r.t. a replicated w [32,32] f32 (4,096 bytes), x [16,32] split
#   over 'data': the gradient is all-reduced over 'data' (groups of 2): 2 (2-1)/2 x 4,096.
# - fsdp: 3 layers stacked [3,32,32] f32, each layer's w split 8 ways along its rows and
#   gathered inside the scan body (with_sharding_constraint to replicated): per layer an
#   all-gather of 4,096 result bytes over 8 devices, (8-1)/8 x 4,096, 3 times.
# - tp: x [16,32] split over 'data' (8 rows a device), w1 [32,64] split by columns over 'model',
#   w2 [64,32] split by rows over 'model': y = (x @ w1) @ w2 is a partial sum, all-reduced over
#   'model' (groups of 4): 2 (4-1)/4 x (8 x 32 x 4) bytes.
NAMED_EXPECTED = {
    "dp": 2 * (2 - 1) * (32 * 32 * 4) // 2,
    "fsdp": 3 * ((8 - 1) * (32 * 32 * 4) // 8),
    "tp": 2 * (4 - 1) * (8 * 32 * 4) // 4,
}


def _collective(kind: str):
    from jax import lax

    def psum(x):
        return lax.psum(x, "x") * 0.5

    def all_gather(x):
        full = lax.all_gather(x, "x", tiled=True)  # [128, 32]
        return x + full.reshape(N, *BLOCK).sum(0)

    def psum_scatter(x):
        part = lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True)  # [2, 32]
        return x + lax.broadcast_in_dim(part, (N, 2, BLOCK[1]), (1, 2)).reshape(BLOCK)

    def all_to_all(x):
        return lax.all_to_all(x, "x", 0, 0, tiled=True) * 0.5

    def ppermute(x):
        return lax.ppermute(x, "x", [(i, (i + 1) % N) for i in range(N)]) * 0.5

    return {"psum": psum, "all_gather": all_gather, "psum_scatter": psum_scatter,
            "all_to_all": all_to_all, "ppermute": ppermute}[kind]


def _looped(step, loop: str):
    from jax import lax

    if loop == "top":
        return step
    if loop == "scan3":
        return lambda x: lax.scan(lambda c, _: (step(c), None), x, None, length=3)[0]
    if loop == "fori4":
        return lambda x: lax.fori_loop(0, 4, lambda i, c: step(c), x)
    if loop == "scan2_fori3":
        inner = lambda c: lax.fori_loop(0, 3, lambda i, d: step(d), c)  # noqa: E731
        return lambda x: lax.scan(lambda c, _: (inner(c), None), x, None, length=2)[0]
    raise ValueError(loop)


def shard_map_programs():
    import jax
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    arg = jax.ShapeDtypeStruct((N * BLOCK[0], BLOCK[1]), np.float32)
    for kind in PER_EXECUTION:
        for loop in LOOPS:
            body = _looped(_collective(kind), loop)
            fn = jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
            yield f"{kind}-{loop}", jax.jit(fn), (arg,)


def named_sharding_programs():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:N]).reshape(2, 4), ("data", "model"))

    def spec(shape, *axes):
        return jax.ShapeDtypeStruct(shape, np.float32, sharding=NamedSharding(mesh, P(*axes)))

    def dp_loss(w, x):
        return jnp.sum((x @ w) ** 2)

    yield "dp", jax.jit(jax.grad(dp_loss), out_shardings=NamedSharding(mesh, P())), (
        spec((32, 32)), spec((16, 32), "data", None))

    replicated = NamedSharding(mesh, P())

    def fsdp(ws, x):
        def layer(h, w):
            w = jax.lax.with_sharding_constraint(w, replicated)
            return jnp.tanh(h @ w), None
        return jax.lax.scan(layer, x, ws)[0]

    yield "fsdp", jax.jit(fsdp), (spec((3, 32, 32), None, ("data", "model"), None), spec((16, 32), "data", None))

    def tp(x, w1, w2):
        return (x @ w1) @ w2

    yield "tp", jax.jit(tp, out_shardings=NamedSharding(mesh, P("data", None))), (
        spec((16, 32), "data", None), spec((32, 64), None, "model"), spec((64, 32), "model", None))


def build() -> dict[str, str]:
    """name -> compiled HLO text of every program (needs the 8-device flag already set)."""
    import jax

    if len(jax.devices()) < N:
        raise RuntimeError(f"need {N} devices, have {len(jax.devices())}: set "
                           f"XLA_FLAGS=--xla_force_host_platform_device_count={N} before jax starts")
    texts = {}
    for name, fn, args in (*shard_map_programs(), *named_sharding_programs()):
        texts[name] = fn.lower(*args).compile().as_text()
    return texts


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump(build(), f)
