// Choosing the next token from one row of logits (infer.h SamplingParams), and the
// log-probabilities generation reports. Kept apart from the model so that tests can pin the
// rules (top-k 1 and a tiny top-p are greedy) on hand-made logits.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "lattice/infer.h"

namespace lattice {

// Reusable buffers for sample_token (one per generator: no allocation per token).
struct SamplingScratch {
  std::vector<std::pair<float, int32_t>> candidates;  // (scaled logit or probability, id)
};

// log softmax(logits (V))[token], accumulated in double.
float token_logprob(const float* logits, int V, int32_t token);
// The `k` most likely tokens of logits (V), most likely first (ties: lower id first), with
// log-probabilities computed exactly as token_logprob's (the same bits for the same token).
void top_token_logprobs(const float* logits, int V, int k, std::vector<TokenLogprob>& out,
                        SamplingScratch& scratch);
// The arg-max of logits (V); the lowest id among equals.
int32_t argmax_token(const float* logits, int V);
// The next token of logits (V) under `params`, drawing from `rng` unless greedy.
int32_t sample_token(const float* logits, int V, const SamplingParams& params, std::mt19937_64& rng,
                     SamplingScratch& scratch);

}  // namespace lattice
