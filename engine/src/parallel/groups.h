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
  // The LM head is the word embedding (false: an output layer of its own, untied).
  bool tied_head = true;
  bool first_stage() const { return coord.pp == 0; }
  bool last_stage() const { return coord.pp == layout.pp - 1; }
  // Holds a word embedding whose gradient is summed with another stage's: the first and last
  // stage of a pipeline whose LM head is tied to the word embedding.
  bool in_embedding_group() const {
    return tied_head && layout.pp > 1 && (first_stage() || last_stage());
  }
};

// Collective over `world` (every rank calls it in the same order). tied_head: the model's LM
// head is its word embedding (ModelConfig::tied_output()).
Result<ProcessGroups> make_process_groups(Comm& world, const ParallelLayout& layout,
                                          bool tied_head = true);

}  // namespace lattice
