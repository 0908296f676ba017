#include "parallel/groups.h"

#include <algorithm>
#include <cassert>
#include <vector>

namespace lattice {

namespace {

// The color and key that put `rank` into its group of `groups` by Comm::split: the group's
// index and the rank's place in it. A rank in none of the groups (the embedding groups leave
// out the middle stages) gets a color of its own.
struct Membership {
  int color, key;
};
Membership membership(const std::vector<std::vector<int>>& groups, int rank) {
  for (size_t g = 0; g < groups.size(); g++) {
    const auto at = std::find(groups[g].begin(), groups[g].end(), rank);
    if (at != groups[g].end())
      return {static_cast<int>(g), static_cast<int>(at - groups[g].begin())};
  }
  return {static_cast<int>(groups.size()) + rank, 0};
}

}  // namespace

Result<ProcessGroups> make_process_groups(Comm& world, const ParallelLayout& layout,
                                          bool tied_head) {
  assert(layout.tp * layout.cp * layout.dp * layout.pp == layout.world &&
         layout.etp * layout.ep * layout.edp * layout.pp == layout.world);
  ProcessGroups g;
  g.layout = layout;
  g.tied_head = tied_head;
  g.world = &world;
  const int rank = world.rank();
  g.coord = layout.coord(rank);
  g.expert_coord = layout.expert_coord(rank);
  // Ranks outside the embedding group get a communicator of their own (never used): as many
  // groups, all empty, put them past every member's color.
  std::vector<std::vector<int>> embedding = layout.embedding_groups();
  if (!g.in_embedding_group()) embedding.assign(embedding.size(), {});
  struct Split {
    std::unique_ptr<Comm>* out;
    std::vector<std::vector<int>> groups;
    const char* name;  // as messages name the group (Megatron's words)
  };
  const Split splits[] = {
      {&g.tp, layout.tensor_groups(), "tensor-parallel"},
      {&g.dp, layout.data_groups(), "data-parallel"},
      {&g.pp, layout.pipeline_groups(), "pipeline-parallel"},
      {&g.model, layout.model_groups(), "model-parallel"},
      {&g.embedding, embedding, "embedding"},
      {&g.cp, layout.context_groups(), "context-parallel"},
      // The same ranks as the data-parallel group without CP: named as it, since messages
      // about a dense gradient reduction should not mention a CP the run does not use.
      {&g.data_context, layout.data_context_groups(),
       layout.cp > 1 ? "data-parallel with context-parallel" : "data-parallel"},
      {&g.expert, layout.expert_groups(), "expert-parallel"},
      {&g.expert_tensor, layout.expert_tensor_groups(), "expert-tensor-parallel"},
      {&g.expert_data, layout.expert_data_groups(), "expert-data-parallel"},
  };
  for (const Split& s : splits) {
    const Membership m = membership(s.groups, rank);
    Result<std::unique_ptr<Comm>> comm = world.split(m.color, m.key);
    if (!comm) return comm.status();
    (*comm)->set_name(s.name);
    *s.out = std::move(*comm);
  }
  return g;
}

}  // namespace lattice
