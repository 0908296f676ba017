#!/usr/bin/env bash
# Installs Lattice's .deb on "a machine that has only the runtime libraries": a minimal
# Debian 12 root (mmdebstrap, or debootstrap, --variant=minbase) made from this machine's apt
# mirror, into which `apt-get install ./lattice_<version>_<arch>.deb` pulls the dependencies;
# then runs there `lattice version`, a two-iteration `lattice train --mock-data`, the same
# under `mpirun -n 2`, and a Studio screenshot offscreen. Prints the packages apt pulled and
# the sizes. Not run by ctest: it downloads and unpacks ~150 packages (minutes).
#
# Usage: tests/packaging/install_in_chroot.sh [--base DIR] [--keep] [--with-recommends] DEB
#   DEB                the package (`cpack -G DEB` in a build tree writes it there)
#   --base DIR         keep the bare Debian root in DIR (made the first time, reused after)
#                      and install into a copy of it; default: bootstrap for this run only
#   --keep             keep the root with the package installed (its path is printed)
#   --with-recommends  let apt install the package's Recommends (fortunes) and its
#                      dependencies' (GTK theme, ...); by default it installs only Depends, so
#                      that a missing dependency is not hidden by a recommended package
# As root. Needs mmdebstrap or debootstrap (installers/install-deps.sh --package). The mirror
# is this machine's: its bookworm entries in /etc/apt/sources.list{,.d/*}; LATTICE_DEBIAN_MIRROR
# (e.g. http://deb.debian.org/debian) replaces them.
set -euo pipefail

usage() { sed -n '2,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
deb="" base="" keep_root=0 recommends="--no-install-recommends"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --base) base="$2"; shift 2 ;;
    --keep) keep_root=1; shift ;;
    --with-recommends) recommends=""; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "install_in_chroot: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) deb="$1"; shift ;;
  esac
done
if [[ -z "$deb" || ! -f "$deb" ]]; then
  echo "install_in_chroot: no package '${deb}': build it with 'cpack -G DEB' in a build tree" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install_in_chroot: run as root (it makes a chroot and mounts /proc in it)" >&2
  exit 2
fi
deb="$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")"
say() { echo "install_in_chroot: $*"; }

# ---- the mirror: this machine's bookworm entries, as one-line sources ---------------------
host_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    grep -E '^[[:space:]]*deb[[:space:]]' "$f" | sed -E 's/\[[^]]*\][[:space:]]*//' |
      awk '$3 ~ /^bookworm(-updates|-security)?$/ {print "deb " $2 " " $3 " main"}' || true
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    # deb822 stanzas: one "deb URI SUITE main" line per bookworm suite of a `Types: deb` stanza.
    awk 'function flush() {
           if (types ~ /(^| )deb( |$)/ && enabled != "no")
             for (i = 1; i <= ns; i++)
               if (suite[i] ~ /^bookworm(-updates|-security)?$/)
                 print "deb " uri " " suite[i] " main"
           types = ""; uri = ""; ns = 0; enabled = ""
         }
         /^[[:space:]]*$/ { flush(); next }
         /^Types:/ { types = substr($0, 7) }
         /^URIs:/ { uri = $2 }
         /^Suites:/ { ns = split(substr($0, 8), suite, " ") }
         /^Enabled:/ { enabled = $2 }
         END { flush() }' "$f"
  done
}
if [[ -n "${LATTICE_DEBIAN_MIRROR:-}" ]]; then
  sources=("deb ${LATTICE_DEBIAN_MIRROR} bookworm main")
else
  mapfile -t sources < <(host_sources | awk '!seen[$0]++')
fi
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "install_in_chroot: no bookworm entry in /etc/apt/sources.list*;" \
       "set LATTICE_DEBIAN_MIRROR" >&2
  exit 2
fi
say "sources: ${sources[*]}"

# ---- a minimal Debian 12 root ------------------------------------------------------------
root="$(mktemp -d /tmp/lattice-chroot.XXXXXX)"
chmod 755 "$root"
mounted=0
cleanup() {
  if [[ $mounted -eq 1 ]]; then umount "$root/proc" "$root/sys" || true; fi
  if [[ $keep_root -eq 0 ]]; then rm -rf "$root"; else say "kept the root in $root"; fi
}
trap cleanup EXIT
if [[ -n "$base" && -f "$base/.lattice-minbase" ]]; then
  say "copying the bare Debian root in $base"
  cp -a "$base/." "$root/"
else
  started=$SECONDS
  if command -v mmdebstrap >/dev/null 2>&1; then
    say "mmdebstrap --variant=minbase bookworm $root"
    mmdebstrap --mode=root --variant=minbase bookworm "$root" "${sources[@]}"
  elif command -v debootstrap >/dev/null 2>&1; then
    mirror="$(awk '{print $2; exit}' <<<"${sources[0]}")"
    say "debootstrap --variant=minbase bookworm $root $mirror"
    debootstrap --variant=minbase bookworm "$root" "$mirror"
    printf '%s\n' "${sources[@]}" >"$root/etc/apt/sources.list"
  else
    echo "install_in_chroot: neither mmdebstrap nor debootstrap is installed" \
         "(installers/install-deps.sh --package installs mmdebstrap)" >&2
    exit 2
  fi
  touch "$root/.lattice-minbase"
  say "made the Debian root in $((SECONDS - started)) s: $(du -sh --exclude=proc "$root" | cut -f1)"
  if [[ -n "$base" ]]; then
    mkdir -p "$base"
    cp -a "$root/." "$base/"
  fi
fi

in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"  # Open MPI's hwloc reads the CPU topology there
mounted=1
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# ---- install the package as a user would --------------------------------------------------
in_root dpkg-query -W -f='${Package}\n' | sort >"$root/tmp/before.txt"
size_before=$(du -sk --exclude=proc "$root" | cut -f1)
cp "$deb" "$root/tmp/"
say "apt-get install ${recommends:+${recommends} }./$(basename "$deb")"
in_root apt-get update -qq
in_root DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${recommends} \
  "/tmp/$(basename "$deb")" >"$root/tmp/apt.log" 2>&1 || {
  tail -n 30 "$root/tmp/apt.log" >&2
  echo "install_in_chroot: FAILED: apt-get install of the package" >&2
  exit 1
}
in_root apt-get clean
in_root dpkg-query -W -f='${Package}\n' | sort >"$root/tmp/after.txt"
size_after=$(du -sk --exclude=proc "$root" | cut -f1)
pulled=$(comm -13 "$root/tmp/before.txt" "$root/tmp/after.txt" | grep -vx lattice)
say "apt installed lattice and $(wc -w <<<"$pulled") other packages;" \
    "the root grew by $(((size_after - size_before) / 1024)) MiB"
say "lattice Installed-Size: $(in_root dpkg-query -W -f='${Installed-Size}' lattice) KiB"
echo "$pulled" | paste -sd' ' | fold -s -w 100 | sed 's/^/    /'
dev_packages=$(grep -E -- '-dev$' <<<"$pulled" || true)

# ---- run the programs there -----------------------------------------------------------------
failures=0
step() {  # step NAME COMMAND...: runs COMMAND in the root, says ok or FAILED with its output
  local name="$1"
  shift
  if in_root HOME=/tmp/home LATTICE_DATA_DIR=/tmp/lattice-data XDG_RUNTIME_DIR=/tmp/run \
       OMP_NUM_THREADS=1 "$@" >"$root/tmp/step.log" 2>&1; then
    say "ok      ${name}"
  else
    say "FAILED  ${name} (exit $?):"
    tail -n 20 "$root/tmp/step.log" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}
mkdir -p "$root/tmp/home" "$root/tmp/lattice-data" "$root/tmp/run"
chmod 700 "$root/tmp/run"
if [[ -n "$dev_packages" ]]; then
  say "FAILED  no -dev packages pulled: $(paste -sd' ' <<<"$dev_packages")"
  failures=$((failures + 1))
else
  say "ok      no -dev packages pulled"
fi
step "lattice version" lattice version
sed 's/^/    /' "$root/tmp/step.log"
tiny=(--mock-data --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16
      --train-iters 2 --vocab-size 127)
step "lattice train ${tiny[*]}" lattice train "${tiny[@]}"
grep -m1 -E "iteration +2/" "$root/tmp/step.log" | cut -c1-150 | sed 's/^/    /' || true
step "mpirun -n 2 lattice train ${tiny[*]} --tensor-model-parallel-size 2" \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none \
  mpirun --allow-run-as-root --oversubscribe -n 2 lattice train "${tiny[@]}" \
  --tensor-model-parallel-size 2
grep -m1 -E "iteration +2/" "$root/tmp/step.log" | cut -c1-150 | sed 's/^/    /' || true
rm -f "$root/tmp/p.png"
step "lattice-studio --screenshot /tmp/p.png --view plan" \
  QT_QPA_PLATFORM=offscreen lattice-studio --screenshot /tmp/p.png --view plan
png_magic="$(head -c 8 "$root/tmp/p.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')"
if [[ "$png_magic" == 89504e470d0a1a0a ]]; then
  say "ok      /tmp/p.png is a PNG ($(stat -c %s "$root/tmp/p.png") bytes)"
else
  say "FAILED  /tmp/p.png is not a PNG"
  failures=$((failures + 1))
fi

if [[ $failures -gt 0 ]]; then
  say "${failures} step(s) failed"
  exit 1
fi
say "all steps passed"
