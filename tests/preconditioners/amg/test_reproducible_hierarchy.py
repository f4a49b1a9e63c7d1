"""The reproducible hierarchy's stages (``preconditioners/amg/reproducible.py``):
the independent set's compiled decision step against its definition with numpy
masks, and the Galerkin product against scipy's ``R A P`` on the gathered matrices."""

import numpy as np
import pytest

import dmsolve.gallery as gallery
import preconditioners
from mpitest import Checks
from preconditioners.amg._repro_kernels import mis2_decide
from preconditioners.amg.reproducible import KEY_LIMIT


@pytest.mark.parametrize("seed", range(3))
def test_mis2_decide_is_the_masks(comm, seed):
    """mis2_decide joins an undecided row whose value is the distance-2 maximum,
    drops one with a member within distance 2, and counts the rest."""
    rng = np.random.default_rng(seed)
    n = 1000
    limit = float(KEY_LIMIT)
    state = rng.integers(0, 3, n)
    prio = rng.integers(0, 1 << 20, n).astype(np.float64)
    key = state * limit + prio
    # m2: the row's own value, a larger undecided one, or a member's
    m2 = np.where(rng.random(n) < 0.4, key,
                  np.where(rng.random(n) < 0.5, limit + prio + 1, 2 * limit + prio))
    want = state.copy()
    und = state == 1
    want[und & (m2 == key)] = 2
    want[und & (m2 != key) & (m2 >= 2 * limit)] = 0
    got = state.copy()
    left = mis2_decide(got, prio, m2, limit)
    with Checks(comm) as checks:
        checks.add(np.array_equal(got, want), "states")
        checks.add(left == int((want == 1).sum()), "left", (left, int((want == 1).sum())))


@pytest.mark.parametrize("problem,n", [("poisson2d", 61), ("poisson3d", 13)])
def test_galerkin_is_r_a_p(comm, problem, n):
    """Each coarse operator of amg(reproducible=True) is R A P of its level, with
    R = P^T, to rounding (the gathered matrices against scipy)."""
    A = gallery.PROBLEMS[problem](n, comm)
    M = preconditioners.make("amg", A, reproducible=True)
    ops = [L.A for L in M.levels] + [M.coarse_A]
    with Checks(comm) as checks:
        checks.add(len(M.levels) >= 1, "levels")
        for k, L in enumerate(M.levels):
            Af, P, R, Ac = (m.to_scipy() for m in (ops[k], L.P.P, L.P.R, ops[k + 1]))
            checks.add(abs(R - P.T).max() == 0, "R = P^T, level %d" % k)
            ref = (P.T @ Af @ P).toarray()
            err = np.abs(Ac.toarray() - ref).max()
            checks.add(err <= 1e-12 * np.abs(ref).max(), "R A P, level %d" % k, err)
