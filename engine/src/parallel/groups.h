// The communicators of one rank, split from the world along the layout's groups
// (ARCHITECTURE.md "Parallel layout"): tensor, data, pipeline, model-parallel and embedding.
#pragma once

#include <memory>

#include "lattice/comm.h"
#include "lattice/layout.h"

namespace lattice {

struct ProcessGroups {
  ParallelLayout layout;
  ParallelLayout::Coord coord;
  Comm* world = nullptr;
  std::unique_ptr<Comm> tp, dp, pp, model, embedding;
  bool first_stage() const { return coord.pp == 0; }
  bool last_stage() const { return coord.pp == layout.pp - 1; }
  // Holds a word embedding whose gradient is summed with another stage's.
  bool in_embedding_group() const { return layout.pp > 1 && (first_stage() || last_stage()); }
};

// Collective over `world` (every rank calls it in the same order).
Result<ProcessGroups> make_process_groups(Comm& world, const ParallelLayout& layout);

}  // namespace lattice
