// One table of options drives the command line, --config files, --help and the JSON record,
// so the four can never disagree about a flag's name, type or meaning.
#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "checkpoint/hf_model.h"
#include "lattice/cpu_isa.h"
#include "lattice/flags.h"
#include "lattice/train_options.h"

namespace lattice {

namespace {

std::vector<FlagSpec> option_table(TrainOptions& o) {
  ModelConfig& m = o.model;
  OptimizerConfig& p = o.optim;
  return {
      {"num-layers", "transformer layers", &m.num_layers},
      {"hidden-size", "hidden size (C)", &m.hidden_size},
      {"ffn-hidden-size", "MLP hidden size; 0 means 4 * --hidden-size", &m.ffn_hidden_size},
      {"num-attention-heads", "attention heads", &m.num_attention_heads},
      {"seq-length", "sequence length in tokens", &m.seq_length},
      {"max-position-embeddings", "position table size; 0 means --seq-length",
       &m.max_position_embeddings},
      {"vocab-size", "NullTokenizer's vocabulary; EOD is this id, so the model has one more",
       &o.tokenizer.vocab_size},
      {"make-vocab-size-divisible-by", "pad the vocabulary to a multiple of this",
       &m.make_vocab_size_divisible_by},
      {"attention-dropout", "dropout on attention probabilities; 0 disables", &m.attention_dropout},
      {"hidden-dropout", "dropout on hidden states; 0 disables", &m.hidden_dropout},
      {"init-method-std", "standard deviation of the weight initialisation", &m.init_method_std},
      {"position-embedding-type", "learned_absolute | rope | none", &m.position_embedding_type},
      {"rotary-base", "RoPE's base (theta)", &m.rotary_base},
      {"rotary-percent", "share of each head's dimensions RoPE rotates", &m.rotary_percent},
      {"use-rope-scaling",
       "Llama 3.1's RoPE frequency scaling (low/high frequency factors 1 and 4 over 8192 "
       "original positions)",
       &m.use_rope_scaling},
      {"rope-scaling-factor", "with --use-rope-scaling: the factor long wavelengths are divided by",
       &m.rope_scaling_factor},
      {"normalization", "LayerNorm | RMSNorm", &m.normalization},
      {"norm-epsilon", "epsilon of the normalisation layers", &m.norm_epsilon},
      {"swiglu", "gated MLP down(silu(gate(x)) * up(x)) (Llama); --ffn-hidden-size is its width",
       &m.swiglu},
      {"group-query-attention", "key/value heads shared by groups of query heads (GQA)",
       &m.group_query_attention},
      {"num-query-groups", "with --group-query-attention: key/value heads (1 is MQA)",
       &m.num_query_groups},
      {"untie-embeddings-and-output-weights", "an LM head of its own, not the word embedding",
       &m.untie_embeddings_and_output_weights},
      {"disable-bias-linear", "no biases in the linear layers", &m.disable_bias_linear},
      {"add-qkv-bias", "a QKV bias even with --disable-bias-linear (Qwen2)", &m.add_qkv_bias},
      {"lora-rank",
       "LoRA: adapters of this rank on the --lora-target-modules, base weights frozen; 0 is off",
       &m.lora_rank},
      {"lora-alpha", "LoRA: the adapters' output is scaled by alpha / rank", &m.lora_alpha},
      {"lora-dropout", "LoRA: dropout on the adapters' input", &m.lora_dropout},
      {"lora-target-modules", "LoRA: comma list of linear_qkv, linear_proj, linear_fc1, linear_fc2",
       &m.lora_target_modules},
      {"num-experts", "MoE: experts per MoE layer; 0 is a dense model", &m.num_experts},
      {"moe-router-topk", "MoE: experts each token is routed to", &m.moe_router_topk},
      {"moe-ffn-hidden-size", "MoE: an expert's MLP width; 0 means --ffn-hidden-size",
       &m.moe_ffn_hidden_size},
      {"moe-aux-loss-coeff", "MoE: weight of the load-balancing loss; 0 disables",
       &m.moe_aux_loss_coeff},
      {"moe-router-load-balancing-type", "MoE: aux_loss | none", &m.moe_router_load_balancing_type},
      {"moe-expert-capacity-factor",
       "MoE: cap each expert at ceil(tokens x topk / experts x factor), dropping the lowest "
       "router weights; 0 drops nothing",
       &m.moe_expert_capacity_factor},
      {"moe-token-dropping", "MoE: drop tokens over capacity (needs --moe-expert-capacity-factor)",
       &m.moe_token_dropping},
      {"moe-layer-freq", "MoE: every Nth layer (0, N, 2N, ...) is an MoE layer; 1 means all",
       &m.moe_layer_freq},
      {"vision-model-type", "clip: a LLaVA-style vision tower (docs/vision.md); empty: text only",
       &o.vision_model_type},
      {"freeze-LM", "vision-language: the language model is frozen (LLaVA's projector-only stage)",
       &m.freeze_lm},
      {"freeze-ViT", "vision-language: the vision encoder is frozen (the projector trains)",
       &m.freeze_vision},
      {"vision-num-layers", "vision encoder: transformer layers", &o.vision.num_layers},
      {"vision-hidden-size", "vision encoder: width", &o.vision.hidden_size},
      {"vision-ffn-hidden-size", "vision encoder: MLP width; 0 means 4 * --vision-hidden-size",
       &o.vision.ffn_hidden_size},
      {"vision-num-attention-heads", "vision encoder: attention heads",
       &o.vision.num_attention_heads},
      {"patch-dim", "vision encoder: patch side in pixels", &o.vision.patch_dim},
      {"img-h", "vision encoder: image height in pixels", &o.vision.img_h},
      {"img-w", "vision encoder: image width in pixels", &o.vision.img_w},
      {"num-channels", "vision encoder: image channels", &o.vision.num_channels},
      {"disable-vision-class-token", "vision encoder: no class token (CLIP has one)",
       &o.disable_vision_class_token},
      {"vision-patch-bias", "vision encoder: a bias in the patch embedding (CLIP has none)",
       &o.vision.patch_bias},
      {"vision-select-layer",
       "vision encoder: the hidden state fed to the projector (LLaVA's; -2 the penultimate layer)",
       &o.vision.select_layer},
      {"vision-projector-type", "mlp: LLaVA-1.5's Linear - GELU - Linear",
       &o.vision.projector_type},
      {"micro-batch-size", "samples per micro-batch", &o.micro_batch_size},
      {"global-batch-size",
       "samples per iteration; 0 means --micro-batch-size x data-parallel size (Megatron)",
       &o.global_batch_size},
      {"train-iters", "iterations to train", &o.train_iters},
      {"lr", "peak learning rate", &p.lr},
      {"min-lr", "learning rate at the end of decay", &p.min_lr},
      {"lr-decay-style", "constant | linear | cosine", &p.lr_decay_style},
      {"lr-warmup-iters", "linear warm-up iterations", &p.lr_warmup_iters},
      {"lr-decay-iters", "iterations over which to decay; 0 means --train-iters",
       &p.lr_decay_iters},
      {"weight-decay", "AdamW weight decay, not applied to biases and norms", &p.weight_decay},
      {"adam-beta1", "AdamW beta1", &p.adam_beta1},
      {"adam-beta2", "AdamW beta2", &p.adam_beta2},
      {"adam-eps", "AdamW epsilon", &p.adam_eps},
      {"clip-grad", "clip the global gradient L2 norm to this; 0 disables", &p.clip_grad},
      {"tensor-model-parallel-size", "ranks that split every layer (TP)",
       &m.tensor_model_parallel_size},
      {"pipeline-model-parallel-size", "ranks that split the layers into stages (PP)",
       &o.parallel.pipeline_model_parallel_size},
      {"context-parallel-size",
       "ranks that split every sequence (CP; 2 x CP chunks, Megatron's causal load balance)",
       &o.parallel.context_parallel_size},
      {"expert-model-parallel-size", "ranks that split the experts of each MoE layer (EP)",
       &o.parallel.expert_model_parallel_size},
      {"expert-tensor-parallel-size",
       "ranks that split every expert (ETP); 0 means --tensor-model-parallel-size",
       &o.parallel.expert_tensor_parallel_size},
      {"num-layers-per-virtual-pipeline-stage",
       "layers per virtual stage for interleaved 1F1B; 0 means no interleaving",
       &o.parallel.num_layers_per_virtual_pipeline_stage},
      {"decoder-first-pipeline-num-layers",
       "layers on the first pipeline stage (the rest split evenly); 0 means an even split",
       &o.parallel.decoder_first_pipeline_num_layers},
      {"decoder-last-pipeline-num-layers",
       "layers on the last pipeline stage, which also holds the LM head; 0 means an even split",
       &o.parallel.decoder_last_pipeline_num_layers},
      {"sequence-parallel", "split LayerNorm and dropout along the sequence over TP ranks",
       &o.parallel.sequence_parallel},
      {"use-distributed-optimizer", "shard optimizer state over data-parallel ranks (ZeRO-1)",
       &o.parallel.use_distributed_optimizer},
      {"ddp-bucket-size", "gradient elements per data-parallel bucket; 0 means max(40M, 1M * DP)",
       &o.parallel.ddp_bucket_size},
      {"recompute-granularity",
       "recompute activations in backward: full | selective (selective drops nothing: the "
       "attention keeps only its log-sum-exps)",
       &o.parallel.recompute_granularity},
      {"recompute-method", "with full recomputation: uniform | block",
       &o.parallel.recompute_method},
      {"recompute-num-layers",
       "uniform: layers per recomputed chunk; block: recomputed layers per stage",
       &o.parallel.recompute_num_layers},
      {"seed", "random seed for initialisation, data and dropout", &o.seed},
      {"log-interval", "print a progress line every N iterations", &o.log_interval},
      {"mock-data", "train on synthetic documents (Megatron's --mock-data)", &o.mock_data},
      {"data-path", "dataset prefix(es): P, or W1 P1 W2 P2 ... blended by weight", &o.data_path},
      {"split", "train,valid,test weights over the documents", &o.split},
      {"sft", "supervised fine-tuning: --data-path prefixes with a {prefix}_loss_mask dataset",
       &o.sft},
      {"sft-packing", "with --sft: pack several conversations into each sample", &o.sft_packing},
      {"data-cache-path", "where sample indices are cached; empty means beside the data",
       &o.data_cache_path},
      {"eval-interval", "iterations between validation runs", &o.eval_interval},
      {"eval-iters", "global batches per validation run", &o.eval_iters},
      {"eval-tasks", "multiple-choice task files (comma-separated) scored every --eval-interval",
       &o.eval_tasks},
      {"tokenizer-type",
       "NullTokenizer | GPT2BPETokenizer | SentencePieceTokenizer | GPTSentencePieceTokenizer | "
       "HuggingFaceTokenizer",
       &o.tokenizer.type},
      {"vocab-file", "GPT2BPETokenizer vocabulary (vocab.json)", &o.tokenizer.vocab_file},
      {"merge-file", "GPT2BPETokenizer merges (merges.txt)", &o.tokenizer.merge_file},
      {"tokenizer-model",
       "SentencePiece model file; HuggingFaceTokenizer: tokenizer.json or its directory",
       &o.tokenizer.model_file},
      {"threads", "CPU threads; 0 means all cores", &o.threads},
      {"cpu-isa",
       "auto | generic | avx2 | avx512: the instruction set of the CPU kernels; auto means "
       "LATTICE_CPU_ISA when set, else the widest this CPU runs",
       &o.cpu_isa},
      {"load-hf",
       "start from Hugging Face weights: GPT-2, the Llama family (llama, qwen2, mistral), "
       "mixtral, or llava (a vision tower with either); a model "
       "directory (config.json, model.safetensors or shards with their index) or a safetensors "
       "file with config.json beside it; model flags not given are read from it",
       &o.load_hf},
      {"save", "directory for checkpoints (saved at the end, on SIGTERM and every --save-interval)",
       &o.save},
      {"save-interval", "save a checkpoint every N iterations; 0 means only at the end",
       &o.save_interval},
      {"save-retain", "keep only the newest K checkpoints; 0 keeps all", &o.save_retain},
      {"load", "resume from the latest checkpoint in this directory (any parallel layout)",
       &o.load},
      {"ckpt-step", "with --load: the iteration to load instead of the latest", &o.ckpt_step},
      {"finetune", "with --load: take the weights only; iteration and optimizer start afresh",
       &o.finetune},
      {"pretrained-checkpoint",
       "start from this checkpoint's weights (iteration and optimizer afresh); with --lora-rank "
       "the frozen base, while --load resumes the adapters",
       &o.pretrained_checkpoint},
      {"skip-train",
       "evaluate the validation and test splits (and --eval-tasks) on the loaded weights without "
       "training",
       &o.skip_train},
      {"exit-interval", "save (with --save) and exit after an iteration divisible by N",
       &o.exit_interval},
      {"exit-duration-in-mins",
       "save (with --save) and exit once this many minutes have passed since the start",
       &o.exit_duration_in_mins},
      {"spike-window",
       "good iterations a loss or grad norm is judged against (z-score); judging starts once "
       "half are there",
       &o.spike_window},
      {"spike-z", "z-score over which a loss or grad norm is a spike", &o.spike_z},
      {"on-spike",
       "warn | skip | stop | rollback: at a loss or grad-norm spike or a non-finite loss or norm, "
       "print and record it (warn), also leave the weights as they are that iteration (skip, "
       "counted as skipped), save (with --save) and end the run (stop), or go back to the latest "
       "checkpoint in --save and go on from there without the batches from it to the spike "
       "(rollback; a new run in the store continues the lineage)",
       &o.on_spike},
      {"iterations-to-skip",
       "1-based iterations whose global batch is consumed without training on it (no forward, "
       "backward or optimizer step)",
       &o.iterations_to_skip},
      {"distributed-timeout-minutes",
       "end the job when a rank waits this long for others in one collective or pipeline "
       "message, naming them (fractions allowed; 0: wait for ever)",
       &o.distributed_timeout_minutes},
      {"save-hf",
       "write the final weights as a Hugging Face model: GPT-2 for learned positions with "
       "LayerNorm, else Llama (Qwen2 with --add-qkv-bias alone; Mixtral with experts; LLaVA "
       "with a vision tower, and its preprocessor_config.json); into a directory "
       "(model.safetensors, sharded above 5 GB, and config.json), or the .safetensors file "
       "named with config.json beside it",
       &o.save_hf},
      {"hf-dtype", "fp32 | bf16: the dtype --save-hf writes", &o.hf_dtype},
      {"profile", "print where the time went, per op, at the end", &o.profile},
      {"fp64",
       "train in double precision: checks a parallel layout against one process without "
       "float rounding (slow)",
       &o.fp64},
      {"bf16", "bfloat16 weights and activations, fp32 master weights (needs --device cuda)",
       &o.bf16},
      {"fp16",
       "float16 training with loss scaling; on the CPU: fp32 arithmetic with the loss scaler",
       &o.fp16},
      {"loss-scale", "static loss scale (fp16, or bf16 as Megatron); 0 means dynamic for --fp16",
       &o.loss_scale},
      {"initial-loss-scale", "dynamic loss scaler: starting scale", &o.initial_loss_scale},
      {"min-loss-scale", "dynamic loss scaler: the scale never goes below this", &o.min_loss_scale},
      {"loss-scale-window", "dynamic loss scaler: clean iterations before the scale doubles",
       &o.loss_scale_window},
      {"hysteresis", "dynamic loss scaler: overflowing iterations before the scale halves",
       &o.hysteresis},
      {"device", "cpu | cuda | auto (cuda when this build has the GPU trainer and a GPU)",
       &o.device},
      {"log-memory", "print every rank's memory by category after the first iteration",
       &o.log_memory},
      {"skip-memory-check",
       "start even when the estimated memory (`lattice plan`) exceeds what the machine has "
       "available",
       &o.skip_memory_check},
      {"timing-log-level", "1: print every rank's time per phase at each log line",
       &o.timing_log_level},
      {"db",
       "run database to record this run in (created with its directory); empty means "
       "$LATTICE_DATA_DIR/runs.sqlite, none means --no-db",
       &o.db},
      {"no-db", "train without recording the run in a run database", &o.no_db},
      {"db-required",
       "stop training (saving with --save) when the run database cannot be written; without "
       "it training goes on, says so, and writes the kept steps when the database works again",
       &o.db_required},
      {"db-heartbeat-interval",
       "seconds between the run's heartbeats, written whatever training is doing (readers show "
       "a running run crashed after 60 s without one); also the retry interval of a failing "
       "database",
       &o.db_heartbeat_interval},
      {"db-journal-mode",
       "auto | wal | delete: the run database's journal; auto uses delete (rollback) on network "
       "filesystems (NFS, Lustre, ...) where WAL is unsafe, else wal",
       &o.db_journal_mode},
      {"exit-signal-handler",
       "Megatron's flag, accepted: SIGTERM, SIGINT and SIGUSR1 always save (with --save) and stop "
       "at the next iteration",
       &o.exit_signal_handler},
      {"run-name", "the run's unique name in the database; empty means run-<date>-<time>-<id>",
       &o.run_name},
      {"tag", "tags for the run record", &o.tags},
  };
}

std::string normalise(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

constexpr const char* kCommand = "lattice train";

std::string assign_json(const FlagSpec& s, const nlohmann::json& v, const std::string& where) {
  const std::string key = where + ": key \"" + s.name + "\"";
  return std::visit(
      [&](auto* target) -> std::string {
        using V = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<V, std::vector<std::string>>) {
          target->clear();
          const nlohmann::json items = v.is_array() ? v : nlohmann::json::array({v});
          for (const auto& item : items) {
            if (!item.is_string() && !item.is_number())
              return key + " expects a list of strings, got " + v.dump();
            target->push_back(item.is_string() ? item.get<std::string>() : item.dump());
          }
        } else if constexpr (std::is_same_v<V, std::string>) {
          if (!v.is_string()) return key + " expects a string, got " + v.dump();
          *target = v.get<std::string>();
        } else if constexpr (std::is_same_v<V, bool>) {
          if (!v.is_boolean()) return key + " expects true or false, got " + v.dump();
          *target = v.get<bool>();
        } else if constexpr (std::is_same_v<V, int> || std::is_same_v<V, uint64_t>) {
          if (!v.is_number_integer() || (std::is_same_v<V, uint64_t> && v.get<int64_t>() < 0))
            return key + " expects an integer, got " + v.dump();
          *target = v.get<V>();
        } else {
          if (!v.is_number()) return key + " expects a number, got " + v.dump();
          *target = v.get<V>();
        }
        return "";
      },
      s.target);
}

std::string join_errors(const std::vector<std::string>& errors) {
  std::string out;
  for (const std::string& e : errors) out += (out.empty() ? "" : "\n") + e;
  return out;
}

// Applies a JSON config object onto `o`; appends errors.
void apply_json(TrainOptions& o, const std::string& text, const std::string& source,
                std::vector<std::string>& errors) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const size_t byte = std::min<size_t>(e.byte, text.size());
    const size_t line = 1 + std::count(text.begin(), text.begin() + byte, '\n');
    errors.push_back(source + ":" + std::to_string(line) + ": not valid JSON (" +
                     std::string(e.what()).substr(std::string(e.what()).find(':') + 2) + ")");
    return;
  }
  if (!doc.is_object()) {
    errors.push_back(source + ": expected a JSON object of flag names to values");
    return;
  }
  const std::vector<FlagSpec> table = option_table(o);
  for (auto& [raw_key, value] : doc.items()) {
    const std::string key = normalise(raw_key);
    const FlagSpec* s = find_flag(table, key);
    if (!s) {
      errors.push_back(source + ": " + unknown_flag_message("unknown key", key, table, kCommand));
      continue;
    }
    if (std::string e = assign_json(*s, value, source); !e.empty())
      errors.push_back(e);
    else
      o.given_flags.insert(s->name);
  }
}

}  // namespace

Result<std::vector<std::pair<double, std::string>>> TrainOptions::data_blend() const {
  std::vector<std::pair<double, std::string>> blend;
  if (data_path.size() == 1) {
    blend.emplace_back(1.0, data_path[0]);
    return blend;
  }
  if (data_path.size() % 2 != 0)
    return Status::invalid_argument("--data-path takes one prefix or weight-prefix pairs, got " +
                                    std::to_string(data_path.size()) + " values");
  for (size_t i = 0; i < data_path.size(); i += 2) {
    const std::string& text = data_path[i];
    double w = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), w);
    if (ec != std::errc() || p != text.data() + text.size() || !(w > 0))
      return Status::invalid_argument("--data-path weight '" + text + "' (before " +
                                      data_path[i + 1] + ") is not a positive number");
    blend.emplace_back(w, data_path[i + 1]);
  }
  return blend;
}

std::vector<std::string> ParallelOptions::recompute_errors() const {
  std::vector<std::string> errors;
  const ParallelOptions& par = *this;
  if (!par.recompute_granularity.empty() && par.recompute_granularity != "full" &&
      par.recompute_granularity != "selective")
    errors.push_back("--recompute-granularity '" + par.recompute_granularity +
                     "' is not one of full, selective");
  if (!par.recompute_method.empty() && par.recompute_method != "uniform" &&
      par.recompute_method != "block")
    errors.push_back("--recompute-method '" + par.recompute_method +
                     "' is not one of uniform, block");
  if (par.recompute_granularity == "full" && par.recompute_method.empty())
    errors.push_back("--recompute-granularity full needs --recompute-method uniform or block");
  if (par.recompute_granularity != "full" && !par.recompute_method.empty())
    errors.push_back("--recompute-method applies only with --recompute-granularity full");
  if (par.recompute_granularity == "full" && par.recompute_num_layers <= 0)
    errors.push_back("--recompute-granularity full needs a positive --recompute-num-layers");
  if (par.recompute_num_layers < 0) errors.push_back("--recompute-num-layers must not be negative");
  return errors;
}

std::vector<std::string> TrainOptions::micro_batch_size_errors(const ModelConfig& m) const {
  std::vector<std::string> errors;
  const int64_t B = micro_batch_size, T = m.seq_length;
  if (B <= 0 || T <= 0) return errors;
  const int64_t tokens = B * (T + 1);
  if (tokens > ModelConfig::kMaxDimension) {
    errors.push_back("--micro-batch-size " + std::to_string(B) + " x (--seq-length " +
                     std::to_string(T) + " + 1) = " + std::to_string(tokens) +
                     " tokens per micro-batch (inputs and next-token targets), more than " +
                     std::to_string(ModelConfig::kMaxDimension));
    return errors;
  }
  if (m.hidden_size <= 0 || m.num_attention_heads <= 0 || m.num_layers <= 0 || m.vocab_size <= 0 ||
      !m.size_errors().empty())
    return errors;
  // One micro-batch's activations in fp64 bytes on one process, in long double: every layer's
  // attention scores (B, NH, T, T) and its (B, T) x (16 C + 2 F) other tensors, the logits, and
  // the attention workspace of up to 4096 threads (2 T^2 each).
  const long double b = B, t = T, c = m.hidden_size, f = m.ffn(), nh = m.num_attention_heads,
                    l = m.num_layers, v = m.padded_vocab_size();
  const long double bytes =
      8 * l * b * (nh * t * t + t * (16 * c + 2 * f)) + 8 * b * t * v + 8 * 2 * t * t * 4096;
  if (bytes > static_cast<long double>(kMaxActivationBytes)) {
    char text[64];
    std::snprintf(text, sizeof text, "%.3Lg", bytes);
    errors.push_back("--micro-batch-size " + std::to_string(B) + " and --seq-length " +
                     std::to_string(T) + " make one micro-batch's activations about " + text +
                     " bytes (the attention scores alone are --micro-batch-size x "
                     "--num-attention-heads x --seq-length^2 per layer), more than 2^60; reduce "
                     "--seq-length or --micro-batch-size");
  }
  return errors;
}

VisionConfig TrainOptions::vision_config() const {
  VisionConfig v = vision;
  v.class_token = !disable_vision_class_token;
  v.lm_hidden_size = model.hidden_size;
  v.init_method_std = model.init_method_std;
  return v;
}

std::vector<std::string> TrainOptions::validate(bool require_data) const {
  // A file-based tokenizer's vocabulary is known once train() loads it.
  ModelConfig known = model;
  if (known.vocab_size == 0 && tokenizer.type != "NullTokenizer") known.vocab_size = 1;
  std::vector<std::string> errors = known.validate();
  auto positive = [&](const char* flag, int64_t v) {
    if (v <= 0) errors.push_back(std::string(flag) + " must be positive, got " + std::to_string(v));
  };
  positive("--micro-batch-size", micro_batch_size);
  positive("--train-iters", train_iters);
  positive("--log-interval", log_interval);
  for (std::string& e : micro_batch_size_errors(known)) errors.push_back(std::move(e));
  if (global_batch_size < 0) errors.push_back("--global-batch-size must be positive");
  if (micro_batch_size > 0 && global_batch_size % micro_batch_size != 0)
    errors.push_back("--global-batch-size " + std::to_string(global_batch_size) +
                     " is not a multiple of --micro-batch-size " +
                     std::to_string(micro_batch_size));
  if (!(optim.lr >= 0)) errors.push_back("--lr must not be negative");
  if (!(optim.min_lr >= 0) || optim.min_lr > optim.lr)
    errors.push_back("--min-lr " + std::to_string(optim.min_lr) + " must lie in [0, --lr " +
                     std::to_string(optim.lr) + "]");
  if (optim.lr_decay_style != "constant" && optim.lr_decay_style != "linear" &&
      optim.lr_decay_style != "cosine")
    errors.push_back("--lr-decay-style '" + optim.lr_decay_style +
                     "' is not one of constant, linear, cosine");
  if (optim.lr_warmup_iters < 0) errors.push_back("--lr-warmup-iters must not be negative");
  if (optim.lr_decay_iters < 0) errors.push_back("--lr-decay-iters must not be negative");
  const int decay = optim.lr_decay_iters > 0 ? optim.lr_decay_iters : train_iters;
  if (optim.lr_warmup_iters > decay && optim.lr_decay_style != "constant")
    errors.push_back("--lr-warmup-iters " + std::to_string(optim.lr_warmup_iters) +
                     " exceeds the decay length (--lr-decay-iters or --train-iters) " +
                     std::to_string(decay));
  if (!(optim.weight_decay >= 0)) errors.push_back("--weight-decay must not be negative");
  if (!(optim.adam_beta1 >= 0 && optim.adam_beta1 < 1))
    errors.push_back("--adam-beta1 must lie in [0, 1)");
  if (!(optim.adam_beta2 >= 0 && optim.adam_beta2 < 1))
    errors.push_back("--adam-beta2 must lie in [0, 1)");
  if (!(optim.adam_eps > 0)) errors.push_back("--adam-eps must be positive");
  if (!(optim.clip_grad >= 0)) errors.push_back("--clip-grad must not be negative");
  if (threads < 0) errors.push_back("--threads must not be negative");
  if (cpu_isa != "auto" && !kernels::parse_cpu_isa(cpu_isa))
    errors.push_back("--cpu-isa '" + cpu_isa + "' is not one of auto, generic, avx2, avx512");
  if (mock_data && !data_path.empty())
    errors.push_back("--mock-data and --data-path exclude each other");
  if (require_data && !mock_data && data_path.empty())
    errors.push_back(
        "no training data: pass --data-path PREFIX (see `lattice data preprocess`) or "
        "--mock-data");
  if (!data_path.empty())
    if (auto blend = data_blend(); !blend) errors.push_back(blend.status().message());
  if (sft && mock_data)
    errors.push_back(
        "--sft trains on a chat dataset with a loss mask: pass --data-path, not "
        "--mock-data");
  if (sft_packing && !sft) errors.push_back("--sft-packing needs --sft");
  if (eval_interval <= 0) errors.push_back("--eval-interval must be positive");
  if (eval_iters < 0) errors.push_back("--eval-iters must not be negative");
  const ParallelOptions& par = parallel;
  for (std::string& e : par.recompute_errors()) errors.push_back(std::move(e));
  if (par.ddp_bucket_size < 0) errors.push_back("--ddp-bucket-size must not be negative");
  if (save_interval < 0 || save_retain < 0 || ckpt_step < 0 || exit_interval < 0 ||
      !(exit_duration_in_mins >= 0))
    errors.push_back(
        "--save-interval, --save-retain, --ckpt-step, --exit-interval and "
        "--exit-duration-in-mins must not be negative");
  if (spike_window < 0) errors.push_back("--spike-window must not be negative (0: no spikes)");
  if (!(spike_z > 0)) errors.push_back("--spike-z must be positive");
  if (on_spike != "warn" && on_spike != "skip" && on_spike != "stop" && on_spike != "rollback")
    errors.push_back("--on-spike '" + on_spike + "' is not one of warn, skip, stop, rollback");
  if (on_spike == "rollback" && (save.empty() || save_interval <= 0))
    errors.push_back(
        "--on-spike rollback needs --save and --save-interval: it goes back to the latest "
        "checkpoint saved there");
  for (const std::string& text : iterations_to_skip) {
    char* end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < 1 || value > INT32_MAX) {
      errors.push_back("--iterations-to-skip '" + text +
                       "' is not an iteration number (1-based, a whole number)");
      break;
    }
  }
  if (!vision_model_type.empty()) {
    if (vision_model_type != "clip")
      errors.push_back("--vision-model-type '" + vision_model_type +
                       "' is not supported; the one type is clip (docs/vision.md)");
    for (std::string& e : vision_config().validate()) errors.push_back(std::move(e));
  } else if (model.freeze_vision) {
    errors.push_back("--freeze-ViT needs a vision tower (--vision-model-type clip)");
  }
  if (!(distributed_timeout_minutes >= 0))
    errors.push_back("--distributed-timeout-minutes must not be negative (0: wait for ever)");
  if (fp64 && (!save.empty() || !load.empty()))
    errors.push_back("--save and --load keep fp32 state; they do not combine with --fp64");
  if (!load.empty() && !load_hf.empty())
    errors.push_back(
        "--load and --load-hf exclude each other (use `lattice ckpt import-hf` to "
        "turn Hugging Face weights into a checkpoint)");
  if (Result<safetensors::Dtype> d = parse_hf_dtype(hf_dtype); !d)
    errors.push_back(d.status().message());
  // Found now, not after the training it would end.
  if (!save_hf.empty() || !load_hf.empty())
    for (const std::string& e : hf_unsupported(model))
      errors.push_back((save_hf.empty() ? "--load-hf: " : "--save-hf: ") + e);
  if (load.empty() && (ckpt_step > 0 || finetune))
    errors.push_back("--ckpt-step and --finetune apply to --load, which is not given");
  if (!pretrained_checkpoint.empty() && !load.empty() && !model.lora())
    errors.push_back(
        "--pretrained-checkpoint and --load exclude each other without --lora-rank (--load "
        "resumes a run, --pretrained-checkpoint starts one)");
  if (model.lora() && !save_hf.empty())
    errors.push_back(
        "--save-hf does not take --lora-rank: save the adapters (--save), merge them (lattice "
        "ckpt merge-lora) and export the merged checkpoint (lattice ckpt export-hf)");
  if (model.lora() && !load_hf.empty())
    errors.push_back(
        "--load-hf does not take --lora-rank: import the base first (lattice ckpt import-hf) and "
        "start from it with --pretrained-checkpoint");
  if (!pretrained_checkpoint.empty() && finetune)
    errors.push_back(
        "--finetune applies to --load; --pretrained-checkpoint is weights-only already");
  if (fp64 && !pretrained_checkpoint.empty())
    errors.push_back("--pretrained-checkpoint keeps fp32 state; it does not combine with --fp64");
  if (int(bf16) + int(fp16) + int(fp64) > 1)
    errors.push_back("--bf16, --fp16 and --fp64 exclude each other");
  if (!(loss_scale >= 0)) errors.push_back("--loss-scale must not be negative");
  if (loss_scale > 0 && !fp16 && !bf16)
    errors.push_back("--loss-scale applies only with --fp16 or --bf16");
  if (!(initial_loss_scale > 0)) errors.push_back("--initial-loss-scale must be positive");
  if (!(min_loss_scale > 0) || min_loss_scale > initial_loss_scale)
    errors.push_back("--min-loss-scale must lie in (0, --initial-loss-scale]");
  if (loss_scale_window <= 0) errors.push_back("--loss-scale-window must be positive");
  if (hysteresis <= 0) errors.push_back("--hysteresis must be positive");
  if (device != "cpu" && device != "cuda" && device != "auto")
    errors.push_back("--device '" + device + "' is not one of cpu, cuda, auto");
  if (timing_log_level < 0 || timing_log_level > 2)
    errors.push_back("--timing-log-level must be 0, 1 or 2");
  if (db_journal_mode != "auto" && db_journal_mode != "wal" && db_journal_mode != "delete")
    errors.push_back("--db-journal-mode '" + db_journal_mode + "' must be auto, wal or delete");
  if (db_required && (no_db || db == "none"))
    errors.push_back("--db-required asks for the run database that " +
                     std::string(no_db ? "--no-db" : "--db none") + " turns off");
  if (!(db_heartbeat_interval > 0 && db_heartbeat_interval <= 30))
    errors.push_back("--db-heartbeat-interval " + std::to_string(db_heartbeat_interval) +
                     " must lie in (0, 30] seconds: readers show a running run crashed after "
                     "60 s without a heartbeat");
  if (tokenizer.type == "NullTokenizer" && tokenizer.vocab_size <= 0)
    errors.push_back("--tokenizer-type NullTokenizer needs a positive --vocab-size");
  if (mock_data && tokenizer.type != "NullTokenizer")
    errors.push_back("--mock-data generates NullTokenizer ids; drop --tokenizer-type " +
                     tokenizer.type);
  return errors;
}

namespace {

// base_json (may be null): settings applied first, as if from a config file named base_source.
// Fails only on what could not be read (unknown flags and keys, malformed values and files).
Result<TrainOptions> parse_unchecked(const std::vector<std::string>& args,
                                     const std::string* base_json, const std::string& base_source) {
  TrainOptions o;
  std::vector<std::string> errors;
  const std::vector<FlagSpec> table = option_table(o);
  if (base_json) apply_json(o, *base_json, base_source, errors);

  // Pass 1: the config file, so that flags override it.
  for (size_t i = 0; i < args.size(); i++) {
    std::string path;
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) {
        errors.push_back("--config expects a file name");
        break;
      }
      path = args[i + 1];
    } else if (args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
    } else {
      continue;
    }
    std::ifstream in(path);
    if (!in) {
      errors.push_back("--config " + path + ": cannot open the file");
    } else {
      std::stringstream ss;
      ss << in.rdbuf();
      apply_json(o, ss.str(), path, errors);
      o.config_path = path;
    }
    break;
  }

  // Pass 2: every other flag (--config was applied first).
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i] == "--config") {
      i++;
      continue;
    }
    if (args[i].rfind("--config=", 0) != 0) rest.push_back(args[i]);
  }
  std::vector<std::string> flag_errors =
      parse_flags(rest, table, nullptr, kCommand, &o.given_flags);
  errors.insert(errors.end(), flag_errors.begin(), flag_errors.end());
  if (!errors.empty()) return Status::invalid_argument(join_errors(errors));
  // --global-batch-size stays 0 when not given: with_default_global_batch (layout.h) makes it
  // micro-batch x DP once the world size is known.
  // NullTokenizer's EOD is --vocab-size itself (Megatron), so the model needs one more id.
  // (Saturated: a --vocab-size of INT32_MAX is refused by the size rules, not wrapped.)
  o.model.vocab_size = o.tokenizer.type != "NullTokenizer" ? 0
                       : o.tokenizer.vocab_size < ModelConfig::kMaxDimension
                           ? o.tokenizer.vocab_size + 1
                           : static_cast<int>(ModelConfig::kMaxDimension);
  // The language model's size known, the vision tower rides in the model's config.
  o.model.vision_model_type = o.vision_model_type;
  // The model flags not given come from the Hugging Face model (apply_hf_model).
  if (!o.load_hf.empty())
    if (Status s = apply_hf_model(o.load_hf, o); !s) {
      std::vector<std::string> lines;
      std::stringstream message(s.message());
      for (std::string line; std::getline(message, line);) lines.push_back("--load-hf: " + line);
      return Status::invalid_argument(join_errors(lines));
    }
  o.model.vision = o.vision_config();  // --load-hf may have set the hidden size
  return o;
}

Result<TrainOptions> parse(const std::vector<std::string>& args, const std::string* base_json,
                           const std::string& base_source) {
  Result<TrainOptions> o = parse_unchecked(args, base_json, base_source);
  if (!o) return o;
  if (std::vector<std::string> v = o->validate(); !v.empty())
    return Status::invalid_argument(join_errors(v));
  return o;
}

}  // namespace

Result<TrainOptions> parse_train_options(const std::vector<std::string>& args) {
  return parse(args, nullptr, "");
}

Result<TrainOptions> parse_train_flags(const std::vector<std::string>& args) {
  return parse_unchecked(args, nullptr, "");
}

Result<TrainOptions> parse_train_options_json(const std::string& json_text,
                                              const std::string& source_name,
                                              const std::vector<std::string>& overrides) {
  return parse(overrides, &json_text, source_name);
}

std::string train_options_help() {
  TrainOptions defaults;
  std::ostringstream out;
  out << "usage: lattice train [--config run.json] [flags]\n\n"
         "Trains a GPT-2-style model. Flags use Megatron-LM's names; a --config JSON file\n"
         "holds the same keys (\"num-layers\" or \"num_layers\"), and flags override it.\n\n";
  out << flags_help(option_table(defaults));
  out << "  --config FILE                   read flags from a JSON file first\n";
  return out.str();
}

std::string train_options_json(const TrainOptions& options) {
  TrainOptions copy = options;
  nlohmann::json out = nlohmann::json::object();
  for (const FlagSpec& s : option_table(copy)) {
    std::visit(
        [&](auto* target) {
          if constexpr (std::is_same_v<std::remove_pointer_t<decltype(target)>, float>) {
            // The shortest text that reads back as the same float: 0.1f prints as 0.1.
            char buf[32];
            auto [end, ec] = std::to_chars(buf, buf + sizeof buf, *target);
            out[s.name] = std::stod(std::string(buf, end));
          } else {
            out[s.name] = *target;
          }
        },
        s.target);
  }
  return out.dump();
}

std::vector<int> TrainOptions::skip_iterations() const {
  std::vector<int> out;
  for (const std::string& text : iterations_to_skip) out.push_back(std::atoi(text.c_str()));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace lattice
