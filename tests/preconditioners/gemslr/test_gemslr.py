"""GeMSLR (multilevel Schur low-rank) as a preconditioner against a serial
scipy reference built from the same ordering: the block LDU with ILUT, the
low-rank corrections, the interface, errors on every rank, progress, and
parGeMSLR's operator at 32^3 whose low-rank correction cuts iterations."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.linalg import spilu

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR, DistVector
from dmsolve.krylov import fgmres
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_raises_collective, same_on_all_ranks)

COMM = MPI.COMM_WORLD
GEMSLR = dict(nlev=3, ncomp=4, ilu_droptol=1e-3, ilu_max_row_nnz=50)


# -- GeMSLR progress --------------------------------------------------------------------

def test_gemslr_progress_reports_each_stage_and_level_as_describe_does():
    """progress reports each stage and level as describe() does."""
    A = gallery.shifted_laplacian(11, COMM, shift=0.2, ny=9, nz=13)
    seen = []
    M = preconditioners.make("gemslr", A, progress=lambda t, m, s: seen.append((t, m, s)),
                             **GEMSLR)
    d = M.describe()
    h = d["hierarchy"]
    want = ["order: %d levels, %d subdomains per level" % (d["nlev"], d["ncomp"])]
    want += ["level %d: %d rows, %d subdomains, %d interior, %d interface"
             % (L["level"], L["rows"], L["subdomains"], L["interior"], L["interface"])
             for L in h[:-1]]
    want.append("level %d (last): %d rows" % (h[-1]["level"], h[-1]["rows"]))
    want.append("factor: %d ILUT nonzeros, %.3f of nnz(A)"
                % (round(d["fill_ilu"] * A.global_nnz()), d["fill_ilu"]))
    want += ["low rank level %d: rank %d, %d converged, %d restarts, %d Arnoldi steps"
             % (L["level"], L["rank"], L["converged"], L["restarts"], L["arnoldi_steps"])
             for L in reversed(h[:-1])]
    want.append("done: %d levels" % d["nlev"])
    messages = [m for _, m, _ in seen]
    seconds = [s for _, _, s in seen]
    with Checks(COMM) as checks:
        checks.add(messages == want, "reports", (messages, want))
        checks.add(all(t == "gemslr" for t, _, _ in seen), "task")
        checks.add(all(b >= a >= 0 for a, b in zip(seconds, seconds[1:])), "seconds", seconds)
    assert_collective(COMM, same_on_all_ranks(COMM, messages), "the same reports on every rank")


SMALL = dict(nlev=3, ncomp=4, ilu_droptol=1e-3, ilu_max_row_nnz=50)


def _small(shift=0.2, comm=COMM):
    # 11 x 9 x 13 = 1287 rows: no rank count divides it evenly
    return gallery.shifted_laplacian(11, comm, shift=shift, ny=9, nz=13)


# -- serial reference: the multilevel block LDU with scipy's ILUT -----------------------

class SerialGeMSLR:
    """The same preconditioner built serially with scipy from the ordering:
    ``A_l = [B F; E C]`` with ``B`` factored per subdomain by ``spilu``, the last
    level by ``spilu``, and optional corrections ``x_C += W^T H W x_C``."""

    def __init__(self, A, levels, last, droptol, max_row_nnz, corrections=None):
        self.A = sp.csr_matrix(A)
        self.L = len(levels)
        self.I = [np.concatenate(subs) for subs in levels]
        self.N = [np.concatenate(self.I[l:] + [last]) for l in range(self.L + 1)]

        def ilut(M):
            M = sp.csr_matrix(M)
            ff = max(1.0, max_row_nnz / max(M.nnz / M.shape[0], 1.0))
            return spilu(sp.csc_matrix(M), drop_tol=droptol, fill_factor=ff)

        A = self.A
        self.subs = [[ids.size for ids in subs if ids.size] for subs in levels]
        self.lu = [[ilut(A[ids][:, ids]) for ids in subs if ids.size] for subs in levels]
        self.E = [A[self.N[l + 1]][:, self.I[l]] for l in range(self.L)]
        self.F = [A[self.I[l]][:, self.N[l + 1]] for l in range(self.L)]
        self.C = [A[self.N[l + 1]][:, self.N[l + 1]] for l in range(self.L)]
        self.last = ilut(A[last][:, last])
        self.corr = corrections or [None] * self.L

    def binv(self, l, x):
        out, s = np.empty_like(x), 0
        for size, lu in zip(self.subs[l], self.lu[l]):
            out[s:s + size] = lu.solve(x[s:s + size])
            s += size
        return out

    def solve(self, l, x):
        if l == self.L:
            return self.last.solve(x)
        nB = self.I[l].size
        zB = self.binv(l, x[:nB])
        xC = x[nB:] - self.E[l] @ zB
        if self.corr[l] is not None:
            W, H = self.corr[l]
            xC = xC + W.T @ (H @ (W @ xC))
        yC = self.solve(l + 1, xC)
        return np.concatenate((zB - self.binv(l, self.F[l] @ yC), yC))

    def apply(self, r):
        out = np.empty_like(r)
        out[self.N[0]] = self.solve(0, r[self.N[0]])
        return out

    def g_operator(self, l, v):
        """``(I - S_l M_{l+1}) v`` with the exact ``S_l = C - E B_ILU^{-1} F``."""
        y = self.solve(l + 1, v)
        return v - self.C[l] @ y + self.E[l] @ self.binv(l, self.F[l] @ y)


def _gathered_corrections(M, ref):
    """Every level's ``(W, H)`` in the reference's interface order."""
    out = []
    for l in range(ref.L):
        ids, W, H = M.correction(l)
        all_ids = np.concatenate(COMM.allgather(ids))
        all_W = np.concatenate(COMM.allgather(W), axis=1) if W.shape[0] else \
            np.zeros((0, all_ids.size))
        pos = np.empty(ref.N[l + 1].max() + 1, dtype=np.int64)
        pos[ref.N[l + 1]] = np.arange(ref.N[l + 1].size)
        Wr = np.zeros_like(all_W)
        Wr[:, pos[all_ids]] = all_W
        out.append((Wr, H))
    return out


# -- interface ---------------------------------------------------------------------------

def test_registered_describe_and_apply_contract():
    """gemslr is registered, describes itself, and applies like every preconditioner."""
    assert "gemslr" in preconditioners.available()
    A = _small()
    M = preconditioners.make("gemslr", A, lr_rank=4, **SMALL)
    d = M.describe()
    for key in ("nlev", "hierarchy", "interface_sizes", "ranks_found", "fill", "fill_ilu",
                "setup_seconds"):
        assert key in d
    assert d["name"] == "gemslr" and d["rows"] == A.shape[0]
    levels, _ = M.ordering()
    assert d["nlev"] == len(levels) + 1 == len(d["hierarchy"])
    assert d["interface_sizes"] == [int(M.N[l + 1].global_size) for l in range(len(levels))]
    assert all(0 < k <= 5 for k in d["ranks_found"])          # rank 4, or 5 for a pair
    assert d["fill"] > d["fill_ilu"] > 0
    assert d["setup_seconds"] > 0
    r = gallery.rhs(A, "random")
    r0 = r.local.copy()
    out = DistVector.zeros(A.row_layout)
    y = M.apply(r, out)
    assert y is out
    assert_allclose_collective(r.local, r0, rtol=0)                    # r untouched
    assert_allclose_collective(M(r).local, out.local, rtol=0)          # repeatable
    assert_allclose_collective(M.as_linear_operator().matvec(r).local, out.local, rtol=0)
    assert_allclose_collective(M.apply(r * 3.0).local, 3.0 * out.local, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shift", [0.0, 0.2], ids=["s0", "s0.2"])
def test_no_low_rank_is_the_serial_block_ldu_with_ilut(shift):
    """Without low-rank corrections gemslr is the serial block LDU with ILUT."""
    A = _small(shift)
    M = preconditioners.make("gemslr", A, lr_rank=0, **SMALL)
    assert M.describe()["ranks_found"] == [0, 0]
    ref = SerialGeMSLR(A.to_scipy(), *M.ordering(), SMALL["ilu_droptol"],
                       SMALL["ilu_max_row_nnz"])
    r = gallery.rhs(A, "random")
    want = ref.apply(r.gather())
    got = M.apply(r).gather()
    assert_allclose_collective(got, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
    # fill: the ILUT factors' nonzeros over nnz(A), as scipy counts them
    nnz = sum(lu.L.nnz + lu.U.nnz for lus in ref.lu for lu in lus) + \
        ref.last.L.nnz + ref.last.U.nnz
    assert_allclose_collective(M.describe()["fill_ilu"], nnz / A.global_nnz(), rtol=1e-12)


def test_low_rank_correction_against_serial():
    """The low-rank corrections equal the serial reference's."""
    A = _small(0.2)
    M = preconditioners.make("gemslr", A, lr_rank=4, lr_tol_eig=1e-9, lr_maxits=60, **SMALL)
    d = M.describe()
    ref0 = SerialGeMSLR(A.to_scipy(), *M.ordering(), SMALL["ilu_droptol"],
                        SMALL["ilu_max_row_nnz"])
    corr = _gathered_corrections(M, ref0)
    ref = SerialGeMSLR(A.to_scipy(), *M.ordering(), SMALL["ilu_droptol"],
                       SMALL["ilu_max_row_nnz"], corrections=corr)
    # the apply with the corrections is the reference's
    r = gallery.rhs(A, "random")
    want = ref.apply(r.gather())
    assert_allclose_collective(M.apply(r).gather(), want, rtol=1e-9,
                               atol=1e-11 * np.abs(want).max())
    for l, (W, H) in enumerate(corr):
        info = d["hierarchy"][l]
        k = W.shape[0]
        assert k == info["rank"] >= 4 and info["converged"] == k
        # orthonormal Schur basis
        assert_allclose_collective(W @ W.T, np.eye(k), atol=1e-10)
        # its Ritz values are the k eigenvalues of largest modulus of the dense
        # G_l = I - S_l M_{l+1}, built column by column from the serial reference
        nC = W.shape[1]
        G = np.column_stack([ref.g_operator(l, e) for e in np.eye(nC)])
        lam = np.linalg.eigvals(G)
        lam = lam[np.argsort(-np.abs(lam))][:k]
        ritz = np.asarray(info["eigenvalues"]) @ np.array([1.0, 1j])
        ritz = ritz[np.argsort(-np.abs(ritz))]
        assert_allclose_collective(np.sort_complex(ritz), np.sort_complex(lam),
                                   rtol=1e-6, atol=1e-8)
        # invariant subspace: G W^T = W^T T with T = W G W^T
        T = W @ G @ W.T
        assert_allclose_collective(G @ W.T, W.T @ T, atol=1e-6)
        # H = (I - T)^{-1} - I
        assert_allclose_collective(H, np.linalg.inv(np.eye(k) - T) - np.eye(k), atol=1e-6)


def test_bjacobi_last_level_and_one_level():
    """A block Jacobi last level, and one level, work."""
    A = _small(0.0)
    b = gallery.rhs(A, "random")
    for opts in ({"last_level": "bjacobi"}, {"nlev": 1}):
        o = dict(SMALL, lr_rank=2)
        o.update(opts)
        M = preconditioners.make("gemslr", A, **o)
        x, info = fgmres(A, b, M=M, rtol=1e-8, restart=50, maxiter=200)
        assert_collective(COMM, info.converged, "%s: %s" % (opts, info.reason))
    # one level is an ILUT of the whole matrix: serial spilu
    M = preconditioners.make("gemslr", A, nlev=1, ilu_droptol=1e-2, ilu_max_row_nnz=20)
    assert M.describe()["nlev"] == 1
    ref = SerialGeMSLR(A.to_scipy(), [], M.ordering()[1], 1e-2, 20)
    assert_allclose_collective(M.apply(b).gather(), ref.apply(b.gather()), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("kind,bad,match", [
    (ValueError, {"nlev": 0}, "nlev"), (ValueError, {"ncomp": 0}, "ncomp"),
    (ValueError, {"ilu_droptol": -1.0}, "ilu_droptol"),
    (ValueError, {"ilu_max_row_nnz": 0}, "ilu_max_row_nnz"),
    (ValueError, {"lr_rank": -1}, "lr_rank"), (ValueError, {"lr_tol_eig": 0.0}, "lr_tol_eig"),
    (TypeError, {"lr_maxits": 1.5}, "lr_maxits"), (ValueError, {"last_level": "lu"}, "last_level"),
    (TypeError, {"lr_rank": True}, "lr_rank"), (TypeError, {"ncomp": "4"}, "ncomp"),
    (ValueError, {"lr_arnoldi_factor": float("nan")}, "lr_arnoldi_factor"),
    (ValueError, {"lr_tr_factor": 1.5}, "lr_tr_factor"), (ValueError, {"seed": -1}, "seed"),
    (TypeError, {"last_level": 1}, "last_level"),
], ids=lambda v: v.__name__ if isinstance(v, type) else
    str(v) if isinstance(v, str) else "-".join(v))
def test_bad_options_raise_on_every_rank(kind, bad, match):
    """Each bad option raises on every rank: a wrong type TypeError, out of range ValueError."""
    # through dmsolve.validate: a value of the wrong type is a TypeError, a value
    # out of range a ValueError, on every rank
    A = _small()
    assert_raises_collective(COMM, kind, preconditioners.make, "gemslr", A,
                             match=match, **bad)


def test_errors_agreed_across_ranks():
    """Errors on one rank (an option, a zero pivot) are raised on every rank."""
    A = _small()
    # an option that is wrong on one rank only
    assert_raises_collective(COMM, ValueError, preconditioners.make, "gemslr", A,
                             lr_rank=-1 if COMM.rank == COMM.size - 1 else 4, match="lr_rank")
    assert_raises_collective(COMM, TypeError, preconditioners.make, "gemslr", A, lr_rnak=3)
    # a zero pivot in a subdomain block (a zero row and column in A) is agreed on
    Ag = A.to_scipy().tolil()
    Ag[5, :] = 0
    Ag[:, 5] = 0
    Z = DistCSR.from_global(Ag.tocsr(), COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "gemslr", Z,
                             match="pivot|singular", **SMALL)


# -- targets: parGeMSLR's operator at 32^3 ------------------------------------------------

SHIFTS = (0.0, 0.1, 0.2)


def _fgmres_its(A, maxiter=200, **opts):
    M = preconditioners.make("gemslr", A, **opts)
    b = gallery.rhs(A, "random")
    x, info = fgmres(A, b, M=M, rtol=1e-6, restart=50, maxiter=maxiter)
    return info, M


@pytest.fixture(scope="module")
def serial_its():
    """FGMRES+gemslr iterations at one rank (COMM_SELF) for each shift; the three
    serial runs are shared out over the ranks and the counts allgathered."""
    mine = {}
    for i, s in enumerate(SHIFTS):
        if i % COMM.size == COMM.rank and COMM.size > 1:
            info, _ = _fgmres_its(gallery.shifted_laplacian(32, MPI.COMM_SELF, shift=s))
            mine[s] = info.iterations if info.converged else -1
    out = {}
    for d in COMM.allgather(mine):
        out.update(d)
    return out


@pytest.mark.parametrize("shift", SHIFTS, ids=["s0-large", "s0.1-large", "s0.2-large"])
def test_parGeMSLR_operator_32cubed(shift, serial_its):
    """FGMRES + gemslr on parGeMSLR's operator at 32^3 converges, in at most 30% more
    iterations than at one rank."""
    A = gallery.shifted_laplacian(32, COMM, shift=shift, alpha=(0.01, -0.01, 0.0))
    info, M = _fgmres_its(A)
    assert_collective(COMM, info.converged and info.iterations <= 200,
                      "shift %g: %s after %d iterations" % (shift, info.reason, info.iterations))
    its = info.iterations
    # at most 30% more iterations than at one rank
    one = serial_its.get(shift, its)
    assert_collective(COMM, one > 0, "serial run did not converge")
    assert_collective(COMM, its <= 1.3 * one, "%d iterations at %d ranks, %d at one rank"
                      % (its, COMM.size, one))
    assert M.describe()["ranks_found"][0] > 0


@pytest.mark.parametrize("shift", [0.1, 0.2], ids=["s0.1", "s0.2"])
def test_low_rank_correction_reduces_iterations(shift):
    """Low-rank corrections reduce the iterations."""
    # the 32^3 figures are in bench/bench_gemslr.py; 16^3 keeps this quick
    A = gallery.shifted_laplacian(16, COMM, shift=shift, alpha=(0.01, -0.01, 0.0))
    info, _ = _fgmres_its(A)
    assert_collective(COMM, info.converged, "lr_rank=32: %s" % info.reason)
    # without the correction FGMRES needs more than 1.5 times as many iterations
    info0, _ = _fgmres_its(A, maxiter=int(1.5 * info.iterations), lr_rank=0)
    assert_collective(COMM, not info0.converged, "lr_rank=0 took %d iterations, lr_rank=32 "
                      "took %d" % (info0.iterations, info.iterations))
