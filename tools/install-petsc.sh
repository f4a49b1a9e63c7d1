#!/usr/bin/env bash
# Install the optional [petsc] extra (PETSc + petsc4py built from PyPI sources) into a venv.
#
# Usage: tools/install-petsc.sh VENV
#
# PETSc is built against the MPI that mpi4py uses (the `mpich` wheel's mpicc in VENV/bin) and the
# system OpenBLAS.  The two pip installs must be separate commands: in one command petsc4py's build
# runs before PETSc is installed and fails with "PETSc not found".  The first build takes about
# 20 minutes on 2 cores; pip caches the wheels, so later installs take seconds.
set -euo pipefail
VENV=${1:-.venv}
PY="$VENV/bin/python"

if ! dpkg -s libopenblas-dev patchelf >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libopenblas-dev patchelf
fi
# libopenblas-dev depends on a variant package (pthread/openmp/serial) that holds the .so.
BLAS=$(dpkg -L libopenblas-dev libopenblas-pthread-dev libopenblas-openmp-dev libopenblas-serial-dev \
       2>/dev/null | grep 'libopenblas.so$' | head -n 1 || true)
[ -n "$BLAS" ] || BLAS=$(ls /usr/lib/*-linux-gnu/libopenblas.so | head -n 1)
echo "install-petsc: OpenBLAS at $BLAS"

export PATH="$(cd "$VENV/bin" && pwd):$PATH"   # mpicc/mpicxx from the mpich wheel
export PETSC_CONFIGURE_OPTIONS="--with-fc=0 --with-cuda=0 --with-hip=0 --with-sycl=0 --with-x=0 \
--with-blaslapack-lib=$BLAS COPTFLAGS=-O2 CXXOPTFLAGS=-O2"

"$PY" -m pip install -q numpy setuptools wheel cython
"$PY" -m pip install --no-build-isolation petsc
"$PY" -m pip install --no-build-isolation petsc4py
# A wheel from pip's cache may have been built in another venv: its run path then names
# that venv's lib/ (where the mpich wheel puts libmpi.so.12). Add this venv's lib/.
MPILIB=$(cd "$VENV/lib" && pwd)
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
for so in "$SITE"/petsc/lib/libpetsc.so.* "$SITE"/petsc4py/lib/PETSc*.so; do
    [ -f "$so" ] && [ ! -L "$so" ] || continue
    RP=$(patchelf --print-rpath "$so")
    case ":$RP:" in *":$MPILIB:"*) ;; *) patchelf --set-rpath "${RP:+$RP:}$MPILIB" "$so" ;; esac
done
"$PY" -c "from petsc4py import PETSc; print('install-petsc: PETSc', PETSc.Sys.getVersion())"
