#!/usr/bin/env python3
"""The standard training step of `benches/step.rs`, in JAX, as the peer figure.

Same model as `MlpLanguageModel` (src/nn/model.rs) with the same Megatron
sharding over P CPU devices (`shard_map`, one mesh axis "tp"):

    ids → vocab-parallel embedding (rows split, masked lookup, all-reduce)
        → column-parallel linear H→F (+bias)   (input: copy-to = all-reduce in backward)
        → GELU (tanh form)
        → row-parallel linear F→H (all-reduce, then +bias)
        → column-parallel head H→V, no bias, vocab-sharded logits (no gather)
        → vocab-parallel cross-entropy (all-reduce max, sum of exp, target logit), mean
    backward (jax.grad inside each rank) + SGD (lr 0.05, no momentum).

That is 5 all-reduces forward and 2 backward per step, as in wgpu-tp. Sizes
are the step bench's: tokens 512, hidden 512, ffn 2048, vocab 4096, f32,
weights N(0, 0.02²), biases 0, the bench's LCG batch. The whole step (forward,
backward, update) is one jit-compiled function; parameters are donated, so
it updates in place like the Rust step. Compilation and 2 warm-up steps are
not timed; then N steps are timed one by one, each ended by
block_until_ready (the counterpart of `Mesh::synchronize`), and the best and
median ms/step are printed, with the CPUs the process kept busy (as the step
bench's `cores` column: CPU time of all threads over wall time).

Run (see benches/peers/README.md):
    python benches/peers/jax_step.py            # P = 4, 20 timed steps
    python benches/peers/jax_step.py --devices 1 --steps 10
    python benches/peers/jax_step.py --check    # sharded step == unsharded step
"""

import argparse
import os
import sys
import time

TOKENS, HIDDEN, FFN, VOCAB = 512, 512, 2048, 4096
LR = 0.05


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, default=4, help="tensor-parallel size P (default 4)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps after compiling (default 2)")
    p.add_argument("--check", action="store_true",
                   help="also check one sharded step against the same step unsharded")
    return p.parse_args()


ARGS = parse_args()
# XLA reads this when the CPU backend starts, so before jax is imported.
_flag = f"--xla_force_host_platform_device_count={max(ARGS.devices, 1)}"
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

try:  # jax >= 0.6
    from jax import shard_map as _shard_map

    def shard_map(f, mesh, in_specs, out_specs):
        return _shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
except ImportError:  # older jax
    from jax.experimental.shard_map import shard_map as _shard_map

    def shard_map(f, mesh, in_specs, out_specs):
        return _shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)

AXIS = "tp"


# Megatron's conjugate operators f / g (explicit, so the communication is
# exactly Megatron's whatever JAX's own psum transpose rules are).
@jax.custom_vjp
def copy_to(x):  # f: identity forward, all-reduce backward
    return x


copy_to.defvjp(lambda x: (x, None), lambda _, g: (jax.lax.psum(g, AXIS),))


@jax.custom_vjp
def reduce_from(x):  # g: all-reduce forward, identity backward
    return jax.lax.psum(x, AXIS)


reduce_from.defvjp(lambda x: (jax.lax.psum(x, AXIS), None), lambda _, g: (g,))


def gelu(x):
    return jax.nn.gelu(x, approximate=True)  # tanh form, as shaders/elementwise.wgsl


def local_loss(params, ids, targets):
    """One rank's forward; the returned loss is the same on every rank."""
    r = jax.lax.axis_index(AXIS)
    # Vocab-parallel embedding: this rank owns rows [start, start + V/P).
    rows = params["embed"].shape[0]
    start = r * rows
    local = ids - start
    inside = (local >= 0) & (local < rows)
    h = jnp.where(inside[:, None], params["embed"][jnp.clip(local, 0, rows - 1)], 0.0)
    h = reduce_from(h)
    # Column-parallel fc1 (weights [F/P, H], PyTorch layout) + GELU.
    pre = copy_to(h) @ params["fc1_w"].T + params["fc1_b"]
    act = gelu(pre)
    # Row-parallel fc2 (weights [H, F/P]); bias added after the reduction.
    h2 = reduce_from(act @ params["fc2_w"].T) + params["fc2_b"]
    # Column-parallel head, vocab-sharded logits [T, V/P].
    logits = copy_to(h2) @ params["head_w"].T
    # Vocab-parallel cross-entropy (Megatron): loss = ln S + m − z[t].
    vrows = logits.shape[1]
    m = jax.lax.pmax(jax.lax.stop_gradient(logits).max(axis=1), AXIS)
    sum_exp = reduce_from(jnp.exp(logits - m[:, None]).sum(axis=1))
    t = targets - r * vrows
    owns = (t >= 0) & (t < vrows)
    z_t = jnp.take_along_axis(logits, jnp.clip(t, 0, vrows - 1)[:, None], axis=1)[:, 0]
    pred = reduce_from(jnp.where(owns, z_t, 0.0))
    return jnp.mean(jnp.log(sum_exp) + m - pred)


SPECS = {
    "embed": P(AXIS, None),
    "fc1_w": P(AXIS, None),
    "fc1_b": P(AXIS),
    "fc2_w": P(None, AXIS),
    "fc2_b": P(),
    "head_w": P(AXIS, None),
}


def rank_step(params, ids, targets):
    loss, grads = jax.value_and_grad(local_loss)(params, ids, targets)
    new = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
    return new, loss


def make_step(mesh):
    f = shard_map(rank_step, mesh, in_specs=(SPECS, P(), P()), out_specs=(SPECS, P()))
    return jax.jit(f, donate_argnums=0)


def master_params(seed=7):
    rng = np.random.default_rng(seed)
    n = lambda *s: (0.02 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    return {
        "embed": n(VOCAB, HIDDEN),
        "fc1_w": n(FFN, HIDDEN),
        "fc1_b": np.zeros(FFN, np.float32),
        "fc2_w": n(HIDDEN, FFN),
        "fc2_b": np.zeros(HIDDEN, np.float32),
        "head_w": n(VOCAB, HIDDEN),
    }


def batch():
    """The step bench's fixed LCG batch (benches/step.rs `data()`)."""
    s, mask = 0x2545_F491_4F6C_DD1D, (1 << 64) - 1
    out = []
    for _ in range(2 * TOKENS):
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        out.append((s >> 33) % VOCAB)
    a = np.array(out, np.int32)
    return a[:TOKENS], a[TOKENS:]


def serial_step(params, ids, targets):
    """The same step with no sharding, for --check."""

    def loss_fn(p):
        h = p["embed"][ids]
        h2 = gelu(h @ p["fc1_w"].T + p["fc1_b"]) @ p["fc2_w"].T + p["fc2_b"]
        logits = h2 @ p["head_w"].T
        lse = jax.nn.logsumexp(logits, axis=1)
        return jnp.mean(lse - jnp.take_along_axis(logits, targets[:, None], axis=1)[:, 0])

    loss, g = jax.value_and_grad(loss_fn)(params)
    return jax.tree_util.tree_map(lambda a, b: a - LR * b, params, g), loss


def main():
    p = ARGS.devices
    devs = jax.devices("cpu")
    if len(devs) < p:
        sys.exit(f"only {len(devs)} CPU devices; XLA_FLAGS={os.environ.get('XLA_FLAGS')}")
    for d in (VOCAB, FFN):
        assert d % p == 0, f"{d} not divisible by P={p}"
    mesh = Mesh(np.array(devs[:p]), (AXIS,))
    host = master_params()
    ids_np, tg_np = batch()
    ids = jax.device_put(ids_np, NamedSharding(mesh, P()))
    tg = jax.device_put(tg_np, NamedSharding(mesh, P()))
    params = {k: jax.device_put(v, NamedSharding(mesh, SPECS[k])) for k, v in host.items()}
    step = make_step(mesh)

    import jaxlib

    print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}")
    print(f"devices: {p} of {len(devs)} ({devs[0].platform}), os.cpu_count() {os.cpu_count()}, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}")
    print(f"step: tokens {TOKENS}, hidden {HIDDEN}, ffn {FFN}, vocab {VOCAB}; "
          f"forward + backward + SGD; P={p}; {ARGS.steps} timed steps")

    if ARGS.check:
        ref_p, ref_loss = jax.jit(serial_step)({k: jnp.asarray(v) for k, v in host.items()},
                                              jnp.asarray(ids_np), jnp.asarray(tg_np))
        new_p, loss = make_step(mesh)(
            {k: jax.device_put(v, NamedSharding(mesh, SPECS[k])) for k, v in host.items()}, ids, tg)
        err = max(float(jnp.max(jnp.abs(np.asarray(new_p[k]) - np.asarray(ref_p[k])))) for k in host)
        dl = abs(float(loss) - float(ref_loss))
        print(f"check: loss {float(loss):.6f} vs unsharded {float(ref_loss):.6f} (|Δ| {dl:.2e}); "
              f"max |Δ| of updated params {err:.2e}")
        if not (dl < 1e-4 and err < 1e-5):
            sys.exit("check failed")

    t0 = time.perf_counter()
    params, loss = step(params, ids, tg)
    jax.block_until_ready((params, loss))
    print(f"compile + first step: {(time.perf_counter() - t0) * 1e3:.0f} ms; loss {float(loss):.4f}")
    for _ in range(ARGS.warmup):
        params, loss = step(params, ids, tg)
        jax.block_until_ready((params, loss))
    times = []
    cpu0 = time.process_time()  # all threads: XLA's workers included
    for _ in range(ARGS.steps):
        t = time.perf_counter()
        params, loss = step(params, ids, tg)
        jax.block_until_ready((params, loss))
        times.append(time.perf_counter() - t)
    cores = (time.process_time() - cpu0) / sum(times)
    times.sort()
    best, median = times[0] * 1e3, times[len(times) // 2] * 1e3
    try:
        load = " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        load = "?"
    print(f"loss after {ARGS.warmup + ARGS.steps + 1} steps: {float(loss):.4f}; load {load}")
    print(f"P={p}: best {best:.1f} ms/step, median {median:.1f} ms/step; "
          f"cores busy {cores:.2f} of {os.cpu_count()}")


if __name__ == "__main__":
    main()
