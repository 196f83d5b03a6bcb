#!/usr/bin/env bash
# Horovod 0.28.1 with PyTorch, MPI and Gloo into the Python given as PYTHON (default: python3),
# built from its sdist, as Horovod installs on a machine without a prebuilt wheel for it (PyPI
# has none for Linux). Its CMake files ask for C++14; torch 2.x's headers need C++17, so the
# build is told C++17. The wheel is kept in WHEELS (default ~/.cache/ringleader/wheels): the
# first build takes 15-30 minutes on 2 cores, later installs seconds. Needs cmake, a C++
# compiler, Open MPI (mpicxx) and torch already in that Python.
set -euo pipefail
py=${PYTHON:-python3}
wheels=${WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/ringleader/wheels}
version=0.28.1
if "$py" -c "import horovod.torch" 2>/dev/null; then
  echo "horovod $version already installed in $py"
  exit 0
fi
for tool in cmake c++ mpicxx; do
  command -v "$tool" >/dev/null || { echo "error: building Horovod needs $tool: apt-get install cmake g++ libopenmpi-dev" >&2; exit 1; }
done
"$py" -c "import torch" 2>/dev/null || { echo "error: torch must be installed in $py before Horovod (make setup)" >&2; exit 1; }
torch=$("$py" -c "import torch; print(torch.__version__.split('+')[0])")
# one wheel per torch version: Horovod's torch extension links against that torch
wheels="$wheels/torch-$torch"
mkdir -p "$wheels"
wheel=$(ls "$wheels"/horovod-$version-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  echo "building horovod $version from its sdist (15-30 minutes on 2 cores; the wheel is kept in $wheels)"
  "$py" -m pip download -q --no-deps --no-binary :all: "horovod==$version" -d "$src"
  tar xzf "$src/horovod-$version.tar.gz" -C "$src"
  tree="$src/horovod-$version"
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$tree/CMakeLists.txt" "$tree/horovod/torch/CMakeLists.txt"
  start=$(date +%s)
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
    HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
    "$py" -m pip wheel -q --no-deps --no-build-isolation "$tree" -w "$src/out"
  built=$(ls "$src"/out/horovod-$version-*.whl)
  wheel="$wheels/$(basename "$built")"
  cp "$built" "$wheel"
  echo "built $(basename "$wheel") in $(( ($(date +%s) - start) / 60 )) min"
fi
"$py" -m pip install -q "$wheel"
"$py" -c "import horovod, horovod.torch as hvd; print('horovod', horovod.__version__, 'with', 'MPI' if hvd.mpi_built() else '', 'Gloo' if hvd.gloo_built() else '')"
