// The peer of lattice-bench-tokenizer: the npm package gpt-tokenizer (pure JavaScript,
// tiktoken's algorithm) encoding the same file with GPT-2's vocabulary (r50k_base), one
// document per non-empty line, on Node's one thread. Its merge cache is cleared before each
// pass, as each Lattice pass starts with empty caches. Prints a line and "RESULT {json}".
// Its ids are GPT-2's except where U+0085 or U+FEFF meets whitespace (JavaScript's \s holds
// U+FEFF and not U+0085; Megatron's and Lattice's hold U+0085 and not U+FEFF).
// Install the package outside the repository's tracked files, e.g. (build/ is git-ignored):
//   npm install --prefix build/bench-node gpt-tokenizer@4.0.0
// Usage: node tests/bench/gpt_tokenizer_peer.js FILE [--repeat 3]
//                                               [--node-modules build/bench-node/node_modules]
'use strict';
const fs = require('fs');
const path = require('path');

let file = null, repeat = 3;
let modules = path.join(__dirname, '..', '..', 'build', 'bench-node', 'node_modules');
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--repeat' && i + 1 < args.length) repeat = parseInt(args[++i], 10);
  else if (args[i] === '--node-modules' && i + 1 < args.length) modules = path.resolve(args[++i]);
  else if (file === null && !args[i].startsWith('-')) file = args[i];
  else {
    console.error(`error: unexpected argument '${args[i]}'`);
    process.exit(2);
  }
}
if (file === null || !(repeat >= 1)) {
  console.error('usage: node tests/bench/gpt_tokenizer_peer.js FILE [--repeat N] [--node-modules DIR]');
  process.exit(2);
}
let encoding, version;
try {
  encoding = require(require.resolve('gpt-tokenizer/encoding/r50k_base', { paths: [modules] }));
  version = require(require.resolve('gpt-tokenizer/package.json', { paths: [modules] })).version;
} catch (e) {
  console.error(`error: gpt-tokenizer not found under ${modules}; install it with\n` +
                '  npm install --prefix build/bench-node gpt-tokenizer@4.0.0');
  process.exit(2);
}

const lines = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.length > 0);
const bytes = lines.reduce((n, l) => n + Buffer.byteLength(l, 'utf8'), 0);
let best = { seconds: Infinity, tokens: 0 };
for (let r = 0; r < repeat; r++) {
  encoding.clearMergeCache();
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  for (const line of lines) tokens += encoding.encode(line).length;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  if (seconds < best.seconds) best = { seconds, tokens };
}
const mbPerS = bytes / 1e6 / best.seconds;
console.log(`gpt-tokenizer ${version} (Node ${process.versions.node}): ${lines.length} documents, ` +
            `${(bytes / 1e6).toFixed(2)} MB, ${best.seconds.toFixed(3)} s, ${mbPerS.toFixed(2)} MB/s, ` +
            `${(best.tokens / best.seconds / 1e6).toFixed(3)} Mtokens/s, ${best.tokens} tokens`);
console.log('RESULT ' + JSON.stringify({
  impl: 'gpt-tokenizer', version, threads: 1, seconds: best.seconds, bytes, tokens: best.tokens,
  mb_per_s: mbPerS, tokens_per_s: best.tokens / best.seconds,
}));
