// Distributed checkpoints (ARCHITECTURE.md "Checkpoints", docs/design-notes.md#checkpoints):
// <save>/latest_checkpointed_iteration.txt and <save>/iter_0000100/ holding metadata.json and
// one safetensors file per rank that has something of its own to store. Every stored piece
// names its global tensor, the global shape and the slice it holds (the tensor-parallel split,
// and with the distributed optimizer the flat range of a shard), so any layout can load it:
// a loader assembles each global tensor from its pieces and takes the slice it needs.
// Saving is atomic: files go to iter_N.tmp/, are fsynced, the directory is renamed, then the
// pointer file is replaced. The .tmp of a save that was killed is removed by the next save (or
// training --load) of the directory, unless a live process still holds its lock (save_lock.h).
// Non-goals: async saving, 16-bit or fp64 state (fp32 only).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "checkpoint/safetensors.h"
#include "checkpoint/save_lock.h"
#include "lattice/comm.h"
#include "lattice/layout.h"
#include "lattice/model_config.h"
#include "model/param_layout.h"
#include "optim/adamw.h"

namespace lattice {

// Where training stands: everything besides tensors that an exact resume needs. Dropout
// masks and data order derive from the seed, the iteration and the consumed samples, so no
// random-generator state is needed beyond these.
struct TrainState {
  int iteration = 0;  // iterations completed
  int64_t consumed_samples = 0, valid_consumed = 0;
  int steps_taken = 0, skipped_iterations = 0, nan_iterations = 0;
  // The --fp16 loss scaler (Megatron keeps it with the optimizer state); loss_scale 0: none.
  double loss_scale = 0;
  int loss_scale_growth_tracker = 0, loss_scale_hysteresis_tracker = 0;
};

// One chunk's weights as a checkpoint stores them: its layout and its fp32 arena in layout
// order, both owned by the caller (a model's master arena, or a host buffer of an offline tool).
struct ChunkWeights {
  const ParamLayout* layout = nullptr;
  float* params = nullptr;
};

// A chunk's weights in host memory (zero), for tools that move a checkpoint's weights without
// a model (`lattice ckpt import-hf` and `reshard`). Throws OutOfMemory (core/host_memory.h).
struct HostChunk {
  HostChunk(const ModelConfig& config, const ModelShard& shard = {});
  ParamLayout layout;
  std::vector<float> params;  // (numel) layout order
  ChunkWeights weights() { return {&layout, params.data()}; }
};

// One piece of a chunk's optimizer state: arena elements [offset, offset + numel) of the chunk
// and their two AdamW moments (numel each), in memory the checkpoint code reads and writes.
struct MomentPiece {
  size_t offset = 0, numel = 0;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

// The pieces of `optimizer` (AdamW::state_views), for an optimizer whose moments are host
// memory (checkpoint/chunk_state.h stages those of other devices).
template <typename A>
std::vector<MomentPiece> moment_pieces(AdamW<A>& optimizer) {
  static_assert(std::is_same_v<accum_t<A>, float>, "checkpoints keep fp32 moments");
  std::vector<MomentPiece> pieces;
  for (const auto& v : optimizer.state_views())
    pieces.push_back({v.offset, v.numel, v.exp_avg, v.exp_avg_sq});
  return pieces;
}

// One rank's share of the model and optimizer: per chunk its weights and (moments may be
// empty: weights only) its optimizer's pieces. The caller restores AdamW's step count from the
// loaded TrainState (steps_taken).
// Which tensors of a chunk a save writes or a load reads (Note [LoRA] in param_layout.h): every
// one; the trainable ones alone (a LoRA run's adapters); the frozen ones alone (a LoRA run's
// base, from the base checkpoint).
enum class TensorSet { kAll, kTrainable, kFrozen };
inline bool in_set(TensorSet set, const ParamTensor& t) {
  return set == TensorSet::kAll || (set == TensorSet::kFrozen) == t.frozen;
}

struct RankParts {
  const ParallelLayout* layout = nullptr;
  bool sequence_parallel = false, distributed_optimizer = false;
  TensorSet tensors = TensorSet::kAll;
  std::vector<ChunkWeights> chunks;
  std::vector<std::vector<MomentPiece>> moments;
};

struct SavedCheckpoint {
  std::string path;    // the iteration directory
  int64_t bytes = 0;   // all ranks' files (known on rank 0)
  double seconds = 0;  // wall time of the save
  // Rank 0: one line each on the interrupted saves it removed or kept (InterruptedSaves).
  std::vector<std::string> notes;
};

// Collective over `world`. config_json: the run's settings (train_options_json). retain > 0
// keeps only the newest `retain` checkpoints in `dir`.
Result<SavedCheckpoint> save_checkpoint(Comm& world, const std::string& dir,
                                        const TrainState& state, const ModelConfig& model,
                                        const std::string& config_json, const RankParts& parts,
                                        int retain);

// The parts of a save, for offline tools (`lattice ckpt reshard`, `import-hf`) that write every
// rank's shard from one process. begin_save: rank 0 creates `dir`, takes the save lock of
// iteration's iter_N.tmp/ (refused while another process holds it), removes the interrupted
// saves of `dir` (one line each into notes) and creates iter_N.tmp/ empty; hold the lock until
// finalize_checkpoint has returned. Then each rank's pieces into iter_N.tmp/, then rank 0's
// metadata, rename and pointer. save_checkpoint is all of it, collectively.
Result<SaveLock> begin_save(const std::string& dir, int iteration, std::vector<std::string>* notes);
Status write_shard(const std::string& tmp_dir, int rank, const ParallelLayout::Coord& coord,
                   const RankParts& parts);
struct SavedLayout {
  ParallelLayout layout;
  bool sequence_parallel = false, distributed_optimizer = false, optimizer_state = false;
};
Status finalize_checkpoint(const std::string& dir, int iteration, int world_size,
                           const TrainState& state, const ModelConfig& model,
                           const std::string& config_json, const SavedLayout& saved, int retain,
                           int64_t* total_bytes);
std::string checkpoint_directory_name(int iteration);  // "iter_0000100"

struct CheckpointRef {
  std::string dir;   // the --load / --save directory
  std::string path;  // its iter_NNNNNNN directory
  int iteration = 0;
  std::vector<std::string> notes;  // an interrupted save (or one in progress) that was skipped
};
// The checkpoint `step` of `dir`, or (step 0) the one latest_checkpointed_iteration.txt names.
Result<CheckpointRef> find_checkpoint(const std::string& dir, int step);
// --load as generation and evaluation take it: an iteration directory (its metadata.json), or a
// save directory's checkpoint as find_checkpoint finds it.
Result<CheckpointRef> resolve_checkpoint(const std::string& path, int step);

// One piece of a global tensor stored in one file.
struct CheckpointPiece {
  std::string file, key;  // the safetensors file (in the iteration directory) and its entry
  std::string kind;       // "model", "exp_avg" or "exp_avg_sq"
  std::string name;       // the global tensor's name
  std::vector<int64_t> global_shape;
  int split_dim = -1;  // tensor-parallel split of the slice, as ParamTensor
  int64_t split_begin = 0, split_size = 0;
  int64_t flat_begin = 0, flat_end = 0;  // the piece's range in the slice, flattened
};

// A checkpoint opened for reading: its metadata and a lookup of every piece. Files are mapped
// and their checksums verified the first time a piece of them is read.
class CheckpointReader {
 public:
  static Result<std::unique_ptr<CheckpointReader>> open(const std::string& iteration_dir);

  const std::string& path() const { return path_; }
  const std::string& metadata_json() const { return metadata_text_; }
  const ModelConfig& model() const { return model_; }
  const TrainState& state() const { return state_; }
  bool has_optimizer_state() const { return has_optimizer_; }
  // "TP 2, PP 2, DP 2, distributed optimizer"; CP, and EP / expert TP where they are not the
  // dense grid's ("TP 2, PP 1, CP 2, DP 1, EP 2, expert TP 1").
  std::string layout_summary() const;
  const std::vector<CheckpointPiece>& pieces() const { return pieces_; }
  struct FileInfo {
    std::string name;
    int64_t bytes = 0;
    uint32_t crc32c = 0;
  };
  const std::vector<FileInfo>& files() const { return files_; }

  // Every file's size and checksum against the metadata.
  Status verify_all();
  // The global tensor `kind`/`name` assembled from its pieces into out (global numel).
  Status read_global(const std::string& kind, const std::string& name, std::vector<int64_t>& shape,
                     std::vector<float>& out);

 private:
  Result<const safetensors::File*> file(const std::string& name);

  std::string path_, metadata_text_;
  ModelConfig model_;
  TrainState state_;
  int tp_ = 1, pp_ = 1, dp_ = 1, vpp_ = 1, cp_ = 1;
  int ep_ = 1, etp_ = 1;  // checkpoints before EP was recorded: EP 1, expert TP = TP
  bool distributed_ = false, has_optimizer_ = false;
  std::vector<FileInfo> files_;
  std::vector<CheckpointPiece> pieces_;
  std::map<std::string, std::vector<size_t>> by_tensor_;  // kind + "/" + name -> pieces
  std::map<std::string, std::unique_ptr<safetensors::File>> open_;
};

// Loads a checkpoint into this rank's parts, whatever layout saved it. weights_only (for
// --finetune) skips optimizer state and training progress. Refuses a checkpoint of another
// model shape, a file whose size or checksum is wrong, or a missing piece, naming the file and
// tensor; `state` receives the training progress.
Status load_checkpoint(const CheckpointRef& ref, const RankParts& parts, bool weights_only,
                       TrainState* state);

// Copies elements [begin, end) of this rank's slice of `t` out of `global`, the saved global
// tensor of shape `saved_shape`. A vocabulary table (is_vocabulary_table) may be padded to
// another length than this model's (another TP size or --make-vocab-size-divisible-by saved
// it): extra saved rows, padding, are dropped, and rows beyond the saved ones get the mean of
// saved rows [0, real_rows), the tokenizer's (Note [vocabulary padding rows], hf_tensors.cpp),
// or zero where real_rows is 0 (the optimizer's moments: no history). Any other difference of
// shape is invalid_argument naming `where`.
Status take_slice(const ParamTensor& t, const std::vector<int64_t>& saved_shape,
                  const std::vector<float>& global, size_t begin, size_t end, int64_t real_rows,
                  float* out, const std::string& where);

// invalid_argument naming every architecture flag whose value differs between the checkpoint
// at `path` (its metadata's model) and `run`, e.g. "--rotary-base 10000 disagrees with 500000 in
// <path>" (tensor shapes are load_checkpoint's check; these flags also change what a weight
// means without changing its shape); ok when they agree.
Status check_architecture(const std::string& path, const ModelConfig& saved,
                          const ModelConfig& run);

// The newest complete checkpoint of `dir` older than `iteration`, or 0.
int previous_checkpoint(const std::string& dir, int iteration);

}  // namespace lattice
