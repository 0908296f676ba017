#include "parallel/model_chunks.h"

#include <algorithm>
#include <unordered_map>

namespace lattice {

ModelShard shard_of(const ParallelLayout& layout, const ParallelLayout::Coord& coord, int chunk,
                    bool sequence_parallel) {
  ModelShard s;
  s.tp_rank = coord.tp;
  s.tp_size = layout.tp;
  const ParallelLayout::LayerRange r = layout.stage_layers(coord.pp, chunk);
  s.layer_begin = r.begin;
  s.layer_end = r.end;
  s.pre = coord.pp == 0 && chunk == 0;
  s.post = coord.pp == layout.pp - 1 && chunk == layout.vpp - 1;
  s.sequence_parallel = sequence_parallel && layout.tp > 1;
  return s;
}

namespace {

// Rank r's chunk as the trainer builds it: shard_of plus its experts (Note [expert parallelism]
// in model/gpt_moe.cpp: EP rank p holds experts [p E/EP, (p+1) E/EP) of each MoE layer).
ModelShard rank_shard(const ParallelLayout& layout, int r, int chunk, bool sequence_parallel) {
  ModelShard s = shard_of(layout, layout.coord(r), chunk, sequence_parallel);
  s.ep_rank = layout.expert_coord(r).ep;
  s.ep_size = layout.ep;
  s.etp_size = layout.etp;  // below TP: Note [expert tensor parallelism 1] and [... e]
  return s;
}

// Note [gathering experts]: one copy of every slice, TP replicas and the tied copy skipped.
// A dense tensor comes from data-parallel rank 0; under EP, which carves the expert grid out of
// DP (and CP), data-parallel rank 0 holds only its EP rank's experts, so an expert's slice comes
// from expert-data-parallel rank 0 of its (expert TP, EP, PP) coordinate instead: every expert
// of every layer once, each expert-TP slice once (at expert TP 1 the experts are whole, and
// expert-data rank 0 is one TP rank of each EP rank; at an expert TP e below TP, the e ranks of
// one expert-TP group).
bool sent(const ParallelLayout& layout, int r, const ParamTensor& t) {
  if (!t.counts_in_norm) return false;
  return t.expert_parallel ? layout.expert_coord(r).edp == 0 : layout.coord(r).dp == 0;
}

// Copies slice `t` (data) into the global tensor `g` of the full arena.
template <typename T>
void place(const ParamTensor& t, const T* data, const ParamTensor& g, T* full) {
  slice_to_global(t, data, full + g.offset);
}

}  // namespace

bool gather_sender(const ParallelLayout& layout, int rank) {
  return layout.coord(rank).dp == 0 || (layout.expert_grid() && layout.expert_coord(rank).edp == 0);
}

template <typename T>
Result<std::vector<T>> gather_full_params(Comm& world, const ParallelLayout& layout,
                                          const ModelConfig& config, bool sequence_parallel,
                                          const std::vector<const T*>& params) {
  const int rank = world.rank();
  constexpr int kTag = 7001;
  if (rank != 0) {
    if (!gather_sender(layout, rank)) return std::vector<T>{};
    for (int chunk = 0; chunk < layout.vpp; chunk++) {
      const ParamLayout part(config, rank_shard(layout, rank, chunk, sequence_parallel));
      std::vector<T> packed;
      for (const ParamTensor& t : part.tensors())
        if (sent(layout, rank, t))
          packed.insert(packed.end(), params[chunk] + t.offset, params[chunk] + t.offset + t.numel);
      if (Status s = world.send(packed.data(), packed.size(), dtype_of<T>(), 0, kTag); !s) return s;
    }
    return std::vector<T>{};
  }
  const ParamLayout full_layout(config);
  std::unordered_map<std::string, const ParamTensor*> by_name;
  for (const ParamTensor& t : full_layout.tensors()) by_name[t.name] = &t;
  std::vector<T> full(full_layout.total_numel(), T(0));
  std::vector<T> packed;
  for (int r = 0; r < layout.world; r++) {
    if (!gather_sender(layout, r)) continue;
    for (int chunk = 0; chunk < layout.vpp; chunk++) {
      const ParamLayout part(config, rank_shard(layout, r, chunk, sequence_parallel));
      if (r == 0) {
        for (const ParamTensor& t : part.tensors())
          if (sent(layout, r, t))
            place(t, params[chunk] + t.offset, *by_name.at(t.name), full.data());
        continue;
      }
      size_t n = 0;
      for (const ParamTensor& t : part.tensors())
        if (sent(layout, r, t)) n += t.numel;
      packed.resize(n);
      if (Status s = world.recv(packed.data(), n, dtype_of<T>(), r, kTag); !s) return s;
      const T* p = packed.data();
      for (const ParamTensor& t : part.tensors())
        if (sent(layout, r, t)) {
          place(t, p, *by_name.at(t.name), full.data());
          p += t.numel;
        }
    }
  }
  return full;
}

template Result<std::vector<float>> gather_full_params(Comm&, const ParallelLayout&,
                                                       const ModelConfig&, bool,
                                                       const std::vector<const float*>&);
template Result<std::vector<double>> gather_full_params(Comm&, const ParallelLayout&,
                                                        const ModelConfig&, bool,
                                                        const std::vector<const double*>&);

}  // namespace lattice
