// lattice ckpt inspect | export-hf | import-hf | reshard | merge-lora: checkpoints without
// training. Offline tools write every rank's shard from this one process through the same two
// halves a distributed save uses (checkpoint.h), so what they write loads like a training save.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_model.h"
#include "commands.h"
#include "lattice/layout.h"
#include "lattice/train_options.h"
#include "parallel/model_chunks.h"

namespace lattice::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: lattice ckpt <command> ...\n\n"
    "  inspect DIR                  iteration, layout, model, files (checksums verified), tensors\n"
    "  export-hf DIR OUT [--hf-dtype fp32|bf16]\n"
    "                               the model as a Hugging Face model: GPT-2 (learned positions,\n"
    "                               LayerNorm), Llama (Qwen2 with a QKV-only bias), Mixtral\n"
    "                               (with experts) or LLaVA (a CLIP tower before one of them);\n"
    "                               OUT is a directory (model.safetensors, sharded above 5 GB,\n"
    "                               and config.json) or a .safetensors file (config.json\n"
    "                               beside it)\n"
    "  import-hf HF DIR [flags]     a Hugging Face model (GPT-2, llama, qwen2, mistral, mixtral,\n"
    "                               llava: a model directory, sharded or not, or a safetensors\n"
    "                               file with config.json beside it) as a weights-only checkpoint\n"
    "                               (iteration 0; train from it with --load DIR --finetune); the\n"
    "                               model comes from HF; model flags given must agree; tokenizer\n"
    "                               flags as `train`'s\n"
    "  reshard DIR OUT --tensor-model-parallel-size T --pipeline-model-parallel-size P\n"
    "          [--num-layers-per-virtual-pipeline-stage V]\n"
    "          [--expert-model-parallel-size E --expert-tensor-parallel-size ET]\n"
    "                               the checkpoint as that layout saves it (any layout also loads\n"
    "                               any checkpoint directly: resharding is optional)\n"
    "  merge-lora --base DIR --lora DIR --output OUT\n"
    "                               a LoRA run's adapters folded into its base, W + (alpha/r) B "
    "A,\n"
    "                               as an ordinary weights-only checkpoint (TP 1, PP 1)\n\n"
    "DIR is a --save directory (its latest checkpoint) or one iter_NNNNNNN directory in it.\n";

// DIR as given: an iteration directory, or a save directory's latest checkpoint.
Result<CheckpointRef> resolve(const std::string& path) {
  if (fs::exists(path + "/metadata.json")) {
    CheckpointRef ref;
    ref.path = path;
    ref.dir = fs::path(path).parent_path().string();
    const std::string name = fs::path(path).filename().string();
    ref.iteration = name.rfind("iter_", 0) == 0 ? std::atoi(name.c_str() + 5) : 0;
    return ref;
  }
  return find_checkpoint(path, 0);
}

Result<std::unique_ptr<CheckpointReader>> open_reader(const std::string& path) {
  Result<CheckpointRef> ref = resolve(path);
  if (!ref) return ref.status();
  return CheckpointReader::open(ref->path);
}

int inspect(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << kUsage;
    return 2;
  }
  Result<std::unique_ptr<CheckpointReader>> r = open_reader(args[0]);
  if (!r) {
    print_error("ckpt inspect", r.status().message());
    return 1;
  }
  CheckpointReader& c = **r;
  const ModelConfig& m = c.model();
  const TrainState& s = c.state();
  std::printf("checkpoint  %s\n", c.path().c_str());
  std::printf("iteration   %d (consumed samples %lld, optimizer steps %d, skipped %d)\n",
              s.iteration, static_cast<long long>(s.consumed_samples), s.steps_taken,
              s.skipped_iterations);
  std::printf("layout      %s\n", c.layout_summary().c_str());
  std::string experts;  // ", 8 experts (top 2) on 1 layer in 2"
  if (m.num_experts > 0)
    experts = ", " + std::to_string(m.num_experts) + " experts (top " +
              std::to_string(m.moe_router_topk) + ") on " +
              (m.moe_layer_freq == 1 ? std::string("every layer")
                                     : "1 layer in " + std::to_string(m.moe_layer_freq));
  std::printf(
      "model       %d layers, hidden %d, %d heads, ffn %d, seq %d, vocab %d%s (%.2f M "
      "parameters)\n",
      m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn(), m.seq_length, m.vocab_size,
      experts.c_str(), m.num_parameters() / 1e6);
  std::printf("contents    weights%s\n",
              c.has_optimizer_state() ? ", AdamW moments, training progress" : " only");
  int bad = 0;
  int64_t total = 0;
  std::printf("files\n");
  for (const CheckpointReader::FileInfo& f : c.files()) {
    total += f.bytes;
    std::printf("  %-28s %12lld bytes  crc32c %08x\n", f.name.c_str(),
                static_cast<long long>(f.bytes), f.crc32c);
  }
  const Status integrity = c.verify_all();
  if (!integrity) bad++;
  std::printf("integrity   %s\n",
              integrity ? "every file's size and checksum match" : integrity.message().c_str());
  std::map<std::string, std::pair<std::vector<int64_t>, int>> tensors;  // name -> shape, pieces
  for (const CheckpointPiece& p : c.pieces())
    if (p.kind == "model") {
      tensors[p.name].first = p.global_shape;
      tensors[p.name].second++;
    }
  std::printf("tensors     %zu global tensors in %zu pieces, %.1f MB on disk\n", tensors.size(),
              c.pieces().size(), total / 1e6);
  for (const auto& [name, info] : tensors)
    std::printf("  %-56s %-14s %d piece%s\n", name.c_str(),
                safetensors::shape_to_string(info.first).c_str(), info.second,
                info.second == 1 ? "" : "s");
  return bad ? 1 : 0;
}

int export_hf_command(const std::vector<std::string>& args) {
  std::string dtype_text = "fp32";
  std::vector<std::string> paths;
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i] == "--hf-dtype" && i + 1 < args.size())
      dtype_text = args[++i];
    else if (args[i].rfind("--hf-dtype=", 0) == 0)
      dtype_text = args[i].substr(11);
    else
      paths.push_back(args[i]);
  }
  Result<safetensors::Dtype> dtype = parse_hf_dtype(dtype_text);
  if (paths.size() != 2 || !dtype) {
    if (!dtype) print_error("ckpt export-hf", dtype.status().message());
    std::cerr << kUsage;
    return 2;
  }
  Result<std::unique_ptr<CheckpointReader>> r = open_reader(paths[0]);
  if (!r) {
    print_error("ckpt export-hf", r.status().message());
    return 1;
  }
  ModelConfig m = (*r)->model();
  if (const std::vector<std::string> why = hf_unsupported(m); !why.empty()) {
    print_error("ckpt export-hf",
                (*r)->path() + " holds a model with no Hugging Face form: " + why.front());
    return 1;
  }
  const ParamLayout layout(m);
  std::vector<float> params(layout.total_numel(), 0.0f), global;
  std::vector<int64_t> shape;
  for (const ParamTensor& t : layout.tensors()) {
    if (Status s = (*r)->read_global("model", t.name, shape, global); !s) {
      print_error("ckpt export-hf", s.message());
      return 1;
    }
    // The saved word embedding may carry other padding rows (another TP size): the rows of
    // the real vocabulary are what export keeps.
    std::copy_n(global.begin(), std::min(global.size(), t.numel), params.begin() + t.offset);
  }
  if (Status s = export_hf(paths[1], m, layout, params.data(), {*dtype}); !s) {
    print_error("ckpt export-hf", s.message());
    return 1;
  }
  std::printf("wrote %s (%s) from %s\n", paths[1].c_str(),
              hf_architecture_name(hf_architecture_of(m)), (*r)->path().c_str());
  return 0;
}

// A one-rank layout for offline writers.
ParallelLayout single_layout(int num_layers) {
  ParallelLayout l;
  l.num_layers = num_layers;
  return l;
}

int import_hf_command(const std::vector<std::string>& args) {
  if (args.size() < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::vector<std::string> flags(args.begin() + 2, args.end());
  Result<TrainOptions> o = parse_train_flags(flags);
  if (!o) {
    print_error("ckpt import-hf", o.status().message());
    return 2;
  }
  if (Status s = apply_hf_model(args[0], *o); !s) {
    print_error("ckpt import-hf", s.message());
    return 2;
  }
  ModelConfig m = o->model;
  m.tensor_model_parallel_size = 1;
  if (m.has_vision() && m.vision.image_norm_assumed)  // an HF LLaVA without the file
    std::printf(
        "note: %s has no preprocessor_config.json; the checkpoint records CLIP's image mean "
        "and std (LLaVA's default)\n",
        args[0].c_str());
  if (o->tokenizer.type != "NullTokenizer") {
    Result<std::unique_ptr<Tokenizer>> t = make_tokenizer(o->tokenizer);
    if (!t) {
      print_error("ckpt import-hf", t.status().message());
      return 2;
    }
    m.vocab_size = (*t)->vocab_size();
  }
  if (const std::vector<std::string> v = m.validate(); !v.empty()) {
    print_error("ckpt import-hf", v.front());
    return 2;
  }
  HostChunk model(m);
  if (Status s = import_hf(args[0], m, model.layout, model.params.data()); !s) {
    print_error("ckpt import-hf", s.message());
    return 1;
  }
  const ParallelLayout layout = single_layout(m.num_layers);
  RankParts parts;
  parts.layout = &layout;
  parts.chunks = {model.weights()};
  const std::string dir = args[1];
  std::vector<std::string> notes;
  Result<SaveLock> lock = begin_save(dir, 0, &notes);
  for (const std::string& note : notes) std::printf("%s\n", note.c_str());
  if (!lock) {
    print_error("ckpt import-hf", dir + ": " + lock.status().message());
    return 1;
  }
  int64_t bytes = 0;
  Status s = write_shard(lock->tmp_dir(), 0, {}, parts);
  if (s)
    s = finalize_checkpoint(dir, 0, 1, TrainState{}, m, train_options_json(*o),
                            {layout, false, false, false}, 0, &bytes);
  if (!s) {
    print_error("ckpt import-hf", s.message());
    return 1;
  }
  std::printf("wrote %s/%s (weights only, %.1f MB); train from it with --load %s --finetune\n",
              dir.c_str(), checkpoint_directory_name(0).c_str(), bytes / 1e6, dir.c_str());
  return 0;
}

// The settings a resharded checkpoint records: the saved run's (its tokenizer, data, schedule),
// with the new layout's flags in place of the old ones. Only the layout changes offline; the
// flags given to reshard are not the run's (a checkpoint from before runs recorded their
// settings falls back to them).
std::string resharded_config(const CheckpointReader& reader, const TrainOptions& target) {
  const nlohmann::json metadata = nlohmann::json::parse(reader.metadata_json(), nullptr, false);
  const nlohmann::json* saved = nullptr;
  if (metadata.is_object() && metadata.contains("config") && metadata["config"].is_object() &&
      !metadata["config"].empty())
    saved = &metadata["config"];
  if (!saved) return train_options_json(target);
  nlohmann::json config = *saved;
  const nlohmann::json fresh = nlohmann::json::parse(train_options_json(target));
  for (const char* key : {"tensor-model-parallel-size", "pipeline-model-parallel-size",
                          "num-layers-per-virtual-pipeline-stage", "expert-model-parallel-size",
                          "expert-tensor-parallel-size"})
    if (fresh.contains(key)) config[key] = fresh[key];
  // Sequence parallelism splits over TP ranks: one rank has nothing to split.
  if (target.model.tensor_model_parallel_size == 1) config["sequence-parallel"] = false;
  return config.dump();
}

int reshard(const std::vector<std::string>& args) {
  if (args.size() < 2) {
    std::cerr << kUsage;
    return 2;
  }
  Result<CheckpointRef> ref = resolve(args[0]);
  if (!ref) {
    print_error("ckpt reshard", ref.status().message());
    return 1;
  }
  Result<std::unique_ptr<CheckpointReader>> r = CheckpointReader::open(ref->path);
  if (!r) {
    print_error("ckpt reshard", r.status().message());
    return 1;
  }
  // The saved run's settings with the new layout flags on top.
  const std::vector<std::string> flags(args.begin() + 2, args.end());
  Result<TrainOptions> o = parse_train_flags(flags);
  if (!o) {
    print_error("ckpt reshard", o.status().message());
    return 2;
  }
  ModelConfig m = (*r)->model();
  m.tensor_model_parallel_size = o->model.tensor_model_parallel_size;
  TrainOptions target = *o;
  target.model = m;
  const int world = m.tensor_model_parallel_size * o->parallel.pipeline_model_parallel_size;
  // The batch does not matter offline; one that every layout rule accepts.
  target.global_batch_size = target.micro_batch_size * o->parallel.pipeline_model_parallel_size;
  Result<ParallelLayout> layout = make_layout(target, world);
  if (!layout) {
    print_error("ckpt reshard", layout.status().message());
    return 2;
  }
  const bool optimizer = (*r)->has_optimizer_state();
  const std::string out = args[1];
  const int iteration = (*r)->state().iteration;
  std::vector<std::string> notes;
  Result<SaveLock> lock = begin_save(out, iteration, &notes);
  for (const std::string& note : notes) std::printf("%s\n", note.c_str());
  if (!lock) {
    print_error("ckpt reshard", out + ": " + lock.status().message());
    return 1;
  }
  const std::string tmp = lock->tmp_dir();
  for (int rank = 0; rank < world; rank++) {
    const ParallelLayout::Coord c = layout->coord(rank);
    std::vector<std::unique_ptr<HostChunk>> chunks;
    std::vector<std::unique_ptr<AdamW<float>>> optimizers;
    RankParts parts;
    parts.layout = &*layout;
    for (int chunk = 0; chunk < layout->vpp; chunk++) {
      chunks.push_back(std::make_unique<HostChunk>(m, shard_of(*layout, c, chunk, false)));
      parts.chunks.push_back(chunks.back()->weights());
      if (optimizer) {
        optimizers.push_back(std::make_unique<AdamW<float>>(chunks.back()->layout, target.optim));
        parts.moments.push_back(moment_pieces(*optimizers.back()));
      }
    }
    if (Status s = load_checkpoint(*ref, parts, !optimizer, nullptr); !s) {
      print_error("ckpt reshard", s.message());
      return 1;
    }
    if (Status s = write_shard(tmp, rank, c, parts); !s) {
      print_error("ckpt reshard", s.message());
      return 1;
    }
  }
  int64_t bytes = 0;
  if (Status s = finalize_checkpoint(out, iteration, world, (*r)->state(), m,
                                     resharded_config(**r, target),
                                     {*layout, false, false, optimizer}, 0, &bytes);
      !s) {
    print_error("ckpt reshard", s.message());
    return 1;
  }
  const std::string experts =
      layout->ep > 1 || layout->etp != layout->tp
          ? ", EP " + std::to_string(layout->ep) + ", expert TP " + std::to_string(layout->etp)
          : "";
  std::printf("wrote %s/%s for TP %d, PP %d%s (%.1f MB)\n", out.c_str(),
              checkpoint_directory_name(iteration).c_str(), layout->tp, layout->pp, experts.c_str(),
              bytes / 1e6);
  return 0;
}

}  // namespace

int ckpt_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "inspect") return inspect(rest);
  if (args[0] == "export-hf") return export_hf_command(rest);
  if (args[0] == "import-hf") return import_hf_command(rest);
  if (args[0] == "reshard") return reshard(rest);
  if (args[0] == "merge-lora") return merge_lora_command(rest);
  print_error("ckpt", "unknown command '" + args[0] + "'");
  std::cerr << kUsage;
  return 2;
}

}  // namespace lattice::cli
