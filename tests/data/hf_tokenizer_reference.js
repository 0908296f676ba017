// The reference side of test_hf_tokenizer: writes a varied text, deterministic from --seed, and
// what Hugging Face's own tokenizers (Rust, npm @anush008/tokenizers) make of it, for the C++
// test to compare HuggingFaceTokenizer against token by token.
// Usage: node tests/data/hf_tokenizer_reference.js --out DIR --node-modules DIR
//            [--bytes 10000000] [--seed 1] [--variant-bytes 1000000] [--text-only]
//            NAME=TOKENIZER_JSON ...
// (--text-only: docs.bin alone, for the benchmark; the files still give their vocabularies.
// --worker: encode DIR/docs.bin with the one tokenizer given; the main run starts one worker
// per tokenizer, so that they run in parallel, and writes regex.json meanwhile.)
// Writes to DIR:
//   docs.bin          the documents: per document a little-endian u32 byte count, then UTF-8
//   NAME.ids          per document a u32 count, then the i32 ids of
//                     encode(doc, null, {addSpecialTokens: false})
//   NAME.norm.bin     per document the normalizer's output (as docs.bin), for files with one
//   NAME-VARIANT/tokenizer.json, NAME-VARIANT.ids
//                     variants of each file exercising what the real files leave unused
//                     (flags of added tokens, ByteLevel's prefix space, a BOS template); ids
//                     of the first --variant-bytes of documents, with special tokens added
//   regex.json        [{pattern, random, text, pieces}]: Split(pattern, Isolated) of small
//                     texts, for chosen patterns and for random ones
//   info.json         versions and sizes
'use strict';
const fs = require('fs');
const path = require('path');

const args = { bytes: 10_000_000, seed: 1, variantBytes: 1_000_000, tokenizers: [] };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const value = () => {
    if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
    return argv[++i];
  };
  if (a === '--out') args.out = value();
  else if (a === '--node-modules') args.modules = value();
  else if (a === '--bytes') args.bytes = Number(value());
  else if (a === '--seed') args.seed = Number(value());
  else if (a === '--variant-bytes') args.variantBytes = Number(value());
  else if (a === '--text-only') args.textOnly = true;
  else if (a === '--worker') args.worker = true;
  else if (a.includes('=')) args.tokenizers.push(a.split('=', 2));
  else throw new Error(`unexpected argument '${a}'`);
}
if (!args.out || !args.modules || args.tokenizers.length === 0) {
  console.error('usage: node hf_tokenizer_reference.js --out DIR --node-modules DIR NAME=tokenizer.json ...');
  process.exit(2);
}
const hf = require(require.resolve('@anush008/tokenizers', { paths: [args.modules] }));

// ---- the text -------------------------------------------------------------------------------
// splitmix32: a small seeded generator, so that every run writes the same documents.
let state = args.seed >>> 0;
const rand = () => {
  state = (state + 0x9e3779b9) >>> 0;
  let z = state;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return ((z ^ (z >>> 16)) >>> 0) / 4294967296;
};
const int = (n) => Math.floor(rand() * n);
const pick = (list) => list[int(list.length)];
const scalar = (lo, hi) => {
  const cp = lo + int(hi - lo + 1);
  return cp >= 0xd800 && cp <= 0xdfff ? 'x' : String.fromCodePoint(cp);
};
const run = (lo, hi, n) => Array.from({ length: n }, () => scalar(lo, hi)).join('');

const words = ('the of and to in is was that for it with as his on be at by had are but from or ' +
  'have an they which one you were all we her she there would their will when who him been has ' +
  'more if no out so said what up its about than into them can only other new some could time ' +
  'these two may first then do any like my now over such our man me even most made after also ' +
  'did many before must through back years where much your way well down should because each ' +
  'tokenizer Megatron Llama Qwen transformer attention gradient café naïve façade résumé Zürich ' +
  'straße Ελλάδα Москва 東京 서울 القاهرة मुंबई ประเทศไทย').split(' ');
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M",
  "'LL", "'D", "'ſ", "'K", "'x", "'", "''", "don't", "I'm", "WE'LL", "it'S", "they'Re", "y'all"];
const specials = ['<|endoftext|>', '<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>',
  '<|start_header_id|>', '<|reserved_special_token_0|>', '<|reserved_special_token_1|>',
  '<|reserved_special_token_2|>', '<|reserved_special_token_3|>', '<|im_start|>', '<|im_end|>',
  '<think>', '</think>', '<tool_call>', '<|fim_prefix|>', '<|vision_pad|>', '<|endoftext',
  '<|im_start|', '<<|im_end|>>', '<|<|endoftext|>|>', 'Hello', 'hello', ' ab ', 'xab', 'ab',
  '\u00e9t\u00e9', 'e\u0301te\u0301'];
const spaces = [' ', ' ', ' ', '\t', '\n', '\r\n', '\r', '\n\n', '\u00a0', '\u3000', '\u2028',
  '\u0085', '\ufeff', '\u200b', '\v', '\f', '\u2009'];
// Script ranges: Latin-1 and Extended, Greek, Cyrillic, Armenian, Hebrew, Arabic, Devanagari,
// Bengali, Tamil, Thai, Georgian, Hangul jamo and syllables, kana, CJK, Ethiopic, fullwidth.
const scripts = [[0xc0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x531, 0x58a], [0x5d0, 0x5ea],
  [0x620, 0x64a], [0x900, 0x97f], [0x980, 0x9ff], [0xb80, 0xbff], [0xe01, 0xe5b], [0x10a0, 0x10ff],
  [0x1100, 0x11ff], [0xac00, 0xd7a3], [0x3041, 0x30ff], [0x4e00, 0x9fff], [0x1200, 0x137f],
  [0xff01, 0xff5e], [0x20000, 0x2a6df]];
const emoji = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷', '🇯🇵', '❤️', '1️⃣', '🏳️‍🌈', '🤖', '🧑🏿‍💻', '✨', '🎉🎉🎉'];

// Tokens of the tokenizers' own vocabularies, as text: among them the words that only
// ignore_merges makes one token (Llama 3: " việc", "mektedir", " характер", ...).
const byteOf = (() => {
  const bytes = [];
  for (let b = 0; b < 256; b++) if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae) bytes.push(b);
  const chars = bytes.slice();
  for (let b = 0, n = 0; b < 256; b++) if (!bytes.includes(b)) bytes.push(b), chars.push(256 + n++);
  return new Map(chars.map((c, i) => [String.fromCodePoint(c), bytes[i]]));
})();
const vocabTexts = [];
for (const [, file] of args.worker ? [] : args.tokenizers) {
  for (const token of Object.keys(JSON.parse(fs.readFileSync(file, 'utf8')).model.vocab)) {
    const bytes = Buffer.from([...token].map((c) => byteOf.get(c) ?? 0));
    const text = bytes.toString('utf8');
    if (Buffer.from(text, 'utf8').equals(bytes)) vocabTexts.push(text);
  }
}

const segments = [
  () => pick(vocabTexts),
  () => pick(vocabTexts) + pick(vocabTexts),
  () => pick(words),                                                     // prose
  () => (rand() < 0.3 ? pick(words).toUpperCase() : pick(words)) + pick(['.', ',', '!', '?', ';', ':', '']),
  () => pick(contractions),
  () => String(int(10 ** (1 + int(9)))) + (rand() < 0.3 ? '.' + int(1000) : ''),   // numbers
  () => pick(['1,234,567.89', '3.14159265', '0x1F2E', '2024-01-02', '١٢٣٤٥', '１２３', '²³', 'Ⅻ', '12345678901234567890']),
  () => pick(['def f(x, y):\n\treturn x + y  # sum\n', 'for (int i = 0; i < n; ++i) {\r\n    a[i] += b->c;\r\n}\r\n',
    'if(a!=b&&c::d){x=y<<2;}', '    let v = vec![1, 2, 3];\n', '<div class="x">&nbsp;</div>', '$ ls -la | grep "*.txt"\n',
    '    \n\t\t\n', 'SELECT * FROM t WHERE id=42;', '```python\nprint("hi")\n```']),
  () => Array.from({ length: 1 + int(12) }, () => pick(spaces)).join(''),  // whitespace runs
  () => pick(spaces),
  () => pick(specials),
  () => { const [lo, hi] = pick(scripts); return run(lo, hi, 1 + int(8)); },  // other scripts
  () => pick(emoji),
  () => pick(['e\u0301', 'a\u0323\u0301', 'a\u0301\u0323', 'o\u0308\u0304', '\u1100\u1161\u11a8',
    '\u212b', '\u2126', 'A\u030a', '\u0344', 'q\u0307\u0323', '\u0958', '\u1e9b\u0323', '\u0301x',
    '\ud55c\u11a8', 'ﬁ', '\u00e9']) + run(0x300, 0x36f, int(3)),       // for NFC
  () => run(0, 0x10ffff, 1 + int(4)),                                    // any scalar
  () => run(0x323b0, 0x33479, 1 + int(3)) + run(0x1e6c0, 0x1e6ff, 1),   // letters new in Unicode 17
  () => pick(['a', '-', '=', '中', ' ', '\n', '9']).repeat(1 + int(400)),  // long runs
];

function documentOf(size) {
  let doc = '';
  while (doc.length < size) {
    doc += pick(segments)();
    if (rand() < 0.7) doc += ' ';
  }
  return doc;
}

let docs = [];
let total = 0;
while (!args.worker && total < args.bytes) {
  const doc = rand() < 0.03 ? '' : documentOf(rand() < 0.1 ? int(20) : int(4000));
  docs.push(doc);
  total += Buffer.byteLength(doc, 'utf8');
}

// ---- writing ----------------------------------------------------------------------------------
fs.mkdirSync(args.out, { recursive: true });
const framed = (strings) => Buffer.concat(strings.flatMap((s) => {
  const bytes = Buffer.from(s, 'utf8');
  const n = Buffer.alloc(4);
  n.writeUInt32LE(bytes.length);
  return [n, bytes];
}));
const idsFile = (lists) => {
  const n = lists.reduce((a, l) => a + 1 + l.length, 0);
  const out = Buffer.alloc(4 * n);
  let at = 0;
  for (const l of lists) {
    out.writeUInt32LE(l.length, at);
    at += 4;
    for (const id of l) {
      out.writeInt32LE(id, at);
      at += 4;
    }
  }
  return out;
};
if (args.worker) {
  const bytes = fs.readFileSync(path.join(args.out, 'docs.bin'));
  for (let at = 0; at + 4 <= bytes.length;) {
    const n = bytes.readUInt32LE(at);
    docs.push(bytes.subarray(at + 4, at + 4 + n).toString('utf8'));
    at += 4 + n;
  }
} else {
  fs.writeFileSync(path.join(args.out, 'docs.bin'), framed(docs));
}
if (args.textOnly) process.exit(0);

async function encodeAll(tokenizer, texts, addSpecialTokens) {
  const out = [];
  for (let i = 0; i < texts.length; i += 256) {
    const batch = await tokenizer.encodeBatch(texts.slice(i, i + 256), { addSpecialTokens });
    for (const e of batch) out.push(e.getIds());
  }
  return out;
}

// Variants of a tokenizer.json: settings the real files leave unused, on their own tokens.
function variantOf(json) {
  const v = JSON.parse(JSON.stringify(json));
  const added = v.added_tokens;
  const byContent = (c) => added.find((t) => t.content === c);
  const begin = byContent('<|begin_of_text|>') || byContent('<|endoftext|>');
  const reserved = added.filter((t) => t !== begin).slice(-5);
  Object.assign(reserved[0], { lstrip: true });
  Object.assign(reserved[1], { rstrip: true });
  Object.assign(reserved[2], { content: 'ab', single_word: true, special: false, normalized: false });
  Object.assign(reserved[3], { content: 'Hello', special: false, normalized: true });
  Object.assign(reserved[4], { content: 'e\u0301t\u00e9', special: false, normalized: true });
  const steps = v.pre_tokenizer.type === 'Sequence' ? v.pre_tokenizer.pretokenizers : [v.pre_tokenizer];
  for (const s of steps) if (s.type === 'ByteLevel') s.add_prefix_space = true;
  v.post_processor = {
    type: 'Sequence',
    processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
      { type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: begin.content, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [{ SpecialToken: { id: begin.content, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
               { SpecialToken: { id: begin.content, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { [begin.content]: { id: begin.content, ids: [begin.id], tokens: [begin.content] } } },
    ],
  };
  return v;
}

// Patterns beyond the real files' for the regex engine, each on texts that tell matches apart.
const patterns = ["(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  '\\p{N}{2,4}', '(?i:ab|c)+', '[a-c\\s]+', 'x(?=y)', 'x(?!y)', '\\x{41}+|\\u0042', '.', '(a|ab)(c|bcd)',
  '[^a-z]+', 'a{,2}', '(?:ab)*c', '\\P{L}+', '\\S+', '[\\p{L}\\p{N}_]+', 'b{2}|a?', '(?i)k+|s', '\\.|\\+|\\[',
  '[-a]+|[a\\-z]+', ' ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+'];
const curatedPatterns = patterns.length;
// And random patterns from pieces of regex syntax (Oniguruma refuses some; so may Lattice).
const regexPieces = ['a', 'b', 'x', "'", '\u00e9', '.', '\\s', '\\S', '\\p{L}', '\\p{N}', '\\p{L}+',
  '[a-c]', '[^\\r\\n\\p{L}]', '[\\s\\p{N}]', '[\\r\\n]*', '(?i:s|t)', '(?i)', '\\x{41}', ' ?',
  '\\s+(?!\\S)', '(?!a)', '(?=b)', '(?:', '(', ')', '|', '?', '*', '+', '{1,3}', '{2}', '{,2}',
  '{3,}', '[', ']', '{', '}'];
for (let i = 0; i < 3000; i++) {
  let pattern = '';
  for (let k = 1 + int(7); k > 0; k--) pattern += pick(regexPieces);
  patterns.push(pattern);
}
const regexTexts = ['abcABC aab ac', 'xyxzx xy', '12 345 6789 0 ١٢٣', 'AAB\u00c0bb  \n\t', 'Kk\u212aSs\u017f',
  'a-b-z [.+]', 'abcd abc ab a', 'hello, world!  \r\n 123 \u00e9t\u00e9', '', 'ab\nc\u2028d'];

// One tokenizer's ids, normalized text and variant (worker mode); returns its summary.
async function encodeWith(name, file) {
  const t0 = Date.now();
  const variantDocs = [];
  for (let i = 0, n = 0; i < docs.length && n < args.variantBytes; i++) {
    variantDocs.push(docs[i]);
    n += Buffer.byteLength(docs[i], 'utf8');
  }
  const tokenizer = hf.Tokenizer.fromFile(file);
  const ids = await encodeAll(tokenizer, docs, false);
  fs.writeFileSync(path.join(args.out, `${name}.ids`), idsFile(ids));
  const normalizer = tokenizer.getNormalizer();
  if (normalizer) {
    fs.writeFileSync(path.join(args.out, `${name}.norm.bin`), framed(docs.map((d) => normalizer.normalizeString(d))));
  }
  const variantDir = path.join(args.out, `${name}-variant`);
  fs.mkdirSync(variantDir, { recursive: true });
  const variantFile = path.join(variantDir, 'tokenizer.json');
  fs.writeFileSync(variantFile, JSON.stringify(variantOf(JSON.parse(fs.readFileSync(file, 'utf8')))));
  fs.copyFileSync(path.join(path.dirname(file), 'tokenizer_config.json'), path.join(variantDir, 'tokenizer_config.json'));
  const variantIds = await encodeAll(hf.Tokenizer.fromFile(variantFile), variantDocs, true);
  fs.writeFileSync(path.join(args.out, `${name}-variant.ids`), idsFile(variantIds));
  return { tokens: ids.reduce((a, l) => a + l.length, 0), seconds: (Date.now() - t0) / 1e3 };
}

// A worker per tokenizer, in parallel; resolves to their summaries by name.
function runWorkers() {
  const { spawn } = require('child_process');
  return Promise.all(args.tokenizers.map(([name, file]) => new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [__filename, '--worker', '--out', args.out, '--node-modules',
      args.modules, '--variant-bytes', String(args.variantBytes), `${name}=${file}`],
    { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.on('close', (code) => (code === 0 ? resolve([name, JSON.parse(out)])
                                            : reject(new Error(`worker for ${name} failed (${code})`))));
  }))).then(Object.fromEntries);
}

async function main() {
  if (args.worker) {
    const [[name, file]] = args.tokenizers;
    console.log(JSON.stringify(await encodeWith(name, file)));
    return;
  }
  const info = { reference: require(require.resolve('@anush008/tokenizers/package.json', { paths: [args.modules] })).version,
    node: process.versions.node, seed: args.seed, documents: docs.length, bytes: total, tokenizers: {} };
  const workers = runWorkers();
  const cases = [];
  for (const [index, pattern] of patterns.entries()) {
    const random = index >= curatedPatterns;
    let pre;
    try {
      pre = hf.Tokenizer.fromString(JSON.stringify({
      version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
      pre_tokenizer: { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
      post_processor: null, decoder: null,
      model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
               end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
               vocab: {}, merges: [] },
      })).getPreTokenizer();
    } catch (e) {
      continue;  // Oniguruma refuses it
    }
    for (const text of regexTexts) {
      cases.push({ pattern, random, text, pieces: pre.preTokenizeString(text).map((p) => p[0]) });
    }
  }
  fs.writeFileSync(path.join(args.out, 'regex.json'), JSON.stringify(cases));
  info.tokenizers = await workers;
  fs.writeFileSync(path.join(args.out, 'info.json'), JSON.stringify(info, null, 1));
  console.log(JSON.stringify(info));
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
