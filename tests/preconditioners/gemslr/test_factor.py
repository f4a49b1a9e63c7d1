"""GeMSLR's factorisations: a huge row fill limit builds, and a singular
subdomain names the global row."""

import numpy as np
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR
from mpitest import assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


def test_gemslr_huge_row_fill_limit_builds():
    """A huge ILUT row fill limit builds."""
    A = gallery.shifted_laplacian(6, COMM, shift=0.1, ny=5, nz=7)
    M = preconditioners.make("gemslr", A, nlev=2, ncomp=2, ilu_max_row_nnz=10 ** 12)
    d = M.describe()
    assert_collective(COMM, d["fill_ilu"] > 0 and np.all(np.isfinite(M(gallery.rhs(A)).local)),
                      "gemslr with ilu_max_row_nnz=1e12: %s" % d["fill_ilu"])


def test_gemslr_singular_subdomain_names_the_global_row():
    """A singular subdomain block is refused naming its global row."""
    # an empty row in a subdomain block: its original global id is named
    K = gallery.shifted_laplacian(6, MPI.COMM_SELF, shift=0.1, ny=5, nz=7).to_scipy().tolil()
    K[0, :] = 0.0
    K[:, 0] = 0.0
    K = K.tocsr()
    K.eliminate_zeros()
    A = DistCSR.from_global(K, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "gemslr", A, nlev=2,
                             ncomp=2, match=r"gemslr: .* at global (row|column) 0\b")
