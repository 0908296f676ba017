#!/usr/bin/env bash
# Builds the GPU checks on this machine (no GPU needed: nvcc, CUDA for one architecture) and
# packs them, with the shared libraries a bare GPU machine may lack (OpenBLAS, Qt's core and
# test libraries, SQLite, sentencepiece, ...; not libc, libstdc++, the driver or CUDA's own
# libraries), into one archive for tests/gpu/run_packed.sh. For GPU machines without this
# project's build dependencies, where tests/gpu/run.sh (which builds there) cannot run, and to
# spend none of a short GPU lease on building.
# Usage: tests/gpu/pack.sh [archive]   (default build/gpu-pack/lattice-gpu-check.tar.xz)
# LATTICE_GPU_PACK_ARCH: CUDA architecture (default 90-real: H100 / H200);
# LATTICE_GPU_PACK_BUILD_DIR: the build tree (default build/gpu-pack; MPI on, NCCL off).
# Open MPI's launcher, libraries, plugins and help files go in too, under ompi/ (relocated by
# OPAL_PREFIX in run_packed.sh), for the check's multi-rank runs on one GPU: NCCL refuses two
# ranks on one GPU, so those runs move device collectives through host memory
# (LATTICE_DEVICE_COMM=host, docs/gpu.md "Ranks that share a GPU").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
build=$(realpath -m "${LATTICE_GPU_PACK_BUILD_DIR:-$root/build/gpu-pack}")
archive=$(realpath -m "${1:-$build/lattice-gpu-check.tar.xz}")
export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || { echo "pack.sh: nvcc not found (PATH, /usr/local/cuda/bin)" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLATTICE_WITH_CUDA=ON \
  -DLATTICE_BUILD_STUDIO=OFF -DLATTICE_WITH_MPI=ON -DLATTICE_WITH_NCCL=OFF -DLATTICE_NATIVE=OFF \
  -DLATTICE_CUDA_ARCHITECTURES="${LATTICE_GPU_PACK_ARCH:-90-real}" \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" "${launcher[@]}" >"$build.configure.log" 2>&1 \
  || { tail -20 "$build.configure.log"; exit 1; }
programs=(test_cuda_ops test_cuda_attention test_cuda_op_list test_gpu_training
          lattice-bench-cuda-ops lattice-bench-train-gpu lattice lattice-gpu)
cmake --build "$build" -j "$(nproc)" --target "${programs[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for p in "${programs[@]}"; do
  cp "$(find "$build" -type f -name "$p" -perm -u+x | head -1)" "$stage/bin/"
done
strip "$stage"/bin/* || true
# Open MPI as installed (Debian: prefix /usr, plugins under its libdir), in the same layout
# relative to its prefix, which OPAL_PREFIX then names.
command -v ompi_info >/dev/null || { echo "pack.sh: ompi_info not found (Open MPI)" >&2; exit 1; }
ompi_path() { ompi_info --parsable --path "$1" | cut -d: -f3-; }
prefix=$(ompi_path prefix)
mkdir -p "$stage/ompi/bin"
cp -L "$(ompi_path bindir)/orterun" "$stage/ompi/bin/mpirun"
cp -L "$(ompi_path bindir)/orted" "$stage/ompi/bin/"
mkdir -p "$stage/ompi/etc"  # its sysconfdir (/etc/openmpi) is not relocated: named by run_packed.sh
cp -L "$(ompi_path sysconfdir)"/openmpi-{mca-params.conf,default-hostfile} "$stage/ompi/etc/"
for d in pkglibdir pkgdatadir; do
  src=$(ompi_path "$d")
  dst="$stage/ompi/${src#"$prefix"/}"
  mkdir -p "$(dirname "$dst")"
  cp -rL "$src" "$dst"
done
find "$stage/bin" "$stage/ompi" -type f \( -perm -u+x -o -name '*.so' \) -exec ldd {} + 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | ld-linux* | libpthread* | libdl.so* | librt.so* | libstdc++* | \
      libgcc_s* | libcuda.so* | libcublas* | libcudart* | libnccl* | libnvidia*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
cp "$root/tests/bench/train_torch_gpu.py" "$root/tests/gpu/side_by_side.py" "$stage/bin/"
mkdir -p "$(dirname "$archive")"
tar -cJf "$archive" -C "$stage" bin lib ompi
echo "pack.sh: $archive ($(du -h "$archive" | cut -f1)); run it with tests/gpu/run_packed.sh $archive"
