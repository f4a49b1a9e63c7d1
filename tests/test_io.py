"""Matrix Market read/write round trips and collective errors."""

import os

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, DistVector, Layout, block_ranges, gallery, io
from mpitest import (assert_collective, assert_equal_collective,
                     assert_raises_collective, on_rank0)

COMM = MPI.COMM_WORLD


def write_text(path, text):
    on_rank0(COMM, lambda: open(path, "w").write(text))


def assert_exact(A, B):
    A, B = sp.csr_matrix(A), sp.csr_matrix(B)
    A.sort_indices()
    B.sort_indices()
    assert_collective(COMM, A.shape == B.shape, "shape %s != %s" % (A.shape, B.shape))
    assert_equal_collective(A.indptr, B.indptr)
    assert_equal_collective(A.indices, B.indices)
    assert_equal_collective(A.data, B.data)
    assert_collective(COMM, A.dtype == B.dtype, "dtype %s != %s" % (A.dtype, B.dtype))


@pytest.mark.parametrize("name, n", [("random_spd", 13), ("convdiff2d", 4),
                                     ("anisotropic2d", 5), ("poisson1d", 7)])
def test_matrix_round_trip_exact(shared_tmp_path, name, n):
    path = os.path.join(shared_tmp_path, name + ".mtx")
    A = gallery.PROBLEMS[name](n, COMM)
    io.write_matrix(path, A, comment="written by dmsolve\nsecond line")
    B = io.read_matrix(path, COMM)
    assert_exact(B.to_scipy(), A.to_scipy())
    assert_collective(COMM, B.row_layout == A.row_layout)
    # scipy reads what we write, bit for bit
    assert_exact(sp.csr_matrix(scipy.io.mmread(path)), A.to_scipy())


def test_read_scipy_written_files(shared_tmp_path):
    rng = np.random.default_rng(0)
    M = sp.random(13, 7, density=0.3, random_state=1, format="csr")  # rectangular
    S = gallery.random_spd(13, MPI.COMM_SELF, density=0.3).to_scipy()
    K = sp.tril(S, -1) - sp.tril(S, -1).T  # skew-symmetric
    D = rng.standard_normal((7, 4))
    I = sp.random(9, 9, density=0.3, random_state=2, format="csr")
    I.data = np.round(I.data * 100)
    I = I.astype(np.int64)
    Z = (sp.random(6, 6, density=0.4, random_state=3) * (1 + 2j)).tocsr()
    H = (Z + Z.conj().T).tocsr()
    cases = {"rect.mtx": (M, {}), "sym.mtx": (S, {"symmetry": "symmetric"}),
             "skew.mtx": (K.tocsr(), {"symmetry": "skew-symmetric"}),
             "dense.mtx": (D, {}), "dense_sym.mtx": (S.toarray(), {"symmetry": "symmetric"}),
             "int.mtx": (I, {"field": "integer"}), "herm.mtx": (H, {"symmetry": "hermitian"}),
             "pattern.mtx": (M, {"field": "pattern"})}
    for fname, (mat, opts) in cases.items():
        path = os.path.join(shared_tmp_path, fname)
        on_rank0(COMM, scipy.io.mmwrite, path, mat, **opts)
        A = io.read_matrix(path, COMM).to_scipy()
        ref = sp.csr_matrix(scipy.io.mmread(path))
        if opts.get("field") == "integer":
            ref = ref.astype(np.float64)  # DistCSR stores integer files as float64
        assert_exact(A, ref)
        if opts.get("field") == "pattern":
            assert_equal_collective(A.toarray(), (M.toarray() != 0).astype(float))


def test_read_with_layout_and_empty_rank(shared_tmp_path):
    path = os.path.join(shared_tmp_path, "m.mtx")
    A = gallery.poisson2d(4, COMM)
    io.write_matrix(path, A)
    # the last rank owns nothing, rank 0 the rest
    if COMM.size == 1:
        ranges = [0, 16]
    else:
        ranges = list(block_ranges(16, COMM.size - 1)) + [16]
    layout = Layout(ranges, COMM)
    if COMM.size == 1:
        want = 16
    elif COMM.rank == COMM.size - 1:
        want = 0
    else:
        want = int(np.diff(block_ranges(16, COMM.size - 1))[COMM.rank])
    assert_collective(COMM, layout.local_size == want,
                      "rank %d owns %d rows, not %d" % (COMM.rank, layout.local_size, want))
    B = io.read_matrix(path, COMM, layout=layout)
    assert_collective(COMM, B.row_layout == layout)
    assert_exact(B.to_scipy(), A.to_scipy())


def test_compressed_file(shared_tmp_path):
    path = os.path.join(shared_tmp_path, "sym.mtx.gz")
    S = gallery.random_spd(13, MPI.COMM_SELF, density=0.3).to_scipy()

    def write():
        import gzip
        raw = os.path.join(shared_tmp_path, "plain.mtx")
        scipy.io.mmwrite(raw, S, symmetry="symmetric")
        with open(raw, "rb") as f, gzip.open(path, "wb") as g:
            g.write(f.read())
    on_rank0(COMM, write)
    assert_exact(io.read_matrix(path, COMM).to_scipy(), S)


@pytest.mark.parametrize("n", [1, 7, 13])
def test_vector_round_trip_exact(shared_tmp_path, n):
    path = os.path.join(shared_tmp_path, "x%d.mtx" % n)
    A = gallery.poisson1d(n, COMM)
    x = gallery.rhs(A, kind="random", seed=4)
    x.local *= 1e-7  # awkward values still round-trip with %.17g
    io.write_vector(path, x)
    y = io.read_vector(path, COMM)
    assert_equal_collective(y.gather(), x.gather())
    assert_equal_collective(np.asarray(scipy.io.mmread(path)).ravel(), x.gather())


def test_vector_integer_and_complex(shared_tmp_path):
    layout = Layout.block(7, COMM)
    idx = np.arange(layout.start, layout.stop)
    for name, local in (("i.mtx", idx * 3 - 5), ("c.mtx", idx * (0.5 - 1.25j))):
        path = os.path.join(shared_tmp_path, name)
        x = DistVector(layout, local)
        io.write_vector(path, x)
        y = io.read_vector(path, COMM, layout=layout)
        assert_equal_collective(y.gather(), x.gather())
        assert_collective(COMM, y.dtype == x.dtype, "%s != %s" % (y.dtype, x.dtype))


def test_read_vector_from_coordinate_file(shared_tmp_path):
    path = os.path.join(shared_tmp_path, "sparsevec.mtx")
    write_text(path, "%%MatrixMarket matrix coordinate real general\n"
                     "% a sparse vector\n9 1 3\n2 1 1.5\n9 1 -2\n5 1 4\n")
    x = io.read_vector(path, COMM).gather()
    ref = np.zeros(9)
    ref[[1, 8, 4]] = [1.5, -2, 4]
    assert_equal_collective(x, ref)


def test_complex_matrix_round_trip(shared_tmp_path):
    path = os.path.join(shared_tmp_path, "z.mtx")
    Z = (sp.random(7, 7, density=0.4, random_state=5) * (1 - 3j)).tocsr()
    A = DistCSR.from_global(Z, COMM)
    io.write_matrix(path, A)
    assert_exact(io.read_matrix(path, COMM).to_scipy(), A.to_scipy())


MALFORMED = {
    "banner.mtx": "%%NotMatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n",
    "size.mtx": "%%MatrixMarket matrix coordinate real general\n2 two 1\n1 1 1.0\n",
    "count.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 4\n1 1 1.0\n2 2 1.0\n",
    "range.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n4 2 1.0\n",
    "token.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 2 abc\n",
    "columns.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1\n2 2\n",
    "empty.mtx": "",
    "nosize.mtx": "%%MatrixMarket matrix coordinate real general\n% only comments\n",
    "rectsym.mtx": "%%MatrixMarket matrix coordinate real symmetric\n3 2 1\n1 1 1.0\n",
}


@pytest.mark.parametrize("fname", sorted(MALFORMED))
def test_malformed_file_raises_value_error_everywhere(shared_tmp_path, fname):
    path = os.path.join(shared_tmp_path, fname)
    write_text(path, MALFORMED[fname])
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM)


def test_missing_file_raises_os_error_everywhere(shared_tmp_path):
    path = os.path.join(shared_tmp_path, "does-not-exist.mtx")
    assert_raises_collective(COMM, OSError, io.read_matrix, path, COMM)
    assert_raises_collective(COMM, OSError, io.read_vector, path, COMM)


def test_unwritable_path_raises_os_error_everywhere(shared_tmp_path):
    A = gallery.poisson1d(5, COMM)
    path = os.path.join(shared_tmp_path, "no", "such", "dir", "a.mtx")
    assert_raises_collective(COMM, OSError, io.write_matrix, path, A)


def test_wrong_layout_or_shape_raises(shared_tmp_path):
    path = os.path.join(shared_tmp_path, "p.mtx")
    io.write_matrix(path, gallery.poisson2d(3, COMM))
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             layout=Layout.block(8, COMM))
    assert_raises_collective(COMM, ValueError, io.read_vector, path, COMM)


def test_mminfo_everywhere(shared_tmp_path):
    path = os.path.join(shared_tmp_path, "info.mtx")
    io.write_matrix(path, gallery.poisson1d(7, COMM))
    info = io.mminfo(path, COMM)
    assert_collective(COMM, info == {"format": "coordinate", "field": "real",
                                     "symmetry": "general", "shape": (7, 7), "entries": 19},
                      str(info))
