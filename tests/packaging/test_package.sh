#!/usr/bin/env bash
# test_package: `cpack -G DEB` on a built tree makes lattice_<version>_<arch>.deb, which names
# the libraries the programs need in Depends, holds the programs, the .desktop file and the
# icons, and runs where it is unpacked with neither the build nor the source tree. Packs the
# programs already built (packaging.cmake: installing does not build `all`). Installing it
# into a bare Debian 12 is tests/packaging/install_in_chroot.sh (not run by ctest).
# Usage: test_package.sh --build-dir DIR --source-dir DIR --version X.Y.Z [--mpi ON|OFF]
set -euo pipefail

build_dir="" source_dir="" version="" mpi=OFF
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --source-dir) source_dir="$2"; shift 2 ;;
    --version) version="$2"; shift 2 ;;
    --mpi) mpi="$2"; shift 2 ;;
    *) sed -n '7s/^# //p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
  esac
done

fail() { echo "test_package: FAIL: $*" >&2; exit 1; }
ok() { echo "test_package: ok: $*"; }
for tool in cpack dpkg-deb dpkg-shlibdeps desktop-file-validate file ldd readelf; do
  command -v "$tool" >/dev/null || fail "$tool not found (installers/install-deps.sh installs it)"
done
for program in lattice lattice-studio; do
  [[ -x "$build_dir/$program" ]] || fail "$build_dir/$program is not built"
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# ---- build the package --------------------------------------------------------------------
(cd "$tmp" && cpack -G DEB --config "$build_dir/CPackConfig.cmake" -B "$tmp/out") \
  >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log" >&2; fail "cpack -G DEB failed"; }
deb="$tmp/out/lattice_${version}_$(dpkg --print-architecture).deb"
if [[ ! -f "$deb" ]]; then
  fail "cpack wrote $(ls "$tmp/out"/*.deb 2>/dev/null || echo nothing), not $(basename "$deb")"
fi
ok "$(basename "$deb"), $(($(stat -c %s "$deb") / 1024)) KiB"

# ---- control fields: the libraries the programs link, mpirun, the demo corpus -------------
depends="$(dpkg-deb --field "$deb" Depends)"
echo "Depends: $depends"
needs=(libqt6core6 libqt6gui6 libqt6widgets6 'libopenblas0[a-z-]*' libsqlite3-0
       'libsentencepiece[0-9]+' libgomp1)
named="Qt 6, OpenBLAS, SQLite, SentencePiece, OpenMP"
if [[ "$mpi" == ON ]]; then
  needs+=('libopenmpi[0-9]+' openmpi-bin)
  named+=", Open MPI and openmpi-bin"
fi
for package in "${needs[@]}"; do
  grep -Eq "(^|[ ,|])${package}( |,|$)" <<<"$depends" ||
    fail "Depends names no package matching '${package}': ${depends}"
done
if grep -Eq -- '-dev( |,|$)' <<<"$depends"; then fail "Depends names a -dev package: ${depends}"; fi
ok "Depends names ${named}"
recommends="$(dpkg-deb --field "$deb" Recommends)"
[[ "$recommends" == *fortunes* ]] || fail "Recommends names no fortunes: '${recommends}'"
[[ "$(dpkg-deb --field "$deb" Package)" == lattice ]] || fail "Package is not 'lattice'"
[[ "$(dpkg-deb --field "$deb" Version)" == "$version" ]] || fail "Version is not $version"

# ---- contents -----------------------------------------------------------------------------
dpkg-deb --contents "$deb" | awk '{print $6}' >"$tmp/contents.txt"
icon_sizes=(48 128 256)
for path in ./usr/bin/lattice ./usr/bin/lattice-studio \
            ./usr/share/applications/lattice-studio.desktop ./usr/share/doc/lattice/README.md; do
  grep -qx "$path" "$tmp/contents.txt" || fail "the package holds no $path"
done
for size in "${icon_sizes[@]}"; do
  icon="./usr/share/icons/hicolor/${size}x${size}/apps/lattice-studio.png"
  grep -qx "$icon" "$tmp/contents.txt" || fail "the package holds no $icon"
done
files="$(grep -c '[^/]$' "$tmp/contents.txt")"
ok "contents: ${files} files: the programs, the .desktop file, icons ${icon_sizes[*]}, docs"

# ---- unpacked: the .desktop file, the icons --------------------------------------------------
root="$tmp/root"
dpkg-deb -x "$deb" "$root"
desktop="$root/usr/share/applications/lattice-studio.desktop"
report="$(desktop-file-validate "$desktop" 2>&1)" || fail "desktop-file-validate: $report"
[[ -z "$report" ]] || fail "desktop-file-validate has remarks: $report"
exec_name="$(sed -n 's/^Exec=\([^ ]*\).*/\1/p' "$desktop")"
icon_name="$(sed -n 's/^Icon=//p' "$desktop")"
[[ -x "$root/usr/bin/$exec_name" ]] || fail ".desktop Exec=$exec_name is not in usr/bin"
for size in "${icon_sizes[@]}"; do
  icon="$root/usr/share/icons/hicolor/${size}x${size}/apps/${icon_name}.png"
  file "$icon" | grep -q "PNG image data, ${size} x ${size}" ||
    fail "$icon is not a ${size}x${size} PNG: $(file -b "$icon" 2>&1)"
done
ok "the packaged .desktop file validates; Exec=$exec_name and Icon=$icon_name are in the package"

# ---- unpacked: libraries from the system, never from the build or source tree ----------------
for program in lattice lattice-studio; do
  binary="$root/usr/bin/$program"
  libs="$(ldd "$binary")"
  if grep -q "not found" <<<"$libs"; then
    fail "$program: ldd finds no $(grep 'not found' <<<"$libs")"
  fi
  for tree in "$build_dir" "$source_dir"; do
    if grep -qF "$tree" <<<"$libs"; then
      fail "$program loads from $tree: $(grep -F "$tree" <<<"$libs")"
    fi
    if readelf -d "$binary" | grep -E 'R(UN)?PATH' | grep -qF "$tree"; then
      fail "$program has an RPATH into $tree: $(readelf -d "$binary" | grep -E 'R(UN)?PATH')"
    fi
  done
done
ok "ldd: every library of both programs resolves, none from $build_dir or $source_dir"

# ---- unpacked: the programs run from there, with a fresh home ------------------------------
mkdir -p "$tmp/home" "$tmp/data" "$tmp/run"
chmod 700 "$tmp/run"
run() {
  (cd "$tmp" && env -u XDG_DATA_HOME -u XDG_CONFIG_HOME -u XDG_CACHE_HOME HOME="$tmp/home" \
     LATTICE_DATA_DIR="$tmp/data" XDG_RUNTIME_DIR="$tmp/run" QT_QPA_PLATFORM=offscreen "$@")
}
out="$(run "$root/usr/bin/lattice" version 2>&1)" || fail "lattice version: $out"
[[ "$out" == *"$version"* ]] || fail "lattice version prints '$out', not $version"
ok "lattice version: $out"
out="$(run "$root/usr/bin/lattice" train --mock-data --num-layers 1 --hidden-size 32 \
         --num-attention-heads 2 --seq-length 16 --train-iters 2 --vocab-size 127 2>&1)" ||
  fail "lattice train --mock-data: $out"
grep -Eq "iteration +2/" <<<"$out" || fail "lattice train printed no iteration 2: $out"
ok "lattice train --mock-data ran two iterations"
out="$(run "$root/usr/bin/lattice-studio" --screenshot "$tmp/plan.png" --view plan 2>&1)" ||
  fail "lattice-studio --screenshot: $out"
file "$tmp/plan.png" | grep -q "PNG image data" ||
  fail "lattice-studio --screenshot wrote no PNG: $(file -b "$tmp/plan.png" 2>&1); output: $out"
ok "lattice-studio --screenshot --view plan: $(file -b "$tmp/plan.png" | cut -d, -f1-2)"
