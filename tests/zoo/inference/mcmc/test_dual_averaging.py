"""The one dual averaging: Pyro's DualAveraging on floats, and the same numbers on tensors."""

from __future__ import annotations

import math

import numpy as np
import torch
from pyro.ops.dual_averaging import DualAveraging as PyroDualAveraging

from zoo.inference.mcmc.dual_averaging import dual_averaging, exp, log


def test_floats_match_pyro_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    mu = math.log(10 * 0.3)
    ours, pyro = dual_averaging(), PyroDualAveraging(prox_center=mu)
    st = ours.init(mu)
    for a in rng.uniform(size=300):
        st = ours.update(st, 0.8 - float(a))
        pyro.step(0.8 - float(a))
        x, x_avg = pyro.get_state()
        assert (st.x, st.x_avg) == (x, x_avg)
    assert ours.final(st) == pyro.get_state()[1]


def test_tensors_give_the_floats_of_each_chain() -> None:
    rng = np.random.default_rng(1)
    mus = [math.log(10 * e) for e in (0.1, 1.0, 3.0)]
    da = dual_averaging()
    st = da.init(torch.tensor(mus, dtype=torch.float64))
    sts = [da.init(m) for m in mus]
    for _ in range(50):
        h = rng.uniform(-0.5, 0.5, size=3)
        st = da.update(st, torch.from_numpy(h))
        sts = [da.update(s, float(v)) for s, v in zip(sts, h, strict=True)]
    assert st.x.tolist() == [s.x for s in sts]
    assert da.final(st).tolist() == [da.final(s) for s in sts]
    assert exp(st.x).tolist() == [math.exp(s.x) for s in sts]
    assert log(exp(st.x)).tolist() == [math.log(math.exp(s.x)) for s in sts]


def test_keep_finite_keeps_the_last_finite_iterate() -> None:
    da = dual_averaging(keep_finite=True)
    st = da.update(da.init(0.0, -1.0, -1.0), math.inf)
    assert st.x == -1.0 and st.step == 1
    assert da.final(da.init(0.0, -2.0, 5.0)) == -2.0  # before any update: the iterate
