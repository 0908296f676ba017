// Pipeline schedules (ARCHITECTURE.md "Schedules"): the order in which one pipeline rank runs
// the forward and backward passes of an iteration's micro-batches. Pure arithmetic; the
// executor (pipeline/executor.h) runs the list. docs/design-notes.md#pipeline-schedules
// explains the 1F1B warm-up and the interleaved order.
#pragma once

#include <string>
#include <vector>

namespace lattice {

struct PipelineAction {
  enum Kind { kForward, kBackward };
  Kind kind;
  int chunk;        // model chunk on this rank (virtual stage chunk * stages + rank)
  int micro_batch;  // 0 .. micro_batches-1 of this rank's data-parallel slice
};

// stages = pipeline size, rank = this rank's stage, chunks = model chunks per rank (1 without
// interleaving; then micro_batches % stages == 0). One stage: forward and backward of each
// micro-batch in turn (gradient accumulation). One chunk: 1F1B, a warm-up of
// min(stages - rank - 1, micro_batches) forwards, then one forward one backward, then the
// remaining backwards. Several chunks: Megatron's interleaved 1F1B.
std::vector<PipelineAction> pipeline_schedule(int stages, int rank, int chunks, int micro_batches);

// The most micro-batches whose activations chunk c holds at once in pipeline_schedule(stages,
// rank, chunks, micro_batches), for every chunk: what the executor's pool of chunk c grows to
// (one pool per chunk, so an interleaved rank holds the sum, which can exceed the schedule's
// peak over all chunks together). O(stages * chunks) per chunk, not a walk of the schedule.
std::vector<int> chunk_peaks(int stages, int rank, int chunks, int micro_batches);

// "F0.1" style rendering for tests and --timing-log-level 2 (chunk.micro_batch).
std::string schedule_string(const std::vector<PipelineAction>& actions);

}  // namespace lattice
