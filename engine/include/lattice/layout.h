// The parallel layout (ARCHITECTURE.md "Parallel layout"): world = TP x PP x DP, ranks in
// Megatron's order (tp fastest, then dp, then pp): rank = tp + TP * (dp + DP * pp).
// Pure arithmetic, no communication: `lattice plan`, the Studio and the trainer share it.
#pragma once

#include <string>
#include <vector>

#include "lattice/status.h"
#include "lattice/train_options.h"

namespace lattice {

struct ParallelLayout {
  int world = 1;
  int tp = 1, pp = 1, dp = 1;
  int vpp = 1;         // model chunks (virtual stages) per pipeline rank; 1 without interleaving
  int num_layers = 0;  // of the whole model
  // Uneven pipeline split (Megatron's --decoder-first/last-pipeline-num-layers, vpp 1 only):
  // layers on the first / last stage, 0 for an even share; the stages between share the rest.
  int first_stage_layers = 0, last_stage_layers = 0;

  struct Coord {
    int tp = 0, dp = 0, pp = 0;
  };
  int rank(Coord c) const { return c.tp + tp * (c.dp + dp * c.pp); }
  Coord coord(int rank) const;

  // Groups as lists of world ranks, each sorted ascending, in Megatron's group order.
  std::vector<std::vector<int>> tensor_groups() const;    // same dp, pp
  std::vector<std::vector<int>> data_groups() const;      // same tp, pp
  std::vector<std::vector<int>> pipeline_groups() const;  // same tp, dp
  std::vector<std::vector<int>> model_groups() const;     // same dp (TP x PP ranks)
  // First and last stage of each pipeline group (one rank when pp == 1): the ranks holding
  // the word embedding, whose gradients are summed between them.
  std::vector<std::vector<int>> embedding_groups() const;

  // Layers [begin, end) of model chunk `chunk` (0 .. vpp-1) on pipeline rank `pp_rank`:
  // virtual stage chunk * pp + pp_rank holds num_layers / (pp * vpp) consecutive layers
  // (with an uneven split, the first and last stages hold what the layout says).
  struct LayerRange {
    int begin = 0, end = 0;
  };
  LayerRange stage_layers(int pp_rank, int chunk) const;
  int layers_per_chunk() const { return num_layers / (pp * vpp); }  // even splits only
  // Layers pipeline rank pp_rank holds over all its chunks.
  int stage_num_layers(int pp_rank) const;
  // The first stage holds the word and position embeddings; the last holds the final
  // LayerNorm and the LM head, which is a tied copy of the word embedding when pp > 1.
  bool is_first_stage(int pp_rank) const { return pp_rank == 0; }
  bool is_last_stage(int pp_rank) const { return pp_rank == pp - 1; }
};

// Megatron's default for --global-batch-size: when it is not given (0), one micro-batch per
// data-parallel rank, --micro-batch-size x DP with DP = world / (TP x PP). The options come
// back unchanged when the batch is given or the world does not divide into TP x PP (then
// layout_errors says why). Call before layout_errors / make_layout wherever the world is known.
TrainOptions with_default_global_batch(TrainOptions options, int world_size);

// Every rule the options break for this world size, one sentence each naming the flag
// (ARCHITECTURE.md lists the rules); empty when the layout is valid. Rules that need no
// layout (--hidden-size % --num-attention-heads, --global-batch-size % --micro-batch-size)
// are TrainOptions::validate's and not repeated here: check both.
std::vector<std::string> layout_errors(const TrainOptions& options, int world_size);
// The layout, or a Status listing every broken rule on its own line.
Result<ParallelLayout> make_layout(const TrainOptions& options, int world_size);
// Every group's ranks and every stage's layers as a JSON object (`lattice plan --json`):
//   {"world", "tp", "pp", "dp", "vpp", "num_layers",
//    "groups": {"tensor", "data", "pipeline", "model", "embedding"}: lists of rank lists,
//    "stages": [{"pp_rank", "ranks", "chunks": [{"chunk", "virtual_stage",
//                "layers": [begin, end)}], "holds_embedding", "holds_head"}]}
std::string layout_json(const ParallelLayout& layout);

}  // namespace lattice
