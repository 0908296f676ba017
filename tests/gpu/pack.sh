#!/usr/bin/env bash
# Builds the GPU checks on this machine (no GPU needed: nvcc, CUDA for one architecture) and
# packs them, with the shared libraries a bare GPU machine may lack (OpenBLAS, Qt's core and
# test libraries, SQLite, sentencepiece, ...; not libc, libstdc++, the driver or CUDA's own
# libraries), into one archive for tests/gpu/run_packed.sh. For GPU machines without this
# project's build dependencies, where tests/gpu/run.sh (which builds there) cannot run, and to
# spend none of a short GPU lease on building.
# Usage: tests/gpu/pack.sh [archive]   (default build/gpu-pack/lattice-gpu-check.tar.xz)
# LATTICE_GPU_PACK_ARCH: CUDA architecture (default 90-real: H100 / H200);
# LATTICE_GPU_PACK_BUILD_DIR: the build tree (default build/gpu-pack; MPI off: one process per
# GPU check, no launcher on the GPU machine).
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
  -DLATTICE_BUILD_STUDIO=OFF -DLATTICE_WITH_MPI=OFF -DLATTICE_NATIVE=OFF \
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
ldd "$stage"/bin/* | grep -o '/[^ ]*\.so[^ ]*' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | ld-linux* | libpthread* | libdl.so* | librt.so* | libstdc++* | \
      libgcc_s* | libcuda.so* | libcublas* | libcudart* | libnccl* | libnvidia*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
cp "$root/tests/bench/train_torch_gpu.py" "$root/tests/gpu/side_by_side.py" "$stage/bin/"
mkdir -p "$(dirname "$archive")"
tar -cJf "$archive" -C "$stage" bin lib
echo "pack.sh: $archive ($(du -h "$archive" | cut -f1)); run it with tests/gpu/run_packed.sh $archive"
