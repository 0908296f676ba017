// Cross-checks gpt2_sample_ids.json (made by make_gpt2_reference.py, Megatron's algorithm)
// against two independent GPT-2 encoders on the same vocab.json / merges.txt:
//   - Hugging Face's tokenizers (Rust; npm @anush008/tokenizers), a BPE model with the
//     ByteLevel pre-tokenizer as GPT-2's tokenizer.json has it: it must agree everywhere;
//   - npm gpt-3-encoder (the pattern on JavaScript's regex engine): it must differ only where
//     U+0085 or U+FEFF meets whitespace, because JavaScript's \s holds U+FEFF and not U+0085.
// Exits 1 when either expectation fails. Install the two packages outside the tracked files:
//   npm install --prefix build/hf-tokenizers @anush008/tokenizers@0.6.0
//   npm install --prefix build/gpt2-reference gpt-3-encoder@1.1.4
//   node tests/data/check_gpt2_reference.js [GPT2_DIR]
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const dataDir = process.env.LATTICE_DATA_DIR ||
                path.join(process.env.XDG_DATA_HOME || path.join(require('os').homedir(), '.local', 'share'),
                          'lattice');
const gpt2Dir = process.argv[2] || path.join(dataDir, 'gpt2');
const load = (dir, name) => require(require.resolve(name, { paths: [path.join(root, 'build', dir, 'node_modules')] }));
const hf = load('hf-tokenizers', '@anush008/tokenizers');
const gpt3 = load('gpt2-reference', 'gpt-3-encoder');

const sample = fs.readFileSync(path.join(__dirname, 'gpt2_sample.txt'), 'utf8');
const expected = JSON.parse(fs.readFileSync(path.join(__dirname, 'gpt2_sample_ids.json'), 'utf8')).ids;
// The two strings of issue 20, with Megatron's ids.
const cases = [['x \u0085y', [87, 220, 126, 227, 88]], ['x \ufeffy', [87, 27332, 119, 123, 88]]];
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const firstDifference = (a, b) => a.findIndex((x, i) => x !== b[i]);
const quoted = (text) =>
  '"' + text.replace(/[^\x20-\x7e]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')) + '"';

async function main() {
  const model = await hf.BPE.fromFile(path.join(gpt2Dir, 'vocab.json'), path.join(gpt2Dir, 'merges.txt'));
  const tokenizer = new hf.Tokenizer(model);
  tokenizer.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));  // no prefix space, regex on
  const hfEncode = async (text) => (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();

  let failed = false;
  const hfSample = await hfEncode(sample);
  const hfAgrees = same(hfSample, expected);
  console.log(`Hugging Face tokenizers, gpt2_sample.txt: ${hfAgrees ? 'same' : 'DIFFERENT'} ids ` +
              `(${hfSample.length} vs ${expected.length}${hfAgrees ? '' : `, first at ${firstDifference(hfSample, expected)}`})`);
  failed ||= !hfAgrees;
  for (const [text, ids] of cases) {
    const got = await hfEncode(text);
    console.log(`Hugging Face tokenizers, ${quoted(text)}: ${got.join(' ')} (Megatron ${ids.join(' ')})`);
    failed ||= !same(got, ids);
  }

  // gpt-3-encoder must agree once the two characters are taken out of the sample.
  const gpt3Sample = gpt3.encode(sample);
  const strip = (text) => text.replace(/[\u0085\ufeff]/g, '');
  const gpt3Stripped = gpt3.encode(strip(sample));
  const hfStripped = await hfEncode(strip(sample));
  const differsOnlyThere = !same(gpt3Sample, expected) && same(gpt3Stripped, hfStripped);
  console.log(`npm gpt-3-encoder, gpt2_sample.txt: ${same(gpt3Sample, expected) ? 'same' : 'different'} ids; ` +
              `without U+0085 and U+FEFF: ${same(gpt3Stripped, hfStripped) ? 'same' : 'DIFFERENT'}`);
  failed ||= !differsOnlyThere;
  for (const [text] of cases) console.log(`npm gpt-3-encoder, ${quoted(text)}: ${gpt3.encode(text).join(' ')}`);
  process.exit(failed ? 1 : 0);
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
