#include "parallel/groups.h"

namespace lattice {

Result<ProcessGroups> make_process_groups(Comm& world, const ParallelLayout& layout,
                                          bool tied_head) {
  ProcessGroups g;
  g.layout = layout;
  g.tied_head = tied_head;
  g.world = &world;
  const int rank = world.rank();
  const ParallelLayout::Coord c = layout.coord(rank);
  g.coord = c;
  const int TP = layout.tp, DP = layout.dp;
  struct Split {
    std::unique_ptr<Comm>* out;
    int color, key;
    const char* name;  // as messages name the group (Megatron's words)
  };
  // Ranks outside the embedding group get a communicator of their own (never used).
  const bool embedding = g.in_embedding_group();
  const Split splits[] = {
      {&g.tp, c.dp + DP * c.pp, c.tp, "tensor-parallel"},
      {&g.dp, c.tp + TP * c.pp, c.dp, "data-parallel"},
      {&g.pp, c.tp + TP * c.dp, c.pp, "pipeline-parallel"},
      {&g.model, c.dp, rank, "model-parallel"},
      {&g.embedding, embedding ? c.tp + TP * c.dp : TP * DP + rank, c.pp, "embedding"},
  };
  for (const Split& s : splits) {
    Result<std::unique_ptr<Comm>> comm = world.split(s.color, s.key);
    if (!comm) return comm.status();
    (*comm)->set_name(s.name);
    *s.out = std::move(*comm);
  }
  return g;
}

}  // namespace lattice
