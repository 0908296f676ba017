// The peer of lattice-bench-tokenizer --hf: Hugging Face's own tokenizers (Rust, through npm
// @anush008/tokenizers) encoding the same file with the same tokenizer.json, one document per
// non-empty line (or per frame of a .bin file, as lattice-bench-tokenizer reads it), without
// special tokens. Documents go in batches of 1024 through encodeBatch, on --threads threads
// (RAYON_NUM_THREADS; 1 sets TOKENIZERS_PARALLELISM=false, so a batch runs on one thread).
// Prints a line and "RESULT {json}".
// Install the reference with installers/fetch-hf-tokenizers.sh.
// Usage: node tests/bench/hf_tokenizers_peer.js FILE --tokenizer TOKENIZER_JSON [--threads 1]
//                                               [--repeat 3] [--node-modules DIR]
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const dataDir = process.env.LATTICE_DATA_DIR ||
                path.join(process.env.XDG_DATA_HOME || path.join(os.homedir(), '.local', 'share'), 'lattice');
let file = null, tokenizerFile = null, threads = 1, repeat = 3;
let modules = path.join(dataDir, 'hf-tokenizers', 'reference', 'node_modules');
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--tokenizer' && i + 1 < args.length) tokenizerFile = args[++i];
  else if (args[i] === '--threads' && i + 1 < args.length) threads = parseInt(args[++i], 10);
  else if (args[i] === '--repeat' && i + 1 < args.length) repeat = parseInt(args[++i], 10);
  else if (args[i] === '--node-modules' && i + 1 < args.length) modules = path.resolve(args[++i]);
  else if (file === null && !args[i].startsWith('-')) file = args[i];
  else {
    console.error(`error: unexpected argument '${args[i]}'`);
    process.exit(2);
  }
}
if (file === null || tokenizerFile === null || !(repeat >= 1) || !(threads >= 1)) {
  console.error('usage: node tests/bench/hf_tokenizers_peer.js FILE --tokenizer TOKENIZER_JSON ' +
                '[--threads N] [--repeat N] [--node-modules DIR]');
  process.exit(2);
}
// Read when the module loads its thread pool: set before require().
process.env.RAYON_NUM_THREADS = String(threads);
process.env.TOKENIZERS_PARALLELISM = threads > 1 ? 'true' : 'false';
let hf, version;
try {
  hf = require(require.resolve('@anush008/tokenizers', { paths: [modules] }));
  version = require(require.resolve('@anush008/tokenizers/package.json', { paths: [modules] })).version;
} catch (e) {
  console.error(`error: @anush008/tokenizers not found under ${modules}; run installers/fetch-hf-tokenizers.sh`);
  process.exit(2);
}

const raw = fs.readFileSync(file);
let docs = [];
if (file.endsWith('.bin')) {
  for (let at = 0; at + 4 <= raw.length;) {
    const n = raw.readUInt32LE(at);
    docs.push(raw.subarray(at + 4, at + 4 + n).toString('utf8'));
    at += 4 + n;
  }
} else {
  docs = raw.toString('utf8').split('\n').filter((l) => l.length > 0);
}
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, 'utf8'), 0);

async function main() {
  const tokenizer = hf.Tokenizer.fromFile(tokenizerFile);
  let best = { seconds: Infinity, tokens: 0 };
  for (let r = 0; r < repeat; r++) {
    const t0 = process.hrtime.bigint();
    let tokens = 0;
    for (let i = 0; i < docs.length; i += 1024) {
      for (const e of await tokenizer.encodeBatch(docs.slice(i, i + 1024), { addSpecialTokens: false }))
        tokens += e.getLength();
    }
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    if (seconds < best.seconds) best = { seconds, tokens };
  }
  const mbPerS = bytes / 1e6 / best.seconds;
  console.log(`@anush008/tokenizers ${version} (Node ${process.versions.node}), ${threads} thread(s): ` +
              `${docs.length} documents, ${(bytes / 1e6).toFixed(2)} MB, ${best.seconds.toFixed(3)} s, ` +
              `${mbPerS.toFixed(2)} MB/s, ${best.tokens} tokens`);
  console.log('RESULT ' + JSON.stringify({
    impl: 'hf-tokenizers', version, threads, seconds: best.seconds, bytes, tokens: best.tokens,
    mb_per_s: mbPerS, tokens_per_s: best.tokens / best.seconds,
  }));
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
