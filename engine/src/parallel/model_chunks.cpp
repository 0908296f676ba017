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

// The tensors a rank sends: one copy of every slice (TP replicas and the tied copy skipped).
bool sent(const ParamTensor& t) {
  return t.counts_in_norm;
}

// Copies slice `t` (data) into the global tensor `g` of the full arena.
template <typename T>
void place(const ParamTensor& t, const T* data, const ParamTensor& g, T* full) {
  slice_to_global(t, data, full + g.offset);
}

}  // namespace

template <typename T>
Result<std::vector<T>> gather_full_params(Comm& world, const ParallelLayout& layout,
                                          const ModelConfig& config, bool sequence_parallel,
                                          const std::vector<const T*>& params) {
  const int rank = world.rank();
  const ParallelLayout::Coord me = layout.coord(rank);
  constexpr int kTag = 7001;
  if (rank != 0) {
    if (me.dp != 0) return std::vector<T>{};
    for (int chunk = 0; chunk < layout.vpp; chunk++) {
      const ParamLayout part(config, shard_of(layout, me, chunk, sequence_parallel));
      std::vector<T> packed;
      for (const ParamTensor& t : part.tensors())
        if (sent(t))
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
    const ParallelLayout::Coord c = layout.coord(r);
    if (c.dp != 0) continue;
    for (int chunk = 0; chunk < layout.vpp; chunk++) {
      const ParamLayout part(config, shard_of(layout, c, chunk, sequence_parallel));
      const T* data = nullptr;
      if (r == 0) {
        data = params[chunk];
        for (const ParamTensor& t : part.tensors())
          if (sent(t)) place(t, data + t.offset, *by_name.at(t.name), full.data());
        continue;
      }
      size_t n = 0;
      for (const ParamTensor& t : part.tensors())
        if (sent(t)) n += t.numel;
      packed.resize(n);
      if (Status s = world.recv(packed.data(), n, dtype_of<T>(), r, kTag); !s) return s;
      const T* p = packed.data();
      for (const ParamTensor& t : part.tensors())
        if (sent(t)) {
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
