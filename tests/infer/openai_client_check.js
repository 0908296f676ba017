// Drives `lattice serve` with OpenAI's own Node client (npm `openai`) the way applications and
// lm-evaluation-harness do, and checks the answers' fields and that their log-probabilities
// agree with each other. usage: node openai_client_check.js PORT OPENAI_MODULE_DIR
'use strict';
const assert = require('assert');
const OpenAI = require(process.argv[3]);

const client = new OpenAI({baseURL: `http://127.0.0.1:${process.argv[2]}/v1`, apiKey: 'none',
                           maxRetries: 0, timeout: 120000});
const close = (a, b, what) =>
  assert(Math.abs(a - b) <= 1e-4, `${what}: ${a} and ${b} differ by more than 1e-4`);
const maxOf = (dict) => Math.max(...Object.values(dict));
const messages = [{role: 'system', content: 'You are terse.'},
                  {role: 'user', content: 'Name a colour.'}];

async function chat() {
  const r = await client.chat.completions.create({
      model: 'tiny', messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3});
  assert.strictEqual(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.strictEqual(r.model, 'tiny');
  const c = r.choices[0];
  assert.strictEqual(r.choices.length, 1);
  assert.strictEqual(c.message.role, 'assistant');
  assert.strictEqual(typeof c.message.content, 'string');
  assert(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
  const lp = c.logprobs.content;
  assert.strictEqual(r.usage.completion_tokens,
                     lp.length + (c.finish_reason === 'stop' ? 1 : 0));  // an ending EOD
  if (c.finish_reason === 'length') assert.strictEqual(lp.length, 6);
  assert(r.usage.prompt_tokens > 10, `prompt_tokens ${r.usage.prompt_tokens}`);
  assert.strictEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.strictEqual(lp.map((t) => t.token).join(''), c.message.content);
  for (const t of lp) {
    assert.strictEqual(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    close(t.logprob, t.top_logprobs[0].logprob, `chat token ${JSON.stringify(t.token)}`);
    for (let k = 1; k < 3; k++) assert(t.top_logprobs[k].logprob <= t.top_logprobs[k - 1].logprob);
    assert.deepStrictEqual(t.bytes, [...Buffer.from(t.token)]);
  }
  return c;
}

async function chatStream(plain) {
  const stream = await client.chat.completions.create({
      model: 'tiny', messages, max_tokens: 6, temperature: 0, stream: true,
      stream_options: {include_usage: true}});
  let text = '', role = null, finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.strictEqual(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.strictEqual(role, 'assistant');
  assert.strictEqual(text, plain.message.content, 'streamed text differs from stream=false');
  assert.strictEqual(finish, plain.finish_reason);
  assert(usage && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens);
  return chunks;
}

async function badRole() {
  try {
    await client.chat.completions.create({messages: [{role: 'robot', content: 'hi'}]});
  } catch (e) {
    assert.strictEqual(e.status, 400);
    assert.match(e.message, /messages\[0\]\.role must be "system", "user" or "assistant"/);
    return;
  }
  assert.fail('a message with role "robot" was accepted');
}

// lm-evaluation-harness's loglikelihood request, then each echoed position checked against a
// separate greedy completion from the prompt's prefix (decode path against prefill path).
async function echoLogprobs() {
  const prompt = 'The cat sat on the mat and looked at the door';
  const r = await client.completions.create(
      {model: 'tiny', prompt, max_tokens: 0, echo: true, logprobs: 1, temperature: 0});
  const c = r.choices[0];
  assert.strictEqual(c.text, prompt);
  const l = c.logprobs;
  const n = l.tokens.length;
  assert.strictEqual(l.tokens.join(''), prompt);
  assert.strictEqual(r.usage.prompt_tokens, n);
  assert.strictEqual(r.usage.completion_tokens, 0);
  assert.strictEqual(l.token_logprobs[0], null);
  assert.strictEqual(l.top_logprobs[0], null);
  assert.deepStrictEqual(l.text_offset, l.tokens.map((_, i) => l.tokens.slice(0, i).join('').length));
  for (let i = 1; i < n; i++) {
    assert(l.token_logprobs[i] <= 0 && l.token_logprobs[i] <= maxOf(l.top_logprobs[i]) + 1e-6);
    assert(l.tokens[i] in l.top_logprobs[i], `position ${i}: the prompt token is not listed`);
    close(l.top_logprobs[i][l.tokens[i]], l.token_logprobs[i], `echo position ${i}`);
    const g = await client.completions.create({model: 'tiny', prompt: l.tokens.slice(0, i).join(''),
                                               max_tokens: 1, temperature: 0, logprobs: 1});
    assert.strictEqual(g.usage.prompt_tokens, i, `prefix of ${i} tokens re-tokenised differently`);
    const gl = g.choices[0].logprobs;
    close(gl.token_logprobs[0], maxOf(l.top_logprobs[i]), `position ${i}: greedy vs echo top`);
    close(gl.token_logprobs[0], maxOf(gl.top_logprobs[0]), `position ${i}: greedy vs its top`);
    assert.strictEqual(l.top_logprobs[i][gl.tokens[0]], maxOf(l.top_logprobs[i]));
  }
  return n;
}

async function completionsLogprobs() {
  const r = await client.completions.create(
      {model: 'tiny', prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 3});
  const c = r.choices[0];
  assert.strictEqual(r.object, 'text_completion');
  assert(['stop', 'length'].includes(c.finish_reason));
  assert.strictEqual(c.logprobs.tokens.join(''), c.text);
  c.logprobs.token_logprobs.forEach((v, i) => {
    close(v, maxOf(c.logprobs.top_logprobs[i]), `completion token ${i}`);
  });
  assert.strictEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
}

(async () => {
  const plain = await chat();
  const chunks = await chatStream(plain);
  await badRole();
  const echoed = await echoLogprobs();
  await completionsLogprobs();
  console.log(`openai client: chat (${plain.logprobs.content.length} tokens, ${chunks} stream ` +
              `chunks), bad role 400, echo logprobs of ${echoed} prompt tokens checked against ` +
              `${echoed - 1} greedy completions, completions logprobs: all passed`);
})().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
