// lattice plan: check a TP x PP x DP layout against `lattice train`'s flags and estimate what
// each pipeline stage's ranks hold, as a table or JSON, without training data or a device.
// Non-goals: measuring anything (see `lattice train --log-memory`), throughput on real devices.
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

#include "commands.h"
#include "lattice/flags.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/tokenizer.h"
#include "lattice/train_options.h"

namespace lattice::cli {

namespace {

constexpr const char* kCommand = "plan";

// `lattice train --help` lines for the flags that shape a layout or its memory.
std::string relevant_train_flags_help() {
  static const std::set<std::string> relevant = {"num-layers",
                                                 "hidden-size",
                                                 "ffn-hidden-size",
                                                 "num-attention-heads",
                                                 "seq-length",
                                                 "max-position-embeddings",
                                                 "vocab-size",
                                                 "make-vocab-size-divisible-by",
                                                 "micro-batch-size",
                                                 "global-batch-size",
                                                 "tensor-model-parallel-size",
                                                 "pipeline-model-parallel-size",
                                                 "num-layers-per-virtual-pipeline-stage",
                                                 "sequence-parallel",
                                                 "use-distributed-optimizer",
                                                 "recompute-granularity",
                                                 "recompute-method",
                                                 "recompute-num-layers",
                                                 "tokenizer-type",
                                                 "vocab-file",
                                                 "merge-file",
                                                 "tokenizer-model"};
  std::istringstream in(train_options_help());
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("  --", 0) != 0) continue;
    const std::string name = line.substr(4, line.find(' ', 4) - 4);
    if (relevant.count(name) || name == "config") out += line + "\n";
  }
  return out;
}

std::string usage() {
  return "usage: lattice plan [--world-size N] [--json] [--config run.json] [train flags]\n\n"
         "Checks a tensor x pipeline x data parallel layout against `lattice train`'s flags and\n"
         "estimates the memory of one rank of every pipeline stage. Every rule the layout breaks\n"
         "is listed (exit 2). Accepts every `lattice train` flag; no training data is needed.\n\n"
         "  --world-size N                  ranks in the job; default TP x PP (data-parallel 1)\n"
         "  --json                          print the layout and the estimate as JSON\n\n"
         "flags that shape the layout and its memory (`lattice train --help` lists all):\n" +
         relevant_train_flags_help();
}

std::string human_bytes(double bytes) {
  char buf[32];
  if (bytes >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  return buf;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); i++) {
    if (i > 0) out += ',';
    out += std::to_string(ranks[i]);
  }
  return out + "]";
}

// "  tensor     4 groups of 2:  [0,1] [2,3] ..." wrapped at 100 columns.
void print_groups(std::ostream& out, const std::string& kind,
                  const std::vector<std::vector<int>>& groups) {
  char head[64];
  std::snprintf(head, sizeof head, "  %-10s %zu x %zu: ", kind.c_str(), groups.size(),
                groups.empty() ? size_t{0} : groups[0].size());
  std::string line = head;
  const std::string indent(line.size(), ' ');
  for (const std::vector<int>& g : groups) {
    const std::string item = rank_list(g);
    if (line.size() + item.size() + 1 > 100 && line != head) {
      line.pop_back();
      out << line << "\n";
      line = indent;
    }
    line += item + " ";
  }
  line.pop_back();  // the last separator
  out << line << "\n";
}

void print_table(std::ostream& out, const TrainOptions& o, const ParallelLayout& layout,
                 const MemoryEstimate& est) {
  const ModelConfig& m = o.model;
  out << "layout: world " << layout.world << " = TP " << layout.tp << " x PP " << layout.pp
      << " x DP " << layout.dp;
  if (layout.vpp > 1) out << ", " << layout.vpp << " virtual stages per pipeline rank";
  out << (o.parallel.sequence_parallel ? ", sequence parallel" : "")
      << (o.parallel.use_distributed_optimizer ? ", distributed optimizer" : "") << "\n";
  out << "model: " << m.num_layers << " layers, hidden " << m.hidden_size << ", "
      << m.num_attention_heads << " heads, sequence " << m.seq_length << ", vocabulary "
      << m.vocab_size << " (padded " << m.padded_vocab_size() << "), "
      << human_count(static_cast<double>(m.num_parameters())) << " parameters\n";
  out << "batch: global " << o.global_batch_size << " = micro " << o.micro_batch_size << " x DP "
      << layout.dp << " x " << est.micro_batches << " micro-batches per iteration\n\n";

  out << "groups (world ranks)\n";
  print_groups(out, "tensor", layout.tensor_groups());
  print_groups(out, "data", layout.data_groups());
  print_groups(out, "pipeline", layout.pipeline_groups());
  print_groups(out, "model", layout.model_groups());
  print_groups(out, "embedding", layout.embedding_groups());

  out << "\nstages\n";
  const int stage_ranks = layout.tp * layout.dp;
  const int rank_width = static_cast<int>(std::to_string(layout.world - stage_ranks).size() +
                                          std::to_string(layout.world - 1).size() + 1);
  for (int p = 0; p < layout.pp; p++) {
    const std::string ranks =
        std::to_string(p * stage_ranks) + "-" + std::to_string((p + 1) * stage_ranks - 1);
    char head[64];
    std::snprintf(head, sizeof head, "  pp %-3d ranks %-*s  ", p, rank_width, ranks.c_str());
    out << head << "layers";
    for (int c = 0; c < layout.vpp; c++) {
      const ParallelLayout::LayerRange r = layout.stage_layers(p, c);
      out << " [" << r.begin << "," << r.end << ")";
    }
    if (layout.is_first_stage(p)) out << "  + word and position embeddings";
    if (layout.is_last_stage(p))
      out << (layout.is_first_stage(p) ? ", final LayerNorm, LM head (tied)"
                                       : "  + final LayerNorm, LM head (tied word embedding copy)");
    out << "\n";
  }

  out << "\nmemory per rank (estimate; fp32: weights 4 + grads 4 + AdamW 8 bytes per parameter"
      << (o.parallel.use_distributed_optimizer ? ", AdamW / DP" : "") << ")\n";
  char row[200];
  std::snprintf(row, sizeof row, "  %-4s %12s %12s %12s %12s %12s %9s %12s %12s\n", "pp",
                "parameters", "weights", "grads", "optimizer", "act/micro", "in flight",
                "activations", "total");
  out << row;
  for (const StageEstimate& s : est.stages) {
    std::snprintf(row, sizeof row, "  %-4d %12s %12s %12s %12s %12s %9.2f %12s %12s\n", s.pp_rank,
                  human_count(static_cast<double>(s.parameters)).c_str(),
                  human_bytes(static_cast<double>(s.weight_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.grad_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.optimizer_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.activation_bytes_per_micro_batch)).c_str(),
                  s.micro_batches_in_flight,
                  human_bytes(static_cast<double>(s.activation_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.total_bytes())).c_str());
    out << row;
  }
  const StageEstimate& top = est.stages[est.most_loaded];
  out << "most loaded: pp rank " << top.pp_rank << ", "
      << human_bytes(static_cast<double>(top.total_bytes()))
      << " per rank (workspace and communication buffers not included)\n";
  char flops[128];
  std::snprintf(flops, sizeof flops, "model FLOPs per iteration: %.3g (%.3g per rank)\n",
                est.flops_per_iteration, est.flops_per_rank);
  out << flops;
}

// Takes --world-size, --json and --help out of `args`; the rest are `lattice train`'s flags.
struct PlanFlags {
  int world_size = 0;  // 0: TP x PP
  bool json = false, help = false;
  std::vector<std::string> train_args;
};

std::vector<std::string> split_plan_flags(const std::vector<std::string>& args, PlanFlags& f) {
  std::vector<std::string> errors;
  const FlagSpec world{"world-size", "ranks in the job", &f.world_size};
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      f.help = true;
    } else if (a == "--json") {
      f.json = true;
    } else if (a == "--world-size" || a.rfind("--world-size=", 0) == 0) {
      std::string value;
      if (a != "--world-size") {
        value = a.substr(a.find('=') + 1);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        errors.push_back("--world-size expects a number of ranks");
        continue;
      }
      if (std::string e = assign_flag_text(world, value); !e.empty()) errors.push_back(e);
    } else {
      f.train_args.push_back(a);
    }
  }
  return errors;
}

// A file tokenizer's vocabulary comes from its files (as `lattice train` reads them).
Status resolve_vocabulary(TrainOptions& o) {
  if (o.model.vocab_size > 0) return Status::ok();
  Result<std::unique_ptr<Tokenizer>> t = make_tokenizer(o.tokenizer);
  if (!t) return t.status();
  o.model.vocab_size = (*t)->vocab_size();
  return Status::ok();
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  PlanFlags flags;
  std::vector<std::string> errors = split_plan_flags(args, flags);
  if (flags.help) {
    std::cout << usage();
    return 0;
  }
  Result<TrainOptions> parsed = parse_train_flags(flags.train_args);
  if (!parsed) {
    errors.push_back(parsed.status().message());
    for (const std::string& e : errors) print_error(kCommand, e);
    return 2;
  }
  TrainOptions& o = *parsed;
  const int world = flags.world_size != 0 ? flags.world_size
                                          : o.model.tensor_model_parallel_size *
                                                o.parallel.pipeline_model_parallel_size;
  std::vector<std::string> invalid = o.validate(/*require_data=*/false);
  errors.insert(errors.end(), invalid.begin(), invalid.end());
  invalid = layout_errors(o, world);
  errors.insert(errors.end(), invalid.begin(), invalid.end());
  if (errors.empty())
    if (Status s = resolve_vocabulary(o); !s) errors.push_back(s.message());
  if (!errors.empty()) {
    for (const std::string& e : errors) print_error(kCommand, e);
    return 2;
  }
  Result<ParallelLayout> layout = make_layout(o, world);
  if (!layout) {  // layout_errors found nothing above, so this cannot happen
    print_error(kCommand, layout.status().message());
    return 1;
  }
  const MemoryEstimate est = estimate_memory(o, *layout);
  if (flags.json) {
    std::cout << plan_json(*layout, est) << "\n";
  } else {
    print_table(std::cout, o, *layout, est);
  }
  return 0;
}

}  // namespace lattice::cli
