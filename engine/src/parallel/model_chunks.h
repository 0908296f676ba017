// Which model chunks a rank holds (ModelShard from the layout and options), and the whole
// model reassembled on rank 0 from every rank's slices (for --save-hf and the tests that
// check a parallel run against one process).
#pragma once

#include <vector>

#include "lattice/comm.h"
#include "lattice/layout.h"
#include "lattice/train_options.h"
#include "model/param_layout.h"

namespace lattice {

// Chunk `chunk` of the rank at `coord`.
ModelShard shard_of(const ParallelLayout& layout, const ParallelLayout::Coord& coord, int chunk,
                    bool sequence_parallel);

// Collective over `world`: rank 0 returns the parameters of the whole model in
// ParamLayout(config)'s arena order; other ranks return an empty vector. Each tensor is taken
// from the data-parallel rank 0 copy that holds it (replicas are identical), an expert's under
// expert parallelism from the expert-data-parallel rank 0 copy (Note [gathering experts] in
// model_chunks.cpp). params[c]: this rank's chunk c's parameters in the trainer's order
// (ParamLayout(config, shard_of(layout, coord, c, ...)) with its EP rank's experts); null on a
// rank that sends nothing (gather_sender false).
// Whether world rank `rank` sends tensors to gather_full_params (it needs its parameters).
bool gather_sender(const ParallelLayout& layout, int rank);

template <typename T>
Result<std::vector<T>> gather_full_params(Comm& world, const ParallelLayout& layout,
                                          const ModelConfig& config, bool sequence_parallel,
                                          const std::vector<const T*>& params);

}  // namespace lattice
