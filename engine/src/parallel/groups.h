// The communicators of one rank, split from the world along the layout's groups
// (ARCHITECTURE.md "Parallel layout"): tensor, data, pipeline, model-parallel and embedding,
// and for context and expert parallelism the context, data x context, expert, expert-tensor and
// expert-data groups. Each communicator holds exactly its ParallelLayout group's ranks, in the
// group's order (communicator rank i is the group's i-th world rank).
#pragma once

#include <memory>

#include "lattice/comm.h"
#include "lattice/layout.h"

namespace lattice {

struct ProcessGroups {
  ParallelLayout layout;
  ParallelLayout::Coord coord;               // this rank in the dense grid (coord.cp: CP rank)
  ParallelLayout::ExpertCoord expert_coord;  // this rank in the expert grid
  Comm* world = nullptr;
  std::unique_ptr<Comm> tp, dp, pp, model, embedding;
  // Context parallelism: the CP group (ring attention's K/V pass around it; rank = coord.cp)
  // and DP x CP (where the dense layers' gradients are reduced when CP > 1). One rank each, and
  // data_context the same ranks as dp, when CP == 1.
  std::unique_ptr<Comm> cp, data_context;
  // Expert parallelism: the EP group (the MoE token all-to-all; rank = expert_coord.ep), the
  // expert-tensor group (ETP) and the expert-data group (EDP: where the experts' gradients are
  // reduced).
  std::unique_ptr<Comm> expert, expert_tensor, expert_data;
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
