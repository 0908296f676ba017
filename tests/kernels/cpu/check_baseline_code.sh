#!/usr/bin/env bash
# Checks that machine code outside the kernels' AVX2 and AVX-512 copies runs on any x86-64 CPU
# (Note [CPU dispatch], kernels/cpu/README.md): every function of the given archives or
# programs whose name is not in lattice::kernels::cpu::avx2 or ::avx512 must hold no VEX- or
# EVEX-encoded instruction (their mnemonics start with "v"; a function compiled for AVX or
# later encodes even its SSE operations so) and no BMI2 instruction. A standard-library helper
# compiled inside an ISA region, or a file built with -march=native, fails here.
#
# Usage: check_baseline_code.sh [--expect-isa-copies] FILE...
#   --expect-isa-copies  also require ymm registers in the avx2 copy and zmm registers in the
#                        avx512 copy (their target pragmas took effect), and the dropout hash of
#                        the avx512 attention (apply_dropout) in vector form: its 64-bit
#                        multiplies as vpmullq (GCC left it scalar with int indices)
set -euo pipefail

expect_copies=0
if [[ "${1:-}" == --expect-isa-copies ]]; then
  expect_copies=1
  shift
fi
[[ $# -gt 0 ]] || { echo "usage: $0 [--expect-isa-copies] FILE..." >&2; exit 2; }

status=0
for file in "$@"; do
  [[ -r "$file" ]] || { echo "FAIL: cannot read $file" >&2; exit 2; }
  # Mangled names (no -C): a function of namespace lattice::kernels::cpu::avx2, a lambda or
  # OpenMP region inside one, or a clone of one, starts with _ZN7lattice7kernels3cpu4avx2 (or
  # _ZZN... for local entities); a std:: template instantiated with such a type does not.
  report=$(objdump -d --no-show-raw-insn "$file" | awk -v expect="$expect_copies" '
    /^[0-9a-f]+ <.*>:$/ {
      name = substr($2, 2, length($2) - 3)
      isa = ""
      if (name ~ /^_Z+N7lattice7kernels3cpu4avx2/) isa = "avx2"
      else if (name ~ /^_Z+N7lattice7kernels3cpu6avx512/) isa = "avx512"
      if (isa == "avx512" && name ~ /apply_dropout/) hashes[name] = 0
      next
    }
    /^ +[0-9a-f]+:\t/ {
      split($0, parts, "\t")
      insn = parts[2]
      mnemonic = insn
      sub(/ .*/, "", mnemonic)
      if (isa == "avx2" && insn ~ /%ymm/) seen["avx2"] = 1
      if (isa == "avx512" && insn ~ /%zmm/) seen["avx512"] = 1
      if ((name in hashes) && mnemonic == "vpmullq") hashes[name] = 1
      if (isa != "") next
      if (mnemonic ~ /^v/ || mnemonic ~ /^(shlx|shrx|sarx|rorx|bzhi|pdep|pext|mulx)$/) {
        if (!(name in bad)) { bad[name] = insn; order[++n] = name }
      }
    }
    END {
      for (i = 1; i <= n; i++) printf "BAD\t%s\t%s\n", order[i], bad[order[i]]
      if (expect) {
        if (!seen["avx2"]) print "MISSING\tavx2\tno ymm register in lattice::kernels::cpu::avx2"
        if (!seen["avx512"]) print "MISSING\tavx512\tno zmm register in lattice::kernels::cpu::avx512"
        for (f in hashes)
          if (!hashes[f]) printf "MISSING\t%s\tthe dropout hash of %s is scalar (no vpmullq)\n", f, f
      }
    }')
  if [[ -n "$report" ]]; then
    status=1
    echo "FAIL: $file"
    while IFS=$'\t' read -r kind what detail; do
      if [[ "$kind" == BAD ]]; then
        echo "  $(echo "$what" | c++filt) runs on plain x86-64 but holds: $detail"
      else
        echo "  $detail" | c++filt
      fi
    done <<< "$report"
  else
    echo "ok: $file: no AVX or BMI2 instruction outside the kernels' avx2 and avx512 copies"
  fi
done
exit $status
