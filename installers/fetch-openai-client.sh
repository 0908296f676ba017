#!/usr/bin/env bash
# Installs OpenAI's own client for Node (the npm package `openai`, pinned), which
# tests/infer/test_serve_openai_client drives `lattice serve` with, into
#   ${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}/openai-client/node_modules
# Idempotent: left alone when that version is there and loads. npm checks the package against
# the registry's integrity hashes. Needs node and npm (installers/install-deps.sh).
# Usage: installers/fetch-openai-client.sh
set -euo pipefail

package="openai@4.95.0"

usage() { sed -n '2,7s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
case "${1:-}" in
  "") ;;
  -h|--help) usage; exit 0 ;;
  *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
esac
data_dir="${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}"
dest="${data_dir}/openai-client"
package_json="${dest}/node_modules/openai/package.json"

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "fetch-openai-client: node or npm not found; install them with installers/install-deps.sh" >&2
  exit 1
fi
if [[ -f "$package_json" ]] &&
   node -e "const p = require(process.argv[1]); if (p.version !== '${package##*@}') process.exit(1);
            require(require('path').dirname(process.argv[1]));" "$package_json" 2>/dev/null; then
  echo "fetch-openai-client: ${dest} already holds ${package}"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-openai-client: installing ${package} with npm"
rm -rf "${dest}"
mkdir -p "${dest}"
if ! npm install --prefix "${dest}" --no-audit --no-fund --loglevel=error "$package" \
     >"$tmp/npm.log" 2>&1; then
  echo "fetch-openai-client: npm could not install ${package}:" >&2
  tail -n 20 "$tmp/npm.log" >&2
  exit 1
fi
if ! node -e "require(process.argv[1])" "${dest}/node_modules/openai"; then
  echo "fetch-openai-client: ${package} installed but does not load on this machine" >&2
  exit 1
fi
echo "fetch-openai-client: installed ${package} in ${dest}"
