// Writes the Unicode tables of the pre-tokenisers:
//   unicode_classes.cpp  the code point ranges that GPT-2's pre-tokenisation regex treats as
//                        \p{L}, \p{N} and \s, as the reference encoder (OpenAI's encoder.py in
//                        Megatron's GPT2BPETokenizer) sees them on Python's `regex` module, whose
//                        \s is Unicode White_Space. They are read from Node's regex engine,
//                        whose \p{L} and \p{N} are Python regex's, with \p{White_Space} for \s:
//                        JavaScript's own \s differs on U+0085 (not in it) and U+FEFF (in it).
//                        Everything else is "other". Also the ranges where Hugging Face's
//                        tokenizers (Oniguruma, an older Unicode) classes a code point otherwise.
//   unicode_nfc_data.cpp what NFC needs (full canonical decompositions, the order of the
//                        combining classes, the primary composites), read from Hugging Face's
//                        own NFC normaliser, whose Unicode version is older than Node's.
// The Hugging Face parts are read from the reference itself, npm @anush008/tokenizers, which
// installers/fetch-hf-tokenizers.sh installs; pass its node_modules if it lives elsewhere.
// Usage (from the repository root):
//   node engine/src/data/make_unicode_classes.js [NODE_MODULES] &&
//     clang-format -i engine/src/data/unicode_classes.cpp engine/src/data/unicode_nfc_data.cpp
// The versions used are written into the generated files.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const dataDir = process.env.LATTICE_DATA_DIR ||
                path.join(process.env.XDG_DATA_HOME || path.join(os.homedir(), '.local', 'share'), 'lattice');
const modules = process.argv[2] || path.join(dataDir, 'hf-tokenizers', 'reference', 'node_modules');
let hf;
try {
  hf = require(require.resolve('@anush008/tokenizers', { paths: [modules] }));
} catch (e) {
  console.error(`@anush008/tokenizers is not under ${modules}: run installers/fetch-hf-tokenizers.sh`);
  process.exit(1);
}
const hfVersion = require(require.resolve('@anush008/tokenizers/package.json', { paths: [modules] })).version;
const cargo = fs.readFileSync(path.join(path.dirname(require.resolve('@anush008/tokenizers/package.json', { paths: [modules] })), 'Cargo.toml'), 'utf8');
const rustVersion = (cargo.match(/^tokenizers\s*=\s*"([^"]+)"/m) || [])[1] || '?';
const hfSource = `npm @anush008/tokenizers ${hfVersion} (Hugging Face tokenizers ${rustVersion})`;

const isScalar = (cp) => cp < 0xd800 || cp > 0xdfff;
const hex = (cp) => '0x' + cp.toString(16).toUpperCase().padStart(4, '0');
const letter = /\p{L}/u, number = /\p{N}/u, space = /\p{White_Space}/u;
const classOf = (ch) =>
  letter.test(ch) ? 'kLetter' : number.test(ch) ? 'kNumber' : space.test(ch) ? 'kSpace' : 'kOther';

// Maximal ranges of equal class over all scalars, from `cls(cp)`; `keep(cls)` picks the rows.
function rangesOf(cls, keep) {
  const ranges = [];
  let open = null;
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    const c = isScalar(cp) ? cls(cp) : null;
    if (c === null || !keep(c, cp)) {
      open = null;
    } else if (open && open[2] === c) {
      open[1] = cp;
    } else {
      open = [cp, cp, c];
      ranges.push(open);
    }
  }
  return ranges;
}

// --- Classes as Node's regex and as Hugging Face's Oniguruma see them ---------------------------
const nodeClass = new Array(0x110000);
for (let cp = 0; cp <= 0x10ffff; cp++) nodeClass[cp] = isScalar(cp) ? classOf(String.fromCodePoint(cp)) : 'kOther';

// A tokenizer whose only step is a Split on `pattern`: its pre-tokeniser shows what matches.
function splitter(pattern) {
  const json = {
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
    post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
             vocab: {}, merges: [] },
  };
  return hf.Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer();
}
const hfClass = new Array(0x110000).fill('kOther');
for (const [cls, pattern] of [['kLetter', '\\p{L}'], ['kNumber', '\\p{N}'], ['kSpace', '\\s']]) {
  const pre = splitter(pattern);
  for (let base = 0; base <= 0x10ffff; base += 0x10000) {
    let text = '';  // every code point followed by U+0001, which is in none of the classes
    for (let cp = base; cp < base + 0x10000; cp++) {
      if (isScalar(cp) && cp !== 1) text += String.fromCodePoint(cp) + '\u0001';
    }
    for (const [piece] of pre.preTokenizeString(text)) {
      const chars = [...piece];
      if (chars.length === 1 && chars[0] !== '\u0001') hfClass[chars[0].codePointAt(0)] = cls;
    }
  }
}
// Rust regex's \w, which an added token's single_word tests on its neighbours: a token "qz"
// after each code point shows whether that code point counts as a word character.
async function wordCharacters() {
  const probe = hf.Tokenizer.fromString(JSON.stringify({
    version: '1.0', truncation: null, padding: null, normalizer: null, pre_tokenizer: null,
    post_processor: null, decoder: null,
    added_tokens: [{ id: 0, content: 'qz', single_word: true, lstrip: false, rstrip: false,
                     normalized: false, special: true }],
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
             vocab: {}, merges: [] },
  }));
  const isWord = new Uint8Array(0x110000);
  for (let base = 0; base <= 0x10ffff; base += 0x10000) {
    const units = [];  // 4 code points each: the one probed, 'q', 'z', ' '
    for (let cp = base; cp < base + 0x10000; cp++) if (isScalar(cp)) units.push(cp);
    const enc = await probe.encode(units.map((cp) => String.fromCodePoint(cp) + 'qz ').join(''), null,
                                   { addSpecialTokens: false });
    const ids = enc.getIds(), offsets = enc.getOffsets();
    const matched = new Set();
    ids.forEach((id, k) => { if (id === 0) matched.add(Math.floor(offsets[k][0] / 4)); });
    units.forEach((cp, k) => { isWord[cp] = matched.has(k) ? 0 : 1; });
  }
  return isWord;
}

// Top-level await is not available in a CommonJS script: the rest runs in main().
async function main() {
const ranges = rangesOf((cp) => nodeClass[cp], (c) => c !== 'kOther');
const overrides = rangesOf((cp) => hfClass[cp], (c, cp) => c !== nodeClass[cp]);
const isWord = await wordCharacters();
const words = rangesOf((cp) => isWord[cp], (w) => w === 1);

const v = process.versions;
const nodeSource = `Node ${v.node} (V8 ${v.v8}, ICU ${v.icu}, Unicode ${v.unicode})`;
const rows = (list) => list.map(([a, b, c]) => `    {${hex(a)}, ${hex(b)}, CharClass::${c}},`).join('\n');
fs.writeFileSync(path.join(__dirname, 'unicode_classes.cpp'), `// Generated by engine/src/data/make_unicode_classes.js; do not edit. Sources:
// ${nodeSource};
// ${hfSource}.
// The code points JavaScript's /\\p{L}/u, /\\p{N}/u and /\\p{White_Space}/u match (Python
// regex's \\p{L}, \\p{N} and \\s), as maximal ranges; then where Hugging Face's \\p{L}, \\p{N}
// and \\s differ; then the word characters (Rust regex's \\w) of its added tokens' single_word.
#include "data/unicode_classes.h"

namespace lattice::unicode {

const char* const kCharClassSource = "${nodeSource}";
const char* const kHfCharClassSource = "${hfSource}";

const CharClassRange kCharClassRanges[] = {
${rows(ranges)}
};

const std::size_t kCharClassRangeCount = sizeof(kCharClassRanges) / sizeof(kCharClassRanges[0]);

const CharClassRange kHfCharClassOverrides[] = {
${rows(overrides)}
};

const std::size_t kHfCharClassOverrideCount =
    sizeof(kHfCharClassOverrides) / sizeof(kHfCharClassOverrides[0]);

const CodePointRange kHfWordRanges[] = {
${words.map(([a, b]) => `    {${hex(a)}, ${hex(b)}},`).join('\n')}
};

const std::size_t kHfWordRangeCount = sizeof(kHfWordRanges) / sizeof(kHfWordRanges[0]);

}  // namespace lattice::unicode
`);
console.log(`unicode_classes.cpp: ${ranges.length} ranges from ${nodeSource}; ` +
            `${overrides.length} overrides and ${words.length} word ranges from ${hfSource}`);

// --- NFC as Hugging Face's normaliser does it ----------------------------------------------------
// Each code point is followed by U+0002: a starter that neither decomposes nor composes, so the
// normalisation of the whole string is that of each piece.
const nfd = hf.nfdNormalizer(), nfc = hf.nfcNormalizer();
const SEP = '\u0002';
const cps = [];
for (let cp = 0; cp <= 0x10ffff; cp++) if (isScalar(cp) && cp !== 2) cps.push(cp);
const eachOf = (normalizer, pieces) => normalizer.normalizeString(pieces.join(SEP) + SEP).split(SEP).slice(0, -1);
const chars = cps.map((cp) => String.fromCodePoint(cp));
const nfdOf = eachOf(nfd, chars), nfcOf = eachOf(nfc, chars);
const isHangulSyllable = (cp) => cp >= 0xac00 && cp <= 0xd7a3;  // done by arithmetic in C++

// Full canonical decompositions.
const decompositions = [];  // [cp, [code points]]
cps.forEach((cp, i) => {
  if (!isHangulSyllable(cp) && nfdOf[i] !== chars[i]) {
    decompositions.push([cp, [...nfdOf[i]].map((c) => c.codePointAt(0))]);
  }
});

// Canonical combining classes only matter by their order, which NFD's reordering shows:
// compare(x, y) > 0 when NFD swaps "xy" (ccc(x) > ccc(y) > 0).
const compare = (x, y) => {
  const [xy, yx] = eachOf(nfd, [x + y, y + x]);
  return xy !== x + y ? 1 : yx !== y + x ? -1 : 0;
};
const stable = chars.filter((c, i) => nfdOf[i] === c);
const probes = ['\u0334', '\u0301'];  // ccc 1 and 230: a starter sorts equal to both
const probeText = [];
for (const c of stable) for (const p of probes) probeText.push(c + p, p + c);
const probed = eachOf(nfd, probeText);
const nonstarters = stable.filter((c, i) => probed.slice(4 * i, 4 * i + 4).some((r, k) => r !== probeText[4 * i + k]));
nonstarters.sort(compare);
const rankOf = new Map();
let rank = 0;
nonstarters.forEach((c, i) => {
  if (i === 0 || compare(nonstarters[i - 1], c) !== 0) rank++;
  rankOf.set(c.codePointAt(0), rank);
});
const combining = rangesOf((cp) => rankOf.get(cp) ?? 0, (r) => r !== 0);

// Primary composites: code points that NFC keeps and that decompose; the pair they compose from
// is found by trying each decomposed code point as the one composed last.
const compositions = [];  // [first, second, composite]
cps.forEach((cp, i) => {
  if (isHangulSyllable(cp) || nfdOf[i] === chars[i] || nfcOf[i] !== chars[i]) return;
  const parts = [...nfdOf[i]];
  for (let k = parts.length - 1; k >= 1; k--) {
    const first = [...nfc.normalizeString(parts.filter((_, j) => j !== k).join(''))];
    if (first.length === 1 && nfc.normalizeString(first[0] + parts[k]) === chars[i]) {
      compositions.push([first[0].codePointAt(0), parts[k].codePointAt(0), cp]);
      return;
    }
  }
  throw new Error(`no pair composes U+${cp.toString(16)}`);
});
compositions.sort((a, b) => a[0] - b[0] || a[1] - b[1]);

// Hex strings, parsed once at start-up (unicode_nfc.cpp): denser than initialiser lists.
const h = (cp) => cp.toString(16).toUpperCase();
const literal = (items) => {
  const lines = [];
  let line = '';
  for (const item of items) {
    if (line.length + item.length + 1 > 88) {
      lines.push(`    "${line}"`);
      line = '';
    }
    line += item + ' ';
  }
  if (line) lines.push(`    "${line}"`);
  return lines.join('\n');
};
fs.writeFileSync(path.join(__dirname, 'unicode_nfc_data.cpp'), `// Generated by engine/src/data/make_unicode_classes.js; do not edit. Source:
// ${hfSource}, its NFC and NFD normalisers.
// Space-separated items in hex: "CP=D1.D2..." full canonical decompositions (Hangul syllables
// excepted), "FIRST-LAST=R" combining class ranks (the order of the canonical combining classes,
// 1 = lowest), "A.B=P" primary composites.
#include "data/unicode_nfc.h"

namespace lattice::unicode {

const char* const kNfcSource = "${hfSource}";

const char* const kNfcDecompositions =
${literal(decompositions.map(([cp, d]) => `${h(cp)}=${d.map(h).join('.')}`))};

const char* const kNfcCombiningRanks =
${literal(combining.map(([a, b, r]) => `${h(a)}-${h(b)}=${h(r)}`))};

const char* const kNfcCompositions =
${literal(compositions.map(([a, b, p]) => `${h(a)}.${h(b)}=${h(p)}`))};

}  // namespace lattice::unicode
`);
console.log(`unicode_nfc_data.cpp: ${decompositions.length} decompositions, ${nonstarters.length} ` +
            `non-starters in ${rank} ranks, ${compositions.length} compositions from ${hfSource}`);
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
