#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries on a machine with the CUDA toolkit and the Debian
# development libraries, for a GPU machine that has only the CUDA toolkit (and Python): no HDF5,
# OpenBLAS, yaml-cpp, CLI11 or zlib headers needed there. Then
#   scripts/gpu_check.sh --prebuilt build-gpu-portable/prebuilt     (on the GPU machine)
# (or --prebuilt build-gpu-portable/prebuilt.tar.xz) runs them. What is built:
#   - libfoldcore with CUDA (sm_90a: H100/H200/GH200; ARCHS overrides), the data pipeline and the
#     models (zlib linked statically), without HDF5, OpenBLAS (built-in GEMM), yaml-cpp and RDKit;
#   - every GPU test (tests/<area>/test_*_cuda.cpp -> <area>_test_*_cuda) and every benchmark with
#     a --device option (bench_bert included: without HDF5 it feeds its data from memory),
#     googletest from source, static; libstdc++, libgcc and libgomp linked statically;
#   - the tests compiled with FOLDCORE_SOURCE_DIR="." (configs/, examples/ relative to the working
#     directory: gpu_check.sh runs them from the repository root).
# The binaries are stripped and copied to $BUILD_DIR/prebuilt/{tests,bench}, and packed into
# $BUILD_DIR/prebuilt.tar.xz (the one file to copy to the GPU machine: gpu_check.sh --prebuilt takes
# either); the script fails when one of them needs a shared library other than the CUDA runtime and
# cuBLAS (from the toolkit), glibc and libgcc_s, and prints their sizes.
#   scripts/gpu_build_portable.sh      (BUILD_DIR=build-gpu-portable, ARCHS=90a, JOBS=nproc,
#                                       GTEST_SRC=/usr/src/googletest)
#   MPI=1 scripts/gpu_build_portable.sh  the multi-rank GPU tests instead (tests/dist/*_cuda_mpi.cpp
#       that need no yaml-cpp: the collectives on CUDA tensors, NCCL and MPI staged, and DAP-2 / BP-2
#       AlphaFold2 predictions on the tiny preset built in code), built with
#       MPI and linked to libmpi.so.40 dynamically (Open MPI 4.x, whose ABI the GPU machine's Debian
#       Open MPI shares), into build-gpu-portable-mpi; `gpu_check.sh --prebuilt-mpi` runs them under
#       mpirun with 1 and 2 ranks, and bench_comm (the collectives' bandwidth on CUDA tensors). Only
#       their direct libraries are checked (libmpi brings its own).
set -euo pipefail
cd "$(dirname "$0")/.."
MPI=${MPI:-0}
if [ "$MPI" = 1 ]; then BUILD_DIR=${BUILD_DIR:-build-gpu-portable-mpi}; MPI_OPT=ON; else BUILD_DIR=${BUILD_DIR:-build-gpu-portable}; MPI_OPT=OFF; fi
ARCHS=${ARCHS:-90a}
JOBS=${JOBS:-$(nproc)}
GTEST_SRC=${GTEST_SRC:-/usr/src/googletest}
die() { echo "gpu_build_portable: $1" >&2; exit 1; }
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || die "no nvcc (CUDA toolkit) on this machine"
[ -d "$GTEST_SRC" ] || die "no googletest sources at $GTEST_SRC (GTEST_SRC=...)"
LIBGOMP_A=$(${CXX:-g++} -print-file-name=libgomp.a)
[ -f "$LIBGOMP_A" ] || die "no static libgomp ($LIBGOMP_A)"

# OpenMP_gomp_LIBRARY preset: FindOpenMP links what that cache entry names, the static archive.
# FOLDCORE_LLD=OFF: GNU ld, the linker these archives have run on the GPU machine with.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLDCORE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DFOLDCORE_APPS=OFF -DFOLDCORE_HDF5=OFF -DFOLDCORE_BLAS=OFF \
  -DFOLDCORE_DATA=ON -DFOLDCORE_RDKIT=OFF -DFOLDCORE_MPI=$MPI_OPT -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DFOLDCORE_GTEST_SOURCE="$GTEST_SRC" -DBUILD_SHARED_LIBS=OFF \
  -DZLIB_USE_STATIC_LIBS=ON -DOpenMP_gomp_LIBRARY="$LIBGOMP_A" \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" -DFOLDCORE_LLD=OFF -DFOLDCORE_TEST_SOURCE_DIR=. >/dev/null

TESTS=()
if [ "$MPI" = 1 ]; then
  for f in tests/dist/test_*_cuda_mpi.cpp; do
    grep -q 'config_yaml.h' "$f" && continue  # needs yaml-cpp, left out here
    TESTS+=("dist_$(basename "$f" .cpp)")
  done
else
  for f in tests/*/test_*_cuda.cpp; do
    area=$(basename "$(dirname "$f")")
    TESTS+=("${area}_$(basename "$f" .cpp)")
  done
fi
BENCHES=()  # the benchmarks with a CUDA path (a --device option); the rest are CPU-only
# (bench_comm needs MPI, which this build leaves out: only the targets this configuration has)
TARGETS=$(ninja -C "$BUILD_DIR" -t targets all | sed 's/:.*//' | sed 's|.*/||' | sort -u)
# (the MPI build: bench_comm, the collectives' bandwidth on CUDA tensors, NCCL and MPI staged, and
# bench_dap, the DAP training step with its communication overlapped or not)
for f in bench/bench_*.cpp; do
  b=$(basename "$f" .cpp)
  if [ "$MPI" = 1 ]; then [ "$b" = bench_comm ] || [ "$b" = bench_dap ] || continue; fi
  grep -q -- '--device' "$f" && grep -qx "$b" <<<"$TARGETS" && BENCHES+=("$b")
done
ninja -C "$BUILD_DIR" -j "$JOBS" "${TESTS[@]}" "${BENCHES[@]+"${BENCHES[@]}"}"

DIST=$BUILD_DIR/prebuilt
rm -rf "$DIST"
mkdir -p "$DIST/tests" "$DIST/bench"
for t in "${TESTS[@]}"; do strip -o "$DIST/tests/$t" "$BUILD_DIR/tests/$t"; done
for b in "${BENCHES[@]+"${BENCHES[@]}"}"; do strip -o "$DIST/bench/$b" "$BUILD_DIR/bench/$b"; done

# Shared libraries every CUDA + PyTorch image has: the toolkit's runtime and cuBLAS, glibc and
# libgcc_s (cuBLAS's own dependency; an essential package of every Debian/Ubuntu image), and NCCL
# (PyTorch's nvidia-nccl wheel; gpu_check.sh puts its folder on LD_LIBRARY_PATH), which only the
# single-process NCCL test links (--as-needed), with libstdc++ (NCCL's own dependency; the image
# has it: its nvcc needs g++; our binaries link libstdc++ statically).
ALLOWED='^(linux-vdso\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libc\.so|libm\.so|ld-linux-x86-64\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s\.so|libnccl\.so|libstdc\+\+\.so)'
bad=0
for f in "$DIST"/tests/* "$DIST"/bench/*; do
  [ -e "$f" ] || continue
  if [ "$MPI" = 1 ]; then  # direct dependencies only: libmpi's own come with the machine's Open MPI
    while read -r lib; do
      [[ "$lib" =~ $ALLOWED || "$lib" =~ ^libmpi\.so\.40 ]] || { echo "gpu_build_portable: $f needs $lib" >&2; bad=1; }
    done < <(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
    continue
  fi
  while read -r lib _; do
    [[ "$(basename "$lib")" =~ $ALLOWED ]] || { echo "gpu_build_portable: $f needs $lib" >&2; bad=1; }
  done < <(ldd "$f" | sed 's/^[[:space:]]*//')
done
[ "$bad" = 0 ] || die "binaries need libraries a bare CUDA machine may lack (see above)"
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with local changes)')"
  echo "cuda_archs $ARCHS"
  echo "needs $(for f in "$DIST"/tests/* "$DIST"/bench/*; do [ -e "$f" ] && ldd "$f"; done | awk '{print $1}' | sort -u | tr '\n' ' ')"
} >"$DIST/MANIFEST"
# One archive to copy: the binaries share most of their CUDA kernels and code (each links all of
# libfoldcore: up to 34 MB a binary, 582 MB in all on 2026-12-01), which xz finds across files
# when its window spans them: one stream (-T1: threads would cut it into blocks compressed apart)
# with a 1 GiB dictionary (about 10 GiB of memory to pack, 1 GiB to unpack). 18 MB where -9 -T2
# (a 64 MiB window in blocks) made 41 MB; about 5 minutes on 2 cores.
(cd "$DIST" && tar cf - MANIFEST tests bench) | xz -T1 --lzma2=preset=6,dict=1GiB >"$DIST.tar.xz.tmp"
mv "$DIST.tar.xz.tmp" "$DIST.tar.xz"
cat "$DIST/MANIFEST"
ls -l "$DIST"/tests "$DIST"/bench | awk 'NF > 5 {printf "%10d %s\n", $5, $NF}'
echo "gpu_build_portable: $(du -sb "$DIST" | cut -f1) bytes in $DIST ($(ls "$DIST"/tests | wc -l) GPU tests, $(ls "$DIST"/bench | wc -l) benchmarks); $(stat -c %s "$DIST.tar.xz") bytes in $DIST.tar.xz"
