#include "pipeline/schedule.h"

#include <algorithm>

namespace lattice {

std::vector<PipelineAction> pipeline_schedule(int stages, int rank, int chunks, int micro_batches) {
  std::vector<PipelineAction> out;
  const int M = micro_batches;
  if (stages == 1 && chunks == 1) {
    for (int mb = 0; mb < M; mb++) {
      out.push_back({PipelineAction::kForward, 0, mb});
      out.push_back({PipelineAction::kBackward, 0, mb});
    }
    return out;
  }
  if (chunks == 1) {
    const int warmup = std::min(stages - rank - 1, M);
    for (int mb = 0; mb < warmup; mb++) out.push_back({PipelineAction::kForward, 0, mb});
    for (int i = 0; i < M - warmup; i++) {
      out.push_back({PipelineAction::kForward, 0, warmup + i});
      out.push_back({PipelineAction::kBackward, 0, i});
    }
    for (int mb = M - warmup; mb < M; mb++) out.push_back({PipelineAction::kBackward, 0, mb});
    return out;
  }
  // Interleaved 1F1B (Megatron's forward_backward_pipelining_with_interleaving): virtual
  // micro-batch k runs chunk (k mod (stages*chunks)) / stages, forward chunks ascending and
  // backward chunks descending, on micro-batch (k / (stages*chunks)) * stages + k mod stages.
  const int total = M * chunks, group = stages * chunks;
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % group) / stages;
    return forward ? c : chunks - 1 - c;
  };
  auto micro_batch_of = [&](int k) { return (k / group) * stages + k % stages; };
  int warmup = (stages - rank - 1) * 2 + (chunks - 1) * stages;
  if (M == stages) warmup = total;  // Megatron: everything warms up
  warmup = std::min(warmup, total);
  const int remaining = total - warmup;
  for (int k = 0; k < warmup; k++)
    out.push_back({PipelineAction::kForward, chunk_of(k, true), micro_batch_of(k)});
  for (int i = 0; i < remaining; i++) {
    const int kf = warmup + i;
    out.push_back({PipelineAction::kForward, chunk_of(kf, true), micro_batch_of(kf)});
    out.push_back({PipelineAction::kBackward, chunk_of(i, false), micro_batch_of(i)});
  }
  for (int k = remaining; k < total; k++)
    out.push_back({PipelineAction::kBackward, chunk_of(k, false), micro_batch_of(k)});
  return out;
}

std::vector<int> chunk_peaks(int stages, int rank, int chunks, int micro_batches) {
  const int M = micro_batches;
  if (chunks == 1) return {std::max(0, std::min(M, stages == 1 ? 1 : stages - rank))};
  // Interleaved, as pipeline_schedule orders it: forward k runs chunk (k mod group) / stages,
  // backward k the chunk counted from the last. The forwards of chunk c among the first n are
  // `stages` per whole group and the part of the last group that falls in c's block.
  const int total = M * chunks, group = stages * chunks;
  auto runs_of = [&](int c, int n) {
    return (n / group) * stages + std::clamp(n % group - c * stages, 0, stages);
  };
  int warmup = (stages - rank - 1) * 2 + (chunks - 1) * stages;
  if (M == stages) warmup = total;
  warmup = std::min(warmup, total);
  const int remaining = total - warmup;
  std::vector<int> peaks(chunks);
  for (int c = 0; c < chunks; c++) {
    // Held after the warm-up, then after each steady forward (before its backward): forwards
    // and backwards both advance `stages` per group of steps, so one group's steps hold the max.
    int peak = runs_of(c, warmup);
    for (int i = 0; i < std::min(remaining, group); i++)
      peak = std::max(peak, runs_of(c, warmup + i + 1) - runs_of(chunks - 1 - c, i));
    peaks[c] = peak;
  }
  return peaks;
}

std::string schedule_string(const std::vector<PipelineAction>& actions) {
  std::string s;
  for (const PipelineAction& a : actions) {
    if (!s.empty()) s += ' ';
    s += a.kind == PipelineAction::kForward ? 'F' : 'B';
    s += std::to_string(a.chunk) + "." + std::to_string(a.micro_batch);
  }
  return s;
}

}  // namespace lattice
