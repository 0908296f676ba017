// Transcription of Megatron-LM megatron/core/datasets/gpt_dataset.py (GPTDataset and its
// module functions), helpers.cpp (build_sample_idx, build_blending_indices),
// blended_megatron_dataset_builder.py (_get_size_per_split_per_dataset) and utils.py
// (normalize). tests/data/make_gpt_reference.py is the independent numpy transcription the
// test compares against.
#include "data/gpt_indices.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

namespace lattice::gpt_index {

int64_t tokens_per_epoch(std::span<const int32_t> sequence_lengths, size_t begin, size_t end) {
  assert(begin <= end && end <= sequence_lengths.size());
  return std::accumulate(sequence_lengths.begin() + static_cast<std::ptrdiff_t>(begin),
                         sequence_lengths.begin() + static_cast<std::ptrdiff_t>(end), int64_t{0});
}

int num_epochs(int64_t tokens_per_epoch, int64_t num_samples, int seq_length) {
  assert(tokens_per_epoch > 0 && num_samples >= 0);
  const int64_t requested = num_samples * seq_length + kAddExtraToken;
  int epochs = 1;
  for (int64_t tokens = tokens_per_epoch; tokens < requested; tokens += tokens_per_epoch) {
    ++epochs;
  }
  return epochs;
}

std::vector<int32_t> build_document_index(size_t begin, size_t end, int num_epochs,
                                          NumpyRandomState& random_state,
                                          bool separate_final_epoch) {
  if (!separate_final_epoch || num_epochs == 1) {
    // numpy.mgrid[0:num_epochs, 0:len(documents)][1] filled with the documents: every epoch
    // lists them in order; then one shuffle of the whole array.
    std::vector<int32_t> index;
    index.reserve(static_cast<size_t>(num_epochs) * (end - begin));
    for (int epoch = 0; epoch < num_epochs; ++epoch) {
      for (size_t doc = begin; doc < end; ++doc) index.push_back(static_cast<int32_t>(doc));
    }
    random_state.shuffle(std::span<int32_t>(index));
    return index;
  }
  std::vector<int32_t> index =
      build_document_index(begin, end, num_epochs - 1, random_state, false);
  const std::vector<int32_t> last = build_document_index(begin, end, 1, random_state, false);
  index.insert(index.end(), last.begin(), last.end());
  return index;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index, int seq_length,
                                        int num_epochs, int64_t tokens_per_epoch) {
  assert(seq_length > 1 && num_epochs > 0 && tokens_per_epoch > 1);
  const int64_t num_samples =
      (num_epochs * tokens_per_epoch - kAddExtraToken) / seq_length;  // drop the last partial
  const auto last_position = static_cast<int64_t>(document_index.size()) - 1;
  std::vector<int64_t> sample_index(static_cast<size_t>(2 * (num_samples + 1)));
  int64_t sample = 0;
  int64_t position = 0;  // into document_index
  int64_t offset = 0;    // into that document
  sample_index[0] = position;
  sample_index[1] = offset;
  ++sample;
  while (sample <= num_samples) {
    int64_t remaining = seq_length + kAddExtraToken;
    while (remaining != 0) {
      const int64_t document_length = sequence_lengths[document_index[position]] - offset;
      remaining -= document_length;
      if (remaining <= 0) {
        // The sample ends inside this document; the next one starts at its last token.
        offset += remaining + document_length - kAddExtraToken;
        remaining = 0;
      } else {
        if (position == last_position) {
          // Out of documents: only the final sample can get here (helpers.cpp asserts it).
          assert(sample == num_samples);
          offset = sequence_lengths[document_index[position]] - kAddExtraToken;
          break;
        }
        ++position;
        offset = 0;
      }
    }
    sample_index[2 * sample] = position;
    sample_index[2 * sample + 1] = offset;
    ++sample;
  }
  return sample_index;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size,
                                         NumpyRandomState& random_state) {
  assert(0 <= num_samples && num_samples <= total_size);
  std::vector<int64_t> index(static_cast<size_t>(total_size));
  std::iota(index.begin(), index.end(), int64_t{0});
  const std::span<int64_t> all(index);
  random_state.shuffle(all.first(static_cast<size_t>(num_samples)));
  if (num_samples != total_size)
    random_state.shuffle(all.subspan(static_cast<size_t>(num_samples)));
  return index;
}

GptIndices build_gpt_indices(std::span<const int32_t> sequence_lengths, size_t begin, size_t end,
                             int64_t num_samples, int seq_length, uint32_t seed) {
  const int64_t epoch_tokens = tokens_per_epoch(sequence_lengths, begin, end);
  assert(seq_length > 1 && epoch_tokens > 1);
  GptIndices out;
  out.num_epochs = num_epochs(epoch_tokens, num_samples, seq_length);
  int64_t num_samples_sans_final_epoch = 0;
  if (out.num_epochs > 1) {
    num_samples_sans_final_epoch =
        ((out.num_epochs - 1) * epoch_tokens - kAddExtraToken) / seq_length;
    const int64_t num_samples_from_final_epoch = num_samples - num_samples_sans_final_epoch;
    const int64_t num_samples_per_epoch = (epoch_tokens - kAddExtraToken) / seq_length;
    assert(num_samples_from_final_epoch >= 0);
    assert(num_samples_from_final_epoch <= num_samples_per_epoch + 1);
    // Python: num_samples_from_final_epoch < int(threshold * num_samples_per_epoch).
    const auto threshold = static_cast<int64_t>(kSeparateFinalEpochThreshold *
                                                static_cast<double>(num_samples_per_epoch));
    out.separate_final_epoch = num_samples_from_final_epoch < threshold;
  }
  NumpyRandomState random_state(seed);
  out.document_index =
      build_document_index(begin, end, out.num_epochs, random_state, out.separate_final_epoch);
  out.sample_index = build_sample_index(sequence_lengths, out.document_index, seq_length,
                                        out.num_epochs, epoch_tokens);
  const auto total = static_cast<int64_t>(out.sample_index.size() / 2) - 1;
  out.shuffle_index = build_shuffle_index(
      out.separate_final_epoch ? num_samples_sans_final_epoch : total, total, random_state);
  return out;
}

void gather_sample(const IndexedDataset& data, std::span<const int32_t> document_index,
                   std::span<const int64_t> sample_index, int64_t position, int seq_length,
                   int32_t* tokens) {
  const auto lengths = data.sequence_lengths();
  const int64_t first = sample_index[2 * position];
  const int64_t first_offset = sample_index[2 * position + 1];
  const int64_t last = sample_index[2 * position + 2];
  const int64_t last_offset = sample_index[2 * position + 3];
  int64_t written = 0;
  for (int64_t i = first; i <= last; ++i) {
    const auto sequence = static_cast<size_t>(document_index[i]);
    const int64_t begin = i == first ? first_offset : 0;
    const int64_t end = i == last ? last_offset + kAddExtraToken : lengths[sequence];
    data.read(sequence, static_cast<size_t>(begin), static_cast<size_t>(end - begin),
              tokens + written);
    written += end - begin;
  }
  // Megatron pads short samples only when the last partial sequence is kept, which Lattice
  // never does, so every sample is full.
  assert(written == seq_length + kAddExtraToken);
  (void)seq_length;
}

namespace {
// numpy's pairwise_sum for float64 (umath loops_utils.h): blocks of 8 partial sums up to
// 128 elements, halves above; below 8 a plain loop from 0.
double numpy_pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += a[i];
    return sum;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += a[i];
    return sum;
  }
  size_t half = n / 2;
  half -= half % 8;
  return numpy_pairwise_sum(a, half) + numpy_pairwise_sum(a + half, n - half);
}
}  // namespace

std::vector<double> normalize(std::span<const double> weights) {
  const double sum = numpy_pairwise_sum(weights.data(), weights.size());
  std::vector<double> out(weights.begin(), weights.end());
  for (double& w : out) w /= sum;
  return out;
}

BlendingIndices build_blending_indices(std::span<const double> weights, int64_t size) {
  assert(!weights.empty() && weights.size() < 32767 && size >= 0);
  BlendingIndices out;
  out.dataset_index.resize(static_cast<size_t>(size));
  out.dataset_sample_index.resize(static_cast<size_t>(size));
  std::vector<int64_t> taken(weights.size(), 0);
  for (int64_t sample = 0; sample < size; ++sample) {
    const double step = std::max(static_cast<double>(sample), 1.0);
    size_t best = 0;
    double best_error = 0.0;
    for (size_t d = 0; d < weights.size(); ++d) {
      // The product is rounded before the subtraction, as in helpers.cpp built without
      // -march: GCC contracts a * b - c into one FMA under -march=native (C++ defaults to
      // -ffp-contract=fast even with -std=c++20), which picks other datasets on near-ties.
      const volatile double target = weights[d] * step;
      const double error = target - static_cast<double>(taken[d]);
      if (d == 0 || error > best_error) {
        best = d;
        best_error = error;
      }
    }
    out.dataset_index[static_cast<size_t>(sample)] = static_cast<int16_t>(best);
    out.dataset_sample_index[static_cast<size_t>(sample)] = taken[best];
    ++taken[best];
  }
  return out;
}

std::vector<int64_t> size_per_dataset(std::span<const double> normalized_weights, int64_t size,
                                      double surplus) {
  std::vector<int64_t> out;
  out.reserve(normalized_weights.size());
  for (const double weight : normalized_weights) {
    const double target = std::ceil(static_cast<double>(size) * weight);
    out.push_back(static_cast<int64_t>(std::ceil(target * (1.0 + surplus))));
  }
  return out;
}

}  // namespace lattice::gpt_index
