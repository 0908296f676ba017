// Everything `lattice train` accepts, under Megatron's flag names. The same keys work in a
// `--config run.json` file (hyphens or underscores); flags given on the command line win.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lattice/model_config.h"
#include "lattice/status.h"
#include "lattice/tokenizer.h"
#include "lattice/vision_config.h"

namespace lattice {

struct OptimizerConfig {
  float lr = 1.5e-4f;                     // --lr (peak)
  float min_lr = 0.0f;                    // --min-lr
  std::string lr_decay_style = "linear";  // --lr-decay-style constant|linear|cosine
  int lr_warmup_iters = 0;                // --lr-warmup-iters
  int lr_decay_iters = 0;                 // --lr-decay-iters (0: --train-iters)
  float weight_decay = 0.01f;             // --weight-decay
  float adam_beta1 = 0.9f;                // --adam-beta1
  float adam_beta2 = 0.999f;              // --adam-beta2
  float adam_eps = 1e-8f;                 // --adam-eps
  float clip_grad = 1.0f;                 // --clip-grad (0 disables)
};

// How the model is split over ranks (docs/design-notes.md#parallelism). Tensor-parallel size
// lives in ModelConfig (the vocabulary padding depends on it); data-parallel size is what the
// world leaves: world / (TP * CP * PP). The expert layers' grid: world = ETP * EP * EDP * PP
// (lattice/layout.h).
struct ParallelOptions {
  int pipeline_model_parallel_size = 1;  // --pipeline-model-parallel-size
  int context_parallel_size = 1;         // --context-parallel-size (CP)
  int expert_model_parallel_size = 1;    // --expert-model-parallel-size (EP)
  int expert_tensor_parallel_size = 0;   // --expert-tensor-parallel-size (0: TP, as Megatron)
  int num_layers_per_virtual_pipeline_stage = 0;  // --num-layers-per-virtual-pipeline-stage
  int decoder_first_pipeline_num_layers = 0;      // --decoder-first-pipeline-num-layers (0: even)
  int decoder_last_pipeline_num_layers = 0;       // --decoder-last-pipeline-num-layers (0: even)
  bool sequence_parallel = false;                 // --sequence-parallel
  bool use_distributed_optimizer = false;         // --use-distributed-optimizer
  int ddp_bucket_size = 0;  // --ddp-bucket-size, elements (0: max(40M, 1M * DP), Megatron)
  std::string recompute_granularity;  // --recompute-granularity full | selective ("" = none)
  std::string recompute_method;       // --recompute-method uniform | block (full only)
  int recompute_num_layers = 0;       // --recompute-num-layers

  // The --recompute-* rules (one sentence each, naming the flag): TrainOptions::validate and
  // the GPU trainer's checks share them.
  std::vector<std::string> recompute_errors() const;
};

struct TrainOptions {
  ModelConfig model;
  OptimizerConfig optim;
  ParallelOptions parallel;
  int micro_batch_size = 4;   // --micro-batch-size
  int global_batch_size = 0;  // --global-batch-size (0: micro batch x DP)
  int train_iters = 100;      // --train-iters
  int log_interval = 10;      // --log-interval
  uint64_t seed = 1234;       // --seed
  bool mock_data = false;     // --mock-data
  // --data-path P or --data-path W1 P1 W2 P2 ...: indexed-dataset prefixes, optionally weighted.
  std::vector<std::string> data_path;
  std::string split = "969,30,1";  // --split: train,valid,test weights over documents
  std::string data_cache_path;     // --data-cache-path (default: beside the data)
  // --sft: supervised fine-tuning on chat data (data/sft_dataset.h): each --data-path prefix
  // has a `{prefix}_loss_mask` dataset, and the loss is the mean over the masked-in targets of
  // the whole global batch. --sft-packing packs several conversations per sample (Lattice's;
  // Megatron packs the conversations of one JSONL line).
  bool sft = false;
  bool sft_packing = false;
  int eval_interval = 1000;  // --eval-interval: iterations between validations
  int eval_iters = 100;      // --eval-iters: global batches per validation
  // --eval-tasks FILE[,FILE]: multiple-choice task files (lattice/multiple_choice.h) scored
  // on the training model at every validation point (every --eval-interval and at the end).
  std::string eval_tasks;
  // --tokenizer-type, --vocab-file, --merge-file, --tokenizer-model, --vocab-size. With
  // NullTokenizer the model's vocabulary is --vocab-size + 1 (EOD = --vocab-size), as Megatron.
  TokenizerOptions tokenizer = null_tokenizer(512);
  // --cpu-isa auto | generic | avx2 | avx512: the copy of the CPU kernels to run (auto:
  // LATTICE_CPU_ISA when set, else the widest this CPU has; kernels/cpu/README.md).
  std::string cpu_isa = "auto";
  int threads = 0;        // --threads (0: all cores)
  std::string load_hf;    // --load-hf PATH (a Hugging Face model to start from)
  std::string save;       // --save DIR: checkpoints (docs/design-notes.md#checkpoints)
  int save_interval = 0;  // --save-interval N: also every N iterations (0: only at the end)
  int save_retain = 0;    // --save-retain K: keep the newest K (0: all)
  std::string load;       // --load DIR: resume (any layout) from its latest checkpoint
  int ckpt_step = 0;      // --ckpt-step N: load iteration N instead of the latest
  bool finetune = false;  // --finetune: weights only; iteration and optimizer start afresh
  // --skip-train (Megatron's): no training; the validation and test splits (and --eval-tasks) are
  // evaluated once on the loaded (or initial) weights, e.g. a base model before a fine-tune.
  bool skip_train = false;
  // --pretrained-checkpoint DIR: the base model's weights to start from, iteration and optimizer
  // afresh (as --load DIR --finetune); with LoRA the frozen base, while --load holds the
  // adapters of a LoRA run to resume (docs/lora.md).
  std::string pretrained_checkpoint;
  int exit_interval = 0;  // --exit-interval N: save and stop after an iteration divisible by N
  // --exit-duration-in-mins M: save and stop once M minutes have passed since the process
  // started (checked before every iteration; 0: never).
  double exit_duration_in_mins = 0;
  // Instability (docs/studio.md "Instability", lattice/instability.h): --spike-window W good
  // iterations a loss or grad norm is judged against, --spike-z Z the z-score over which it is a
  // spike, --on-spike warn | skip | stop | rollback what a spike or a non-finite loss or norm
  // does.
  int spike_window = 50;
  double spike_z = 6;
  std::string on_spike = "warn";
  // --iterations-to-skip I [I ...] (Megatron's): 1-based iterations whose global batch is
  // consumed without training on it (no forward, backward or step); what --on-spike rollback
  // adds to on its way back. skip_iterations() reads them; validate() names a bad one.
  std::vector<std::string> iterations_to_skip;
  std::vector<int> skip_iterations() const;
  // --distributed-timeout-minutes M: a rank that waits this long in one collective or
  // pipeline message ends the job, naming the ranks it waited for (Megatron's flag and
  // default; fractions allowed; 0: wait for ever). docs/design-notes.md#collective-timeout.
  double distributed_timeout_minutes = 10;
  std::string save_hf;            // --save-hf PATH (final weights as a Hugging Face model)
  std::string hf_dtype = "fp32";  // --hf-dtype fp32 | bf16: what --save-hf writes
  bool profile = false;           // --profile: per-op time table at the end
  bool fp64 = false;              // --fp64: train in double precision (verification; slow)
  // --bf16 / --fp16: 16-bit training (docs/gpu.md). --bf16 needs the GPU trainer; --fp16 on
  // the CPU keeps fp32 arithmetic but runs Megatron's loss scaler (scaled loss gradient,
  // unscale, inf/NaN agreement over every rank, skipped steps), so that path is tested here.
  bool bf16 = false, fp16 = false;
  // --vision-model-type clip: a LLaVA-style vision tower (docs/vision.md) shaped by the
  // --vision-* flags, --patch-dim, --img-h, --img-w, --num-channels (into `vision`); "" (the
  // default): a text-only model. Parsing copies both into `model` (ModelConfig::vision_model_type,
  // ModelConfig::vision = vision_config()). vision_config(): `vision` with the class token and
  // the language model's hidden size filled in.
  std::string vision_model_type;
  VisionConfig vision;
  bool disable_vision_class_token = false;  // --disable-vision-class-token (Megatron's)
  VisionConfig vision_config() const;
  // Megatron's loss-scaler flags: --loss-scale (static; 0 = dynamic with --fp16),
  // --initial-loss-scale, --min-loss-scale, --loss-scale-window, --hysteresis.
  double loss_scale = 0.0;
  double initial_loss_scale = 4294967296.0;  // 2^32
  double min_loss_scale = 1.0;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  // --device cpu | cuda | auto: where `lattice train` runs (cuda hands the run to the
  // lattice-gpu executable, docs/gpu.md#how-lattice-train-reaches-the-gpu).
  std::string device = "cpu";
  bool log_memory = false;  // --log-memory: every rank's memory by category after iteration 1
  // --skip-memory-check: start even when the planner's estimate exceeds the available memory.
  bool skip_memory_check = false;
  int timing_log_level = 0;  // --timing-log-level: 1 prints per-phase times per rank
  std::string db;            // --db: the run store (empty: $LATTICE_DATA_DIR/runs.sqlite)
  std::string db_journal_mode = "auto";  // --db-journal-mode auto | wal | delete
  bool no_db = false;                    // --no-db (or --db none): train without recording the run
  bool db_required = false;  // --db-required: stop training when the run store cannot be written
  double db_heartbeat_interval = 10;  // --db-heartbeat-interval: seconds between heartbeats
  bool exit_signal_handler = false;   // --exit-signal-handler (Megatron's; always on here)
  std::string run_name;               // --run-name (empty: run-<date>-<time>-<random>)
  std::vector<std::string> tags;      // --tag T ...
  std::string config_path;            // --config FILE (recorded, already applied)
  // The flags set on the command line or by --config (names without "--"), so that a default
  // can be told from a value the user chose (parse_flags' `given`). Not part of the record.
  std::set<std::string> given_flags;

  bool given(const std::string& flag) const { return given_flags.count(flag) > 0; }

  // Micro-batches per iteration over all DP ranks; needs the global batch resolved
  // (with_default_global_batch in layout.h) when it was not given.
  int num_micro_batches() const { return global_batch_size / micro_batch_size; }
  // --data-path as (weight, prefix) pairs; a lone prefix has weight 1.
  Result<std::vector<std::pair<double, std::string>>> data_blend() const;
  // Every violated rule, one sentence each naming the flag; empty when valid. Without
  // `require_data`, neither --data-path nor --mock-data is needed (`lattice plan`).
  std::vector<std::string> validate(bool require_data = true) const;
  // The size rules of one micro-batch of model `m` that validate() includes: its tokens fit the
  // engine's 32-bit ints, and its activations stay below kMaxActivationBytes (so that byte counts
  // formed in 64 bits never wrap; the memory check then compares them with the machine).
  std::vector<std::string> micro_batch_size_errors(const ModelConfig& m) const;
  static constexpr int64_t kMaxActivationBytes = int64_t{1} << 60;
};

// Parses `lattice train` arguments (without the subcommand). A --config file is read first,
// then the other flags override it. Unknown flags, malformed values and files, and every
// validation failure come back as one Status listing each problem on its own line.
Result<TrainOptions> parse_train_options(const std::vector<std::string>& args);
// Reads the flags and --config as parse_train_options does, but fails only on what cannot be
// read (unknown flags, malformed values and files); the caller runs validate() and adds its
// own rules, so that every problem is reported at once (`lattice plan` adds the layout's).
Result<TrainOptions> parse_train_flags(const std::vector<std::string>& args);
// Same as parse_train_options, starting from a JSON text whose keys are flag names (an embedded
// default), with `overrides` (command-line flags) applied on top.
Result<TrainOptions> parse_train_options_json(const std::string& json_text,
                                              const std::string& source_name,
                                              const std::vector<std::string>& overrides = {});
// The model of the Hugging Face model at `path` (--load-hf, `lattice ckpt import-hf`; a file or
// a directory, checkpoint/hf_files.h), GPT-2 or the Llama family by its config.json's
// model_type (else its tensor names): every model flag the user did not give (options.given)
// is set from it. GPT-2, as read_hf_gpt2_shape reads it: --num-layers, --hidden-size,
// --ffn-hidden-size, --max-position-embeddings (and --seq-length, to the positions) from the
// tensors and --num-attention-heads from config.json. The Llama family, from config.json
// (read_hf_llama_config, which refuses what Lattice cannot express): those sizes, the query
// groups, --norm-epsilon, --rotary-base, --rotary-percent, the tied head, the biases, RoPE,
// RMSNorm and SwiGLU, and the dropouts (config.json's attention_dropout, no hidden dropout)
// when not given. The vocabulary: with NullTokenizer, --vocab-size is one less than the file's
// rows (EOD is the last id). A flag that was given must agree; each disagreement is one sentence
// naming the flag, the file and both values. A GPT-2 without heads (no config.json with n_head
// and no --num-attention-heads) or a Llama without config.json is an error that says what to
// pass. Every parser of `lattice train`'s flags applies it for --load-hf.
Status apply_hf_model(const std::string& path, TrainOptions& options);

// The flag reference printed by `lattice train --help`.
std::string train_options_help();
// All settings as a flat JSON object keyed by flag name (for the run record).
std::string train_options_json(const TrainOptions& options);

}  // namespace lattice
