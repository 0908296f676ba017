# Sourced by the tokenizer benchmark scripts: fortunes_corpus FILE writes (once) every plain
# fortune file under /usr/share/games/fortunes (Debian's fortunes package), concatenated, to
# FILE; it fails with a message when the package is missing.
fortunes_corpus() {
  local out="$1" fortunes_dir=/usr/share/games/fortunes
  [[ -s "$out" ]] && return 0
  if ! ls "${fortunes_dir}"/*.dat >/dev/null 2>&1; then
    echo "error: no fortune files in ${fortunes_dir} (install the Debian package fortunes)" >&2
    return 2
  fi
  # A plain fortune file is the text beside its strfile index (.dat); the .u8 names are links.
  local index f
  for index in "${fortunes_dir}"/*.dat; do
    f="${index%.dat}"
    if [[ -f "$f" && ! -L "$f" ]]; then cat "$f"; fi
  done > "${out}.part"
  mv "${out}.part" "$out"
}
