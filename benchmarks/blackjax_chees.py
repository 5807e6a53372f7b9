"""BlackJAX's ChEES-HMC (and MCLMC), the peer that ``benchmarks/chees.py --blackjax PYTHON``
and ``benchmarks/crosscheck.py --peers PYTHON`` run in the peers' venv.

Never imported by the project (it needs jax, optax and blackjax, which the project's venv
does not have): the benchmarks start it as ``PYTHON benchmarks/blackjax_chees.py IN.npz
CFG`` and keep it running (``benchmarks/_paired.py``'s ``PeerServer``): each line ``SEED
OUT`` on its stdin runs the sampler once with PRNG key ``SEED``, writes ``OUT.npz`` and
prints ``done``. ``IN.npz`` holds the target (``prec`` and ``starts`` for a Gaussian
:math:`U(z) = z^\\top P z / 2`; ``x``, ``y`` and ``init0..`` for the ReLU network with a
categorical likelihood and Normal priors of ``benchmarks/nuts.py``, over the flat vector
of its sites in order, as BlackJAX's ChEES adaptation needs ``(C, D)`` positions); ``CFG`` is JSON:

- ``kind``: ``"gaussian"`` or ``"bnn"``; ``x64``: float64 (the Gaussian) or float32;
- ``mode``: ``"adapt"`` runs ``blackjax.chees_adaptation`` for ``warmup`` iterations (Adam
  on the trajectory length, rate ``lr``; identity mass matrix, BlackJAX's default) and then
  ``draws`` transitions of ``blackjax.dynamic_hmc`` with the adapted parameters;
  ``"fixed"`` runs ``draws`` transitions of the same kernel at step size ``step_size``
  with :math:`\\lceil u_t L\\rceil` steps (``u_t`` the Halton sequence, ``L`` =
  ``leapfrog``), identity mass matrix: the per-step cost with no adaptation;
  ``"mclmc"`` runs BlackJAX's ``mclmc_find_L_and_step_size`` (diagonal preconditioning,
  ``num_steps = 3 * warmup`` so that its three tuning windows take about ``warmup`` steps)
  per chain, vmapped over the chains, then ``draws`` steps of the tuned ``mclmc`` kernel;
- ``chains``, ``target_accept``, ``max_leapfrog``.

The whole run is one ``jax.jit`` (the data its arguments, not constants folded at compile
time), compiled in the first run and reused by later ones; each run is timed in process CPU
seconds. ``OUT.npz``: ``flat`` ``(C, draws, D)``, ``cpu``, ``steps`` (gradients of one chain
over the whole run; every ChEES chain takes the same number) and ``draw_steps`` (those of
the draws alone; MCLMC counts two per step).
"""

import json
import sys
import time

import jax
import numpy as np

cfg = json.loads(sys.argv[2])
if cfg.get("x64"):
    jax.config.update("jax_enable_x64", True)
import blackjax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from blackjax.mcmc import dynamic_hmc  # noqa: E402

data = np.load(sys.argv[1])
C = cfg["chains"]
if cfg["kind"] == "gaussian":
    args = (jnp.asarray(data["prec"]),)

    def target(prec):
        return lambda z: -0.5 * z @ (prec @ z)

    positions = jnp.asarray(data["starts"])

else:
    names, shapes, priors = cfg["names"], cfg["shapes"], cfg["priors"]
    args = (jnp.asarray(data["x"]), jnp.asarray(data["y"]).astype(jnp.int32))
    depth = len(names) // 2 - 1
    sizes = [int(np.prod(shapes[n])) for n in names]
    offsets = np.cumsum([0, *sizes])

    def target(x, y):
        def logdensity(z):  # BlackJAX's ChEES adaptation wants flat (C, D) positions
            p = {n: z[offsets[i] : offsets[i + 1]].reshape(shapes[n]) for i, n in enumerate(names)}
            lp = sum(jnp.sum(-0.5 * ((p[n] - priors[n][0]) / priors[n][1]) ** 2) for n in names)
            h = x
            for i in range(depth + 1):
                h = h @ p[f"layer{i}.weight"].T + p[f"layer{i}.bias"]
                h = jax.nn.relu(h) if i < depth else h
            return lp + jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], 1).sum()

        return logdensity

    flat0 = np.concatenate([data[f"init{i}"].reshape(-1) for i in range(len(names))])
    positions = jnp.broadcast_to(jnp.asarray(flat0), (C, flat0.size))


def draw(kernel, states, key, n):
    def one(st, k):
        st, info = jax.vmap(kernel.step)(jax.random.split(k, C), st)
        return st, (st.position, info.num_integration_steps[0])

    _, (pos, steps) = jax.lax.scan(one, states, jax.random.split(key, n))
    return jnp.swapaxes(pos, 0, 1), steps.sum()


def mclmc(logdensity, key):
    """BlackJAX's MCLMC tuning per chain, then ``draws`` steps: ``(flat, steps, draw_steps)``."""
    kernel = blackjax.mcmc.mclmc.build_kernel()

    def one(z, key):
        k1, k2, k3 = jax.random.split(key, 3)
        st = blackjax.mcmc.mclmc.init(z, logdensity, k1)
        st, params, _ = blackjax.mclmc_find_L_and_step_size(
            mclmc_kernel=kernel,
            num_steps=3 * cfg["warmup"],
            state=st,
            rng_key=k2,
            logdensity_fn=logdensity,
            diagonal_preconditioning=True,
        )
        alg = blackjax.mclmc(
            logdensity,
            L=params.L,
            step_size=params.step_size,
            inverse_mass_matrix=params.inverse_mass_matrix,
        )

        def step(s, k):
            s, _ = alg.step(k, s)
            return s, s.position

        return jax.lax.scan(step, st, jax.random.split(k3, cfg["draws"]))[1]

    flat = jax.vmap(one)(positions, jax.random.split(key, C))
    return flat, 2 * (3 * cfg["warmup"] + cfg["draws"]), 2 * cfg["draws"]


def run(key, *args):  # the data are arguments, not constants XLA would fold at compile time
    logdensity = target(*args)
    if cfg["mode"] == "mclmc":
        return mclmc(logdensity, key)
    kw, ks = jax.random.split(key)
    if cfg["mode"] == "fixed":
        bits = int(np.ceil(np.log2(cfg["draws"] + 1))) + 1
        kernel = blackjax.dynamic_hmc(
            logdensity,
            step_size=cfg["step_size"],
            inverse_mass_matrix=jnp.ones(positions.shape[1]),
            next_random_arg_fn=lambda i: i + 1,
            integration_steps_fn=lambda i, n: jnp.asarray(
                jnp.ceil(dynamic_hmc.halton_sequence(i, bits) * n), dtype=int
            ),
            integration_steps_params=(float(cfg["leapfrog"]),),
        )
        states = jax.vmap(lambda p: dynamic_hmc.init(p, logdensity, 0))(positions)
        flat, steps = draw(kernel, states, ks, cfg["draws"])
        return flat, steps, steps
    warm = blackjax.chees_adaptation(
        logdensity,
        C,
        target_acceptance_rate=cfg["target_accept"],
        max_leapfrog_steps=cfg["max_leapfrog"],
    )
    (states, params), info = warm.run(
        kw,
        positions,
        cfg["step_size"],
        optax.adam(cfg["lr"]),
        cfg["warmup"],
        max_sampling_steps=cfg["draws"],
    )
    flat, steps = draw(blackjax.dynamic_hmc(logdensity, **params), states, ks, cfg["draws"])
    return flat, steps + info.info.num_integration_steps[:, 0].sum(), steps


f = jax.jit(run)
for line in sys.stdin:  # one run per line ``SEED OUT``: the first compiles, later ones reuse
    seed, out = line.split()
    t0 = time.process_time()
    flat, steps, draw_steps = jax.block_until_ready(f(jax.random.PRNGKey(int(seed)), *args))
    cpu = time.process_time() - t0
    np.savez(out, flat=np.asarray(flat), cpu=cpu, steps=int(steps), draw_steps=int(draw_steps))
    print("done", flush=True)
