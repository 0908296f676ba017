// Writes gpt2_sample_ids.json: the ids that GPT-2's encoder, as the npm package
// gpt-3-encoder@1.1.4 implements it, gives for gpt2_sample.txt. test_gpt2_bpe checks
// Lattice's tokenizer against them. Run once, when the sample text changes:
//   npm install --prefix build/gpt2-reference gpt-3-encoder@1.1.4
//   node tests/data/make_gpt2_reference.js [build/gpt2-reference/node_modules]
// The expected file records the Node and Unicode versions: the regex's \p{L}, \p{N} and \s
// follow Node's Unicode tables, as does engine/src/data/unicode_classes.cpp.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const modules = path.resolve(process.argv[2] || 'build/gpt2-reference/node_modules');
const packageDir = path.join(modules, 'gpt-3-encoder');
const { encode, decode } = require(packageDir);
const version = require(path.join(packageDir, 'package.json')).version;

const textPath = path.join(__dirname, 'gpt2_sample.txt');
const bytes = fs.readFileSync(textPath);
const text = bytes.toString('utf8');
if (!Buffer.from(text, 'utf8').equals(bytes)) throw new Error(`${textPath} is not valid UTF-8`);

const ids = encode(text);
if (decode(ids) !== text) throw new Error('gpt-3-encoder does not round-trip the sample text');
const eod = 50256;
if (ids.includes(eod)) throw new Error('the sample text encoded to <|endoftext|> (id 50256)');

const rows = [];
for (let i = 0; i < ids.length; i += 16) rows.push('    ' + ids.slice(i, i + 16).join(', '));
const out = `{
  "generator": "tests/data/make_gpt2_reference.js",
  "encoder": "npm gpt-3-encoder@${version} encode()",
  "node": "${process.versions.node} (ICU ${process.versions.icu}, Unicode ${process.versions.unicode})",
  "text": "gpt2_sample.txt",
  "text_sha256": "${crypto.createHash('sha256').update(bytes).digest('hex')}",
  "ids": [
${rows.join(',\n')}
  ]
}
`;
fs.writeFileSync(path.join(__dirname, 'gpt2_sample_ids.json'), out);
console.log(`gpt2_sample_ids.json: ${ids.length} ids for ${bytes.length} bytes`);
