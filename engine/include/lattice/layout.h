// The parallel layout (ARCHITECTURE.md "Parallel layout"): world = TP x CP x DP x PP, ranks in
// Megatron's order "tp-cp-ep-dp-pp" with EP masked to 1 for the dense layers (tp fastest, then
// cp, dp, pp): rank = tp + TP * (cp + CP * (dp + DP * pp)). The expert layers see the same ranks
// as a second grid, world = ETP x EP x EDP x PP in the order etp, ep, edp, pp (Megatron's expert
// RankGenerator). Pure arithmetic, no communication: `lattice plan`, the Studio and the trainer
// share it (docs/design-notes.md#parallel-layout-and-the-planner).
#pragma once

#include <string>
#include <vector>

#include "lattice/status.h"
#include "lattice/train_options.h"

namespace lattice {

struct ParallelLayout {
  int world = 1;
  int tp = 1, pp = 1, dp = 1;  // dp = world / (tp * cp * pp)
  int cp = 1;                  // context-parallel ranks: each holds 1/CP of every sequence
  // The expert grid over the same ranks: expert-tensor-parallel (etp, Megatron's default TP),
  // expert-parallel (ep: the experts split over ranks) and expert-data-parallel
  // (edp = world / (etp * ep * pp)) sizes. make_layout sets every size; a layout made by hand
  // that uses the expert grid sets these too (without experts: etp = tp, ep = 1, edp = cp * dp).
  int etp = 1, ep = 1, edp = 1;
  // The expert grid is not the dense one (EP > 1, or an expert TP other than TP): the experts'
  // gradients are then summed over their own expert-data group.
  bool expert_grid() const { return ep > 1 || etp != tp; }
  int vpp = 1;         // model chunks (virtual stages) per pipeline rank; 1 without interleaving
  int num_layers = 0;  // of the whole model
  // Uneven pipeline split (Megatron's --decoder-first/last-pipeline-num-layers, vpp 1 only):
  // layers on the first / last stage, 0 for an even share; the stages between share the rest.
  int first_stage_layers = 0, last_stage_layers = 0;

  // A rank's place in the dense grid (cp last so that {tp, dp, pp} still reads as before).
  struct Coord {
    int tp = 0, dp = 0, pp = 0, cp = 0;
  };
  int rank(Coord c) const { return c.tp + tp * (c.cp + cp * (c.dp + dp * c.pp)); }
  Coord coord(int rank) const;
  // A rank's place in the expert grid; pp is the same as in the dense grid.
  struct ExpertCoord {
    int etp = 0, ep = 0, edp = 0, pp = 0;
  };
  int expert_rank(ExpertCoord c) const { return c.etp + etp * (c.ep + ep * (c.edp + edp * c.pp)); }
  ExpertCoord expert_coord(int rank) const;

  // Groups as lists of world ranks, each sorted ascending, in the order Megatron's
  // RankGenerator.get_ranks lists them (the other axes counted fastest first). In brackets,
  // Megatron's token.
  std::vector<std::vector<int>> tensor_groups() const;   // same cp, dp, pp ("tp")
  std::vector<std::vector<int>> context_groups() const;  // same tp, dp, pp ("cp")
  std::vector<std::vector<int>> data_groups() const;     // same tp, cp, pp ("dp")
  // DP x CP: where the dense layers' gradients are reduced when CP > 1 ("dp-cp").
  std::vector<std::vector<int>> data_context_groups() const;    // same tp, pp
  std::vector<std::vector<int>> tensor_context_groups() const;  // same dp, pp ("tp-cp")
  std::vector<std::vector<int>> pipeline_groups() const;        // same tp, cp, dp ("pp")
  std::vector<std::vector<int>> model_groups() const;           // same cp, dp ("tp-pp")
  // First and last stage of each pipeline group (one rank when pp == 1): the ranks holding
  // the word embedding, whose gradients are summed between them.
  std::vector<std::vector<int>> embedding_groups() const;
  // The expert grid's groups (Megatron's expert RankGenerator).
  std::vector<std::vector<int>> expert_groups() const;         // same etp, edp, pp ("ep")
  std::vector<std::vector<int>> expert_tensor_groups() const;  // same ep, edp, pp ("tp")
  std::vector<std::vector<int>> expert_data_groups() const;    // same etp, ep, pp ("dp")
  // ETP x EP: Megatron's expert tensor-and-model-parallel group ("tp-ep"; its all-gather
  // token dispatcher's).
  std::vector<std::vector<int>> expert_tensor_model_groups() const;  // same edp, pp

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
// data-parallel rank, --micro-batch-size x DP with DP = world / (TP x CP x PP). The options come
// back unchanged when the batch is given or the world does not divide into TP x CP x PP (then
// layout_errors says why). Call before layout_errors / make_layout wherever the world is known.
TrainOptions with_default_global_batch(TrainOptions options, int world_size);

// Every rule the options break for this world size, one sentence each naming the flag
// (ARCHITECTURE.md lists the rules); empty when the layout is valid. Rules that need no
// layout (--hidden-size % --num-attention-heads, --global-batch-size % --micro-batch-size)
// are TrainOptions::validate's and not repeated here: check both.
std::vector<std::string> layout_errors(const TrainOptions& options, int world_size);
// The rules expert parallelism puts on the model's experts (--expert-model-parallel-size needs
// --num-experts, which it divides); part of layout_errors.
std::vector<std::string> expert_rules(const TrainOptions& options);
// What `lattice train` cannot run yet although `lattice plan` lays it out (expert TP other than
// 1 or TP; with CP > 1 attention dropout), one sentence each; the trainer refuses these
// (device/backends.h refusals).
std::vector<std::string> trainer_layout_refusals(const TrainOptions& options);
// The layout, or a Status listing every broken rule on its own line.
Result<ParallelLayout> make_layout(const TrainOptions& options, int world_size);
// Every group's ranks and every stage's layers as a JSON object (`lattice plan --json`):
//   {"world", "tp", "pp", "dp", "vpp", "num_layers", "cp", "ep", "etp", "edp",
//    "groups": {"tensor", "data", "pipeline", "model", "embedding", "context", "data_context",
//               "tensor_context", "expert", "expert_tensor", "expert_data",
//               "expert_tensor_model"}: lists of rank lists,
//    "stages": [{"pp_rank", "ranks", "chunks": [{"chunk", "virtual_stage",
//                "layers": [begin, end)}], "holds_embedding", "holds_head"}]}
std::string layout_json(const ParallelLayout& layout);

}  // namespace lattice
