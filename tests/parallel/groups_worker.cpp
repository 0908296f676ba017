// make_process_groups under mpirun on 8 ranks (ctest process_groups_8_ranks): for several
// 5D layouts, each of this rank's communicators holds exactly its ParallelLayout group's world
// ranks, in the group's order (an all_gather of the world ranks over the communicator equals the
// group), so the communicators the trainer, the context-parallel attention and the MoE dispatch
// use are the groups `lattice plan` prints. Exits 1 naming the layout, group and ranks on a
// mismatch.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "lattice/comm.h"
#include "lattice/layout.h"
#include "parallel/groups.h"

using lattice::Comm;
using lattice::ParallelLayout;

namespace {

struct Sizes {
  int tp, cp, pp, ep, etp;
};

ParallelLayout grid(int world, Sizes s) {
  ParallelLayout l;
  l.world = world;
  l.tp = s.tp;
  l.cp = s.cp;
  l.pp = s.pp;
  l.dp = world / (s.tp * s.cp * s.pp);
  l.ep = s.ep;
  l.etp = s.etp;
  l.edp = world / (s.etp * s.ep * s.pp);
  l.num_layers = s.pp;
  return l;
}

std::string show(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); i++) {
    if (i > 0) out += ",";
    out += std::to_string(ranks[i]);
  }
  out += "]";
  return out;
}

// The group of `groups` that holds `rank`.
std::vector<int> group_of(const std::vector<std::vector<int>>& groups, int rank) {
  for (const std::vector<int>& g : groups)
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  return {rank};  // in none: a communicator of its own
}

// The world ranks of `comm`'s members in its rank order.
std::vector<int> members(Comm& comm, int world_rank, bool& ok) {
  std::vector<int> ranks(static_cast<size_t>(comm.size()));
  const std::vector<size_t> counts(ranks.size(), 1);
  if (lattice::Status s =
          comm.all_gather(&world_rank, ranks.data(), counts, lattice::DType::kInt32);
      !s) {
    std::fprintf(stderr, "groups_worker: all_gather over %s: %s\n", comm.name().c_str(),
                 s.message().c_str());
    ok = false;
  }
  return ranks;
}

bool check(Comm& world, int world_size, Sizes s, bool tied) {
  const ParallelLayout l = grid(world_size, s);
  const int rank = world.rank();
  lattice::Result<lattice::ProcessGroups> made = lattice::make_process_groups(world, l, tied);
  if (!made) {
    std::fprintf(stderr, "groups_worker: %s\n", made.status().message().c_str());
    return false;
  }
  lattice::ProcessGroups& g = *made;
  const bool embedding = tied && l.pp > 1 && (g.coord.pp == 0 || g.coord.pp == l.pp - 1);
  struct Expected {
    const char* name;
    Comm* comm;
    std::vector<std::vector<int>> groups;
  };
  const Expected expected[] = {
      {"tensor", g.tp.get(), l.tensor_groups()},
      {"data", g.dp.get(), l.data_groups()},
      {"pipeline", g.pp.get(), l.pipeline_groups()},
      {"model", g.model.get(), l.model_groups()},
      {"embedding", g.embedding.get(),
       embedding ? l.embedding_groups() : std::vector<std::vector<int>>{}},
      {"context", g.cp.get(), l.context_groups()},
      {"data_context", g.data_context.get(), l.data_context_groups()},
      {"expert", g.expert.get(), l.expert_groups()},
      {"expert_tensor", g.expert_tensor.get(), l.expert_tensor_groups()},
      {"expert_data", g.expert_data.get(), l.expert_data_groups()},
  };
  bool ok = true;
  for (const Expected& e : expected) {
    const std::vector<int> want = group_of(e.groups, rank);
    const std::vector<int> got = members(*e.comm, rank, ok);
    if (got != want) {
      std::fprintf(stderr,
                   "groups_worker: FAIL world %d tp %d cp %d pp %d ep %d etp %d: rank %d's %s "
                   "communicator holds %s, the layout's group is %s\n",
                   world_size, s.tp, s.cp, s.pp, s.ep, s.etp, rank, e.name, show(got).c_str(),
                   show(want).c_str());
      ok = false;
    }
  }
  // The coordinates the context-parallel attention and the MoE dispatch read.
  if (g.cp->rank() != g.coord.cp || g.expert->rank() != g.expert_coord.ep) {
    std::fprintf(stderr, "groups_worker: FAIL rank %d: cp rank %d (coord %d), ep rank %d (%d)\n",
                 rank, g.cp->rank(), g.coord.cp, g.expert->rank(), g.expert_coord.ep);
    ok = false;
  }
  return ok;
}

}  // namespace

int main() {
  auto world = lattice::make_world_comm();
  if (!world) {
    std::fprintf(stderr, "groups_worker: %s\n", world.status().message().c_str());
    return 2;
  }
  Comm& comm = **world;
  const int n = comm.size();
  int failures = 0, layouts = 0;
  // tp, cp, pp, ep, etp; tied and untied heads.
  const Sizes sizes[] = {{2, 2, 2, 1, 2}, {2, 1, 1, 2, 1}, {1, 2, 2, 2, 1}, {2, 1, 1, 2, 2},
                         {2, 1, 2, 1, 2}, {1, 1, 4, 2, 1}, {2, 2, 1, 4, 1}, {1, 4, 1, 2, 2}};
  for (const Sizes& s : sizes) {
    if (n % (s.tp * s.cp * s.pp) != 0 || n % (s.etp * s.ep * s.pp) != 0) continue;
    for (bool tied : {true, false}) {
      if (!check(comm, n, s, tied)) failures++;
      layouts++;
    }
  }
  // Every rank's verdict, so that rank 0 reports the whole job's.
  int total = failures;
  if (lattice::Status s =
          comm.all_reduce(&total, 1, lattice::DType::kInt32, lattice::ReduceOp::kSum);
      !s) {
    std::fprintf(stderr, "groups_worker: %s\n", s.message().c_str());
    total = 1;
  }
  if (comm.rank() == 0)
    std::printf("groups_worker: %d layouts on %d ranks, %d failed checks\n", layouts, n, total);
  world->reset();
  lattice::finalize_comm();
  return total == 0 && layouts > 0 ? 0 : 1;
}
