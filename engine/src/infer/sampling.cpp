// Sampling rules (sampling.h): temperature, then top-k or nucleus filtering, then one draw.
// Probabilities are computed in double so that a filtered set sums to one exactly enough for
// a draw from a 53-bit uniform.
#include "infer/sampling.h"

#include <algorithm>
#include <cmath>

namespace lattice {

namespace {
bool by_value_then_id(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}
}  // namespace

namespace {
// The max logit and log sum exp(logit - max), in double: log p(t) = logit[t] - max - log_sum.
struct LogNormalizer {
  float maxv;
  double log_sum;
  float logprob(const float* logits, int32_t token) const {
    return static_cast<float>(static_cast<double>(logits[token]) - maxv - log_sum);
  }
};

LogNormalizer log_normalizer(const float* logits, int V) {
  float maxv = logits[0];
  for (int i = 1; i < V; i++) maxv = std::max(maxv, logits[i]);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += std::exp(static_cast<double>(logits[i]) - maxv);
  return {maxv, std::log(sum)};
}
}  // namespace

float token_logprob(const float* logits, int V, int32_t token) {
  return log_normalizer(logits, V).logprob(logits, token);
}

void top_token_logprobs(const float* logits, int V, int k, std::vector<TokenLogprob>& out,
                        SamplingScratch& scratch) {
  out.clear();
  k = std::min(k, V);
  if (k <= 0) return;
  const LogNormalizer norm = log_normalizer(logits, V);
  auto& c = scratch.candidates;
  c.resize(V);
  for (int i = 0; i < V; i++) c[i] = {logits[i], i};
  std::partial_sort(c.begin(), c.begin() + k, c.end(), by_value_then_id);
  for (int i = 0; i < k; i++) out.push_back({c[i].second, norm.logprob(logits, c[i].second)});
}

int32_t argmax_token(const float* logits, int V) {
  int32_t best = 0;
  for (int i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t sample_token(const float* logits, int V, const SamplingParams& params, std::mt19937_64& rng,
                     SamplingScratch& scratch) {
  if (params.greedy()) return argmax_token(logits, V);
  auto& c = scratch.candidates;
  c.resize(V);
  const float inv_t = 1.0f / params.temperature;
  for (int i = 0; i < V; i++) c[i] = {logits[i] * inv_t, i};
  size_t n = c.size();
  if (params.top_k > 0 && params.top_k < V) {
    n = params.top_k;
    std::partial_sort(c.begin(), c.begin() + n, c.end(), by_value_then_id);
  }
  // Probabilities of the n candidates (in the first n places when top-k sorted them).
  float maxv = c[0].first;
  for (size_t i = 1; i < n; i++) maxv = std::max(maxv, c[i].first);
  double total = 0;
  for (size_t i = 0; i < n; i++) {
    c[i].first = static_cast<float>(std::exp(static_cast<double>(c[i].first) - maxv));
    total += c[i].first;
  }
  if (params.top_p > 0.0f && params.top_p < 1.0f) {
    // Nucleus: the most likely tokens until their mass reaches top_p. Sort as little as
    // needed: most of the mass usually sits in the first few dozen tokens.
    const double want = params.top_p * total;
    size_t sorted = 0, keep = 0;
    double mass = 0;
    for (size_t block = 64; keep == 0; block *= 16) {
      const size_t upto = std::min(n, block);
      std::partial_sort(c.begin() + sorted, c.begin() + upto, c.begin() + n, by_value_then_id);
      for (size_t i = sorted; i < upto && keep == 0; i++) {
        mass += c[i].first;
        if (mass >= want) keep = i + 1;
      }
      sorted = upto;
      if (upto == n && keep == 0) keep = n;
    }
    n = keep;
    total = mass;
  }
  double u = uniform01(rng) * total;
  for (size_t i = 0; i < n; i++) {
    u -= c[i].first;
    if (u < 0) return c[i].second;
  }
  return c[n - 1].second;
}

}  // namespace lattice
