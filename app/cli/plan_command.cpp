// lattice plan: check a TP x CP x EP x DP x PP layout against `lattice train`'s flags, estimate
// what each pipeline stage's ranks hold and how long a step takes on a cluster, or search every
// layout
// (--suggest); as tables or JSON, without training data or a device.
// Non-goals: measuring a run (see `lattice train --log-memory`), launching anything.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "commands.h"
#include "lattice/calibration.h"
#include "lattice/flags.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/tokenizer.h"
#include "lattice/train.h"
#include "lattice/train_options.h"
#include "plan_calibration.h"

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
                                                 "position-embedding-type",
                                                 "normalization",
                                                 "swiglu",
                                                 "group-query-attention",
                                                 "num-query-groups",
                                                 "untie-embeddings-and-output-weights",
                                                 "disable-bias-linear",
                                                 "add-qkv-bias",
                                                 "vocab-size",
                                                 "make-vocab-size-divisible-by",
                                                 "micro-batch-size",
                                                 "global-batch-size",
                                                 "tensor-model-parallel-size",
                                                 "pipeline-model-parallel-size",
                                                 "context-parallel-size",
                                                 "expert-model-parallel-size",
                                                 "expert-tensor-parallel-size",
                                                 "num-layers-per-virtual-pipeline-stage",
                                                 "sequence-parallel",
                                                 "use-distributed-optimizer",
                                                 "recompute-granularity",
                                                 "recompute-method",
                                                 "recompute-num-layers",
                                                 "tokenizer-type",
                                                 "vocab-file",
                                                 "merge-file",
                                                 "tokenizer-model",
                                                 "bf16",
                                                 "fp16",
                                                 "threads"};
  std::istringstream in(train_options_help());
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("  --", 0) != 0) continue;
    const std::string name = line.substr(4, line.find(' ', 4) - 4);
    if (relevant.count(name) || name == "config") out += line + "\n";
  }
  return out;
}

// The planner's own flags (the rest are `lattice train`'s). --suggest takes an optional count.
struct PlanFlags {
  int world_size = 0;        // 0: nodes x devices per node, or TP x PP
  int nodes = 0;             // 0: world size / devices per node
  int devices_per_node = 0;  // 0: world size / nodes, or 8 GPUs / all CPU ranks per node
  std::string device = "cpu";
  double peak_gflops = 0;  // 0: measure this CPU's SGEMM rate
  double efficiency = 0.5;
  double headroom = 0.05;
  bool json = false, help = false;
  int suggest = 0;           // candidates to print; 0: no search
  std::string calibrate;     // a probe run to fit the planner's rates to (id or name)
  std::string db;            // the run store --calibrate reads; empty: the default
  std::string calibration;   // the calibration file; empty: the device profile's
  std::string cluster_name;  // the cluster's own calibration (Note [calibration per cluster])
  bool no_calibration = false;
  std::vector<std::string> train_args;
};

constexpr int kDefaultSuggestions = 10;

std::vector<FlagSpec> plan_flag_specs(PlanFlags& f) {
  return {
      {"world-size",
       "ranks in the job; 0: nodes x devices per node, else TP x CP x PP (x what EP needs)",
       &f.world_size},
      {"nodes", "machines in the cluster; 0: world size / devices per node", &f.nodes},
      {"devices-per-node", "GPUs (or CPU ranks) per machine; 0: world / nodes, else 8 GPUs or all",
       &f.devices_per_node},
      {"device", "h100, h100-pcie, h200, a100-80gb, a100-40gb, or cpu (this machine)", &f.device},
      {"peak-gflops", "CPU peak per machine; 0: measure SGEMM on all cores", &f.peak_gflops},
      {"efficiency", "achieved / peak FLOP rate of the GEMMs, in (0, 1]", &f.efficiency},
      {"memory-headroom", "share of device memory kept free (libraries, allocator)", &f.headroom},
      {"json", "print the layout and estimates (or the candidates) as JSON", &f.json},
      {"calibrate", "fit the planner's rates to a probe run's phase times (id or name), save them",
       &f.calibrate},
      {"db", "run store --calibrate reads (default: the one `lattice train` writes)", &f.db},
      {"calibration",
       "calibration file to write or use; default <data dir>/calibration/<device>.json",
       &f.calibration},
      {"cluster-name",
       "the cluster: --calibrate saves <data dir>/calibration/<name>/<device>.json, a plan "
       "takes that file before the device's",
       &f.cluster_name},
      {"no-calibration", "estimate with the default rates even where a calibration is saved",
       &f.no_calibration},
  };
}

std::string usage() {
  PlanFlags defaults;
  return "usage: lattice plan [--world-size N | --nodes N --devices-per-node N] [--device D]\n"
         "                    [--suggest [N]] [--json] [--config run.json] [train flags]\n"
         "       lattice plan --calibrate RUN [--db runs.sqlite] [--device D] [--cluster-name C]\n"
         "                    [--calibration F]\n\n"
         "Checks a tensor x context x expert x data x pipeline parallel layout against\n"
         "`lattice train`'s flags (context and expert parallelism: the layout only for now),\n"
         "estimates the memory of one rank of every pipeline stage and the time of one step on\n"
         "the cluster (compute, TP collectives, the CP ring and EP all-to-alls, pipeline sends\n"
         "and bubble, data-parallel reduction not hidden behind backward, optimizer; tokens/s\n"
         "and MFU); with MoE layers, the experts, routers and dispatch buffers per rank. Every\n"
         "rule the layout breaks is listed (exit 2). Accepts every `lattice train` flag; no\n"
         "training data is needed. --bf16 / --fp16 size 16-bit training (18 bytes per\n"
         "parameter; 6 + 12 / DP with --use-distributed-optimizer), --fp16 on the CPU as fp32\n"
         "with a loss scale, as the CPU engine runs it.\n\n"
         "  --suggest [N]                   search every valid layout (TP, CP, EP, PP, virtual\n"
         "                                  stages, micro batch, recomputation, distributed\n"
         "                                  optimizer; sequence parallel with TP > 1) of the\n"
         "                                  model and global batch on the cluster; print the\n"
         "                                  best N (default " +
         std::to_string(kDefaultSuggestions) +
         "), those that fit first, by\n"
         "                                  tokens/s\n" +
         flags_help(plan_flag_specs(defaults)) +
         "\nflags that shape the layout and its memory (`lattice train --help` lists all):\n" +
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

// The vision tower's lines (Note [vision tower in the plan] in plan/vision_estimate.cpp): its
// shape and parameters, what it adds to a first-stage rank and its share of the model FLOPs.
void print_vision(std::ostream& out, const TrainOptions& o, const MemoryEstimate& est,
                  int dp_x_cp) {
  const VisionEstimate& e = est.vision;
  const VisionConfig v = o.vision_config();
  const StageEstimate& first = est.stages.front();
  const ParameterBytes b = bytes_per_parameter(compute_precision(o));
  const double params = static_cast<double>(e.parameters);
  // The tower's optimizer state over the distributed optimizer's shards (frozen with LoRA:
  // none): its moments, and a 16-bit run's master copy with them.
  const double shards = o.parallel.use_distributed_optimizer ? static_cast<double>(dp_x_cp) : 1.0;
  const double optimizer = o.model.lora() ? 0.0 : params * b.optimizer / shards;
  char line[320];
  std::snprintf(
      line, sizeof line,
      "vision tower: CLIP ViT %d layers (%d run), width %d, %d heads, MLP %d; %d x %d "
      "images in %d px patches (%d patches%s); MLP projector to %d; %s parameters on "
      "each pp 0 rank%s\n",
      v.num_layers, e.layers_run, v.hidden_size, v.num_attention_heads, v.ffn(), v.img_h, v.img_w,
      v.patch_dim, v.patches(), v.class_token ? " + class token" : "", v.lm_hidden_size,
      human_count(params).c_str(),
      o.model.tensor_model_parallel_size > 1 ? " (heads, MLP and projector split over TP)" : "");
  out << line;
  std::snprintf(
      line, sizeof line,
      "  on a pp 0 rank: weights %s + grads %s + optimizer %s; activations %s per "
      "micro-batch (%d image%s%s); %.3g forward FLOPs per image, %.1f %% of the model "
      "FLOPs\n",
      human_bytes(params * b.weights).c_str(), human_bytes(params * b.grads).c_str(),
      human_bytes(optimizer).c_str(),
      human_bytes(static_cast<double>(first.vision_activation_bytes_per_micro_batch)).c_str(),
      e.images_per_rank, e.images_per_rank == 1 ? "" : "s",
      o.parallel.context_parallel_size > 1 ? " encoded on each CP rank" : "",
      e.forward_flops_per_image, 100 * e.flops_per_iteration / est.flops_per_iteration);
  out << line;
}

void print_table(std::ostream& out, const TrainOptions& o, const ParallelLayout& layout,
                 const MemoryEstimate& est) {
  const ModelConfig& m = o.model;
  // The five axes: TP x CP x PP x DP, and the experts' ETP x EP x PP x EDP over the same ranks
  // when EP > 1 or ETP is not TP; the axes of size 1 in brackets.
  const bool experts = layout.ep > 1 || layout.etp != layout.tp;
  out << "layout: world " << layout.world << " = TP " << layout.tp;
  if (layout.cp > 1) out << " x CP " << layout.cp;
  out << " x PP " << layout.pp << " x DP " << layout.dp;
  if (experts)
    out << "; experts: ETP " << layout.etp << " x EP " << layout.ep << " x PP " << layout.pp
        << " x EDP " << layout.edp;
  out << (layout.cp == 1 && !experts ? " (CP 1, EP 1)"
          : layout.cp == 1           ? " (CP 1)"
          : !experts                 ? " (EP 1)"
                                     : "");
  if (layout.vpp > 1) out << ", " << layout.vpp << " virtual stages per pipeline rank";
  out << (o.parallel.sequence_parallel ? ", sequence parallel" : "")
      << (o.parallel.use_distributed_optimizer ? ", distributed optimizer" : "") << "\n";
  out << "model: " << m.num_layers << " layers, hidden " << m.hidden_size << ", "
      << m.num_attention_heads << " heads, sequence " << m.seq_length << ", vocabulary "
      << m.vocab_size << " (padded " << m.padded_vocab_size() << "), "
      << human_count(static_cast<double>(m.num_parameters())) << " parameters\n";
  out << "architecture: " << architecture_text(m) << "\n";
  out << "batch: global " << o.global_batch_size << " = micro " << o.micro_batch_size << " x DP "
      << layout.dp << " x " << est.micro_batches << " micro-batches per iteration\n\n";

  out << "groups (world ranks)\n";
  print_groups(out, "tensor", layout.tensor_groups());
  print_groups(out, "data", layout.data_groups());
  print_groups(out, "pipeline", layout.pipeline_groups());
  print_groups(out, "model", layout.model_groups());
  print_groups(out, "embedding", layout.embedding_groups());
  if (layout.cp > 1) {
    print_groups(out, "context", layout.context_groups());
    print_groups(out, "data-ctx", layout.data_context_groups());
  }
  if (layout.ep > 1 || layout.etp != layout.tp) {
    print_groups(out, "expert", layout.expert_groups());
    print_groups(out, "exp-tensor", layout.expert_tensor_groups());
    print_groups(out, "exp-data", layout.expert_data_groups());
  }

  out << "\nstages\n";
  const int stage_ranks = layout.world / layout.pp;
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
    if (layout.is_first_stage(p))
      out << (m.learned_positions() ? "  + word and position embeddings" : "  + word embedding")
          << (est.vision.parameters > 0 ? ", vision tower" : "");
    if (layout.is_last_stage(p))
      out << (layout.is_first_stage(p) ? ", final " : "  + final ") << m.normalization
          << (!m.tied_output()           ? ", output layer (untied)"
              : layout.is_first_stage(p) ? ", LM head (tied)"
                                         : ", LM head (tied word embedding copy)");
    out << "\n";
  }

  const std::string precision = training_precision(o);
  const ParameterBytes per_param = bytes_per_parameter(compute_precision(o));
  out << "\nmemory per rank (estimate; " << precision << ": weights " << per_param.weights
      << " + grads " << per_param.grads << " + optimizer " << per_param.optimizer
      << " bytes per parameter" << (o.parallel.use_distributed_optimizer ? ", optimizer / DP" : "")
      << ")\n";
  char row[200];
  std::snprintf(row, sizeof row, "  %-4s %12s %12s %12s %12s %12s %9s %12s %12s %12s %12s\n",
                "pp", "parameters", "weights", "grads", "optimizer", "act/micro", "in flight",
                "activations", "workspace", "comm bufs", "total");
  out << row;
  for (const StageEstimate& s : est.stages) {
    std::snprintf(row, sizeof row, "  %-4d %12s %12s %12s %12s %12s %9.2f %12s %12s %12s %12s\n",
                  s.pp_rank, human_count(static_cast<double>(s.parameters)).c_str(),
                  human_bytes(static_cast<double>(s.weight_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.grad_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.optimizer_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.activation_bytes_per_micro_batch)).c_str(),
                  s.micro_batches_in_flight,
                  human_bytes(static_cast<double>(s.activation_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.all_workspace_bytes())).c_str(),
                  human_bytes(static_cast<double>(s.comm_buffer_bytes)).c_str(),
                  human_bytes(static_cast<double>(s.total_bytes())).c_str());
    out << row;
  }
  if (m.moe()) {
    // MoE layers (StageEstimate's rules): experts E / EP per rank split over ETP, routers whole.
    out << "MoE per rank: " << m.num_experts / layout.ep << " of " << m.num_experts
        << " experts per MoE layer, top-" << m.moe_router_topk << " routing";
    if (m.moe_expert_capacity_factor > 0)
      out << ", capacity factor " << m.moe_expert_capacity_factor;
    out << "\n";
    std::snprintf(row, sizeof row, "  %-4s %12s %12s %12s %12s %12s %12s\n", "pp", "experts",
                  "expert wts", "router", "rows/layer", "act/micro", "dispatch");
    out << row;
    for (const StageEstimate& s : est.stages) {
      std::snprintf(
          row, sizeof row, "  %-4d %12s %12s %12s %12lld %12s %12s\n", s.pp_rank,
          human_count(static_cast<double>(s.expert_parameters)).c_str(),
          human_bytes(static_cast<double>(s.expert_parameters) * per_param.weights).c_str(),
          human_count(static_cast<double>(s.router_parameters)).c_str(),
          static_cast<long long>(s.expert_rows),
          human_bytes(static_cast<double>(s.moe_activation_bytes_per_micro_batch)).c_str(),
          human_bytes(static_cast<double>(s.dispatch_bytes)).c_str());
      out << row;
    }
    if (layout.ep > 1)
      out << "  (rows/layer: the worst case a rank may receive; balanced routing gives "
          << est.stages[0].expert_rows_expected << ")\n";
  }
  if (est.vision.parameters > 0) print_vision(out, o, est, layout.dp * layout.cp);
  const StageEstimate& top = est.stages[est.most_loaded];
  out << "most loaded: pp rank " << top.pp_rank << ", "
      << human_bytes(static_cast<double>(top.total_bytes()))
      << " per rank (the engine's buffers; the libraries' own memory, MPI's, BLAS's, NCCL's "
         "or the CUDA context's, is not included)\n";
  char flops[128];
  std::snprintf(flops, sizeof flops, "model FLOPs per iteration: %.3g (%.3g per rank)\n",
                est.flops_per_iteration, est.flops_per_rank);
  out << flops;
}

// Takes the planner's flags out of `args`; the rest are `lattice train`'s.
std::vector<std::string> split_plan_flags(const std::vector<std::string>& args, PlanFlags& f) {
  std::vector<std::string> errors;
  const std::vector<FlagSpec> specs = plan_flag_specs(f);
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      f.help = true;
      continue;
    }
    if (a == "--suggest" || a.rfind("--suggest=", 0) == 0) {
      std::string count = a == "--suggest" ? "" : a.substr(10);
      if (count.empty() && i + 1 < args.size() && !args[i + 1].empty() &&
          args[i + 1].find_first_not_of("0123456789") == std::string::npos)
        count = args[++i];
      f.suggest = kDefaultSuggestions;
      const FlagSpec spec{"suggest", "", &f.suggest};
      if (!count.empty())
        if (std::string e = assign_flag_text(spec, count); !e.empty()) errors.push_back(e);
      if (f.suggest < 1) errors.push_back("--suggest expects a positive number of layouts");
      continue;
    }
    const size_t eq = a.find('=');
    const FlagSpec* spec =
        a.rfind("--", 0) == 0 ? find_flag(specs, a.substr(2, eq == std::string::npos ? eq : eq - 2))
                              : nullptr;
    if (!spec) {
      f.train_args.push_back(a);
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (is_switch(*spec)) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      errors.push_back(a + " expects a value");
      continue;
    }
    if (std::string e = assign_flag_text(*spec, value); !e.empty()) errors.push_back(e);
  }
  return errors;
}

// The world size and the cluster's shape from --world-size, --nodes, --devices-per-node
// (0 when they disagree; the reasons go to `errors`). Without either of the last two, GPUs come
// 8 to a node (HGX / DGX) and CPU ranks share this one machine.
// The fewest ranks the layout's grids fit: TP x CP x PP (DP 1), or a multiple of it that the
// expert grid ETP x EP x PP also divides. Sizes that are not positive are layout_errors'.
int smallest_world(const TrainOptions& o) {
  const ParallelOptions& par = o.parallel;
  const int tp = o.model.tensor_model_parallel_size, pp = par.pipeline_model_parallel_size;
  const int etp = par.expert_tensor_parallel_size > 0 ? par.expert_tensor_parallel_size : tp;
  const int dense = tp * par.context_parallel_size * pp;
  const int experts = etp * par.expert_model_parallel_size * pp;
  return dense > 0 && experts > 0 ? std::lcm(dense, experts) : dense;
}

int resolve_world(const PlanFlags& f, const TrainOptions& o, ClusterSpec& cluster,
                  std::vector<std::string>& errors) {
  if (f.nodes < 0) errors.push_back("--nodes must be positive, got " + std::to_string(f.nodes));
  if (f.devices_per_node < 0)
    errors.push_back("--devices-per-node must be positive, got " +
                     std::to_string(f.devices_per_node));
  if (f.nodes < 0 || f.devices_per_node < 0) return 0;
  int world = f.world_size;
  if (world == 0)
    world = f.devices_per_node > 0 ? std::max(f.nodes, 1) * f.devices_per_node : smallest_world(o);
  int nodes = f.nodes, per_node = f.devices_per_node;
  if (nodes == 0 && per_node == 0) {
    constexpr int kGpusPerNode = 8;
    const bool cpu = f.device == "cpu" || f.device == "CPU";
    per_node = !cpu && world > kGpusPerNode && world % kGpusPerNode == 0 ? kGpusPerNode : world;
  }
  if (per_node == 0) {
    if (world % nodes != 0) {
      errors.push_back("world size " + std::to_string(world) + " does not split over --nodes " +
                       std::to_string(nodes) + ": pass --devices-per-node");
      return 0;
    }
    per_node = world / nodes;
  }
  if (nodes == 0) nodes = std::max(world / per_node, 1);
  if (nodes * per_node != world) {
    errors.push_back("world size " + std::to_string(world) + " is not --nodes " +
                     std::to_string(nodes) + " x --devices-per-node " + std::to_string(per_node));
    return 0;
  }
  cluster.nodes = nodes;
  cluster.devices_per_node = per_node;
  return world;
}

// The device from --device (the table, or this CPU with a measured or given SGEMM rate).
void resolve_device(const PlanFlags& f, const TrainOptions& o, ClusterSpec& cluster,
                    std::vector<std::string>& errors) {
  if (!(f.efficiency > 0 && f.efficiency <= 1))
    errors.push_back("--efficiency must lie in (0, 1], got " + std::to_string(f.efficiency));
  if (!(f.headroom >= 0 && f.headroom < 1))
    errors.push_back("--memory-headroom must lie in [0, 1), got " + std::to_string(f.headroom));
  if (f.peak_gflops < 0) errors.push_back("--peak-gflops must not be negative");
  cluster.compute_efficiency = f.efficiency;
  cluster.memory_headroom = f.headroom;
  const std::string precision = training_precision(o);
  if (f.device == "cpu" || f.device == "CPU") {
    const int threads =
        o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
    const double gflops =
        f.peak_gflops > 0 ? f.peak_gflops : measure_sgemm_gflops(std::max(threads, 1));
    cluster.device = this_machine_cpu(gflops, std::max(cluster.devices_per_node, 1));
    return;
  }
  if (std::optional<DeviceSpec> d = find_device(f.device, precision)) {
    cluster.device = *d;
    return;
  }
  std::string known;
  for (const DeviceSpec& d : known_devices(precision)) known += d.key + ", ";
  errors.push_back("--device " + f.device + " is not one of " + known + "cpu");
}

std::string rate_text(double bytes_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g GB/s", bytes_per_second / 1e9);
  return buf;
}

std::string seconds_text(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  return buf;
}

std::string cluster_line(const ClusterSpec& c, const std::string& precision) {
  const bool tera = c.device.peak_flops >= 1e12;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%d x %d %s, %s each, peak %.4g %s %s x efficiency %.2f; links %s in a node, %s "
                "between nodes",
                c.nodes, c.devices_per_node, c.device.name.c_str(),
                human_bytes(c.device.memory_bytes).c_str(),
                c.device.peak_flops / (tera ? 1e12 : 1e9), tera ? "TFLOP/s" : "GFLOP/s",
                precision.c_str(), c.compute_efficiency,
                rate_text(c.device.intra_node_bandwidth).c_str(),
                rate_text(c.device.inter_node_bandwidth).c_str());
  return buf;
}

void print_step(std::ostream& out, const TrainOptions& o, const MemoryEstimate& est,
                const ClusterSpec& c, const StepEstimate& s) {
  out << "\nstep time (estimate) on " << cluster_line(c, training_precision(o)) << "\n";
  // The context and expert terms only where the layout has those axes.
  const bool cp = o.parallel.context_parallel_size > 1,
             ep = o.parallel.expert_model_parallel_size > 1;
  const struct {
    const char* what;
    double seconds;
    std::string note;
    bool shown;
  } rows[] = {
      {"compute", s.compute_s, "pp rank " + std::to_string(s.slowest_stage) + ", the slowest",
       true},
      {"TP collectives", s.tp_comm_s, "", true},
      {"CP ring", s.cp_comm_s, "what the attention does not hide", cp},
      {"EP all-to-all", s.ep_comm_s, "dispatch + combine", ep},
      {"PP sends", s.pp_comm_s, "", true},
      {"PP bubble", s.pp_bubble_s, "", true},
      {"DP not hidden", s.dp_comm_s, "of " + seconds_text(s.dp_comm_total_s) + " in all", true},
      {"optimizer", s.optimizer_s, "", true},
      {"total", s.total_s, "", true},
  };
  for (const auto& r : rows) {
    if (!r.shown) continue;
    char line[160];
    std::snprintf(line, sizeof line, "  %-15s %10s", r.what, seconds_text(r.seconds).c_str());
    out << line << (r.note.empty() ? "" : "   (" + r.note + ")") << "\n";
  }
  char line[200];
  std::snprintf(line, sizeof line, "  %.4g tokens/s, MFU %.1f %%\n", s.tokens_per_second,
                100 * s.mfu);
  out << line;
  const double need = static_cast<double>(est.stages[est.most_loaded].total_bytes());
  out << "fits: " << (fits_in_memory(est, c) ? "yes" : "NO") << ", most loaded rank "
      << human_bytes(need) << " of " << human_bytes(c.usable_memory_bytes()) << " usable ("
      << static_cast<int>(c.memory_headroom * 100 + 0.5) << " % of the device kept free)\n";
}

void print_suggestions(std::ostream& out, const TrainOptions& o, const ClusterSpec& c,
                       const std::vector<LayoutCandidate>& list, const SuggestStats& stats,
                       double seconds) {
  out << "model: " << o.model.num_layers << " layers, hidden " << o.model.hidden_size << ", "
      << o.model.num_attention_heads << " heads, sequence " << o.model.seq_length << ", vocabulary "
      << o.model.vocab_size << ", " << human_count(static_cast<double>(o.model.num_parameters()))
      << " parameters; global batch " << o.global_batch_size << "\n";
  out << "architecture: " << architecture_text(o.model) << "\n";
  out << "cluster: " << cluster_line(c, training_precision(o)) << "\n";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f ms", seconds * 1e3);
  out << "searched " << stats.valid << " valid layouts in " << buf << ", " << stats.fitting
      << " fit; best " << list.size() << " (those that fit first, by estimated tokens/s)\n\n";
  char row[240];
  std::snprintf(row, sizeof row,
                "  %3s %4s %4s %4s %4s %4s %5s %4s %6s %-9s %-7s %-3s %23s %12s %6s %4s\n", "#",
                "TP", "CP", "EP", "PP", "VPP", "DP", "MB", "M", "recompute", "distopt", "SP",
                "memory / usable", "tokens/s", "MFU", "fits");
  out << row;
  for (size_t i = 0; i < list.size(); i++) {
    const LayoutCandidate& k = list[i];
    const ParallelOptions& par = k.options.parallel;
    const std::string memory =
        human_bytes(static_cast<double>(k.memory.stages[k.memory.most_loaded].total_bytes())) +
        " / " + human_bytes(c.usable_memory_bytes());
    std::snprintf(
        row, sizeof row,
        "  %3zu %4d %4d %4d %4d %4d %5d %4d %6lld %-9s %-7s %-3s %23s %12.4g %5.1f%% %4s\n", i + 1,
        k.layout.tp, k.layout.cp, k.layout.ep, k.layout.pp, k.layout.vpp, k.layout.dp,
        k.options.micro_batch_size, static_cast<long long>(k.memory.micro_batches),
        par.recompute_granularity.empty() ? "none" : par.recompute_granularity.c_str(),
        par.use_distributed_optimizer ? "yes" : "no", par.sequence_parallel ? "yes" : "no",
        memory.c_str(), k.step.tokens_per_second, 100 * k.step.mfu, k.fits ? "yes" : "NO");
    out << row;
  }
  if (!list.empty()) out << "\n#1 as flags: " << layout_flags(list[0].options) << "\n";
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
  if (!flags.cluster_name.empty())
    if (std::string why = check_cluster_name(flags.cluster_name); !why.empty())
      errors.push_back("--cluster-name: " + why);
  if (!flags.calibrate.empty()) {
    if (!errors.empty()) {
      for (const std::string& e : errors) print_error(kCommand, e);
      return 2;
    }
    CalibrateRequest request;
    request.run = flags.calibrate;
    request.db = flags.db;
    request.device = flags.device;
    request.nodes = flags.nodes;
    request.peak_gflops = flags.peak_gflops;
    request.efficiency = flags.efficiency;
    request.file = flags.calibration;
    request.cluster_name = flags.cluster_name;
    request.json = flags.json;
    if (!flags.train_args.empty()) request.planned = o;
    request.world =
        flags.world_size > 0 ? flags.world_size : flags.devices_per_node * std::max(flags.nodes, 1);
    return calibrate_from_run(request);
  }
  ClusterSpec cluster;
  const int world = resolve_world(flags, o, cluster, errors);
  // Megatron's default batch, micro-batch x DP; a search, which ignores the given layout,
  // takes it at TP = PP = 1 (micro-batch x world) when the given one does not fit the world.
  o = with_default_global_batch(o, world);
  if (flags.suggest > 0 && o.global_batch_size == 0 && world > 0)
    o.global_batch_size = o.micro_batch_size * world;
  std::vector<std::string> invalid = o.validate(/*require_data=*/false);
  errors.insert(errors.end(), invalid.begin(), invalid.end());
  if (world > 0 && flags.suggest == 0) {  // a search ignores the given layout
    invalid = layout_errors(o, world);
    errors.insert(errors.end(), invalid.begin(), invalid.end());
  }
  if (errors.empty())
    if (Status s = resolve_vocabulary(o); !s) errors.push_back(s.message());
  if (errors.empty()) resolve_device(flags, o, cluster, errors);
  std::string calibrated;  // the sentence naming the calibration in use
  if (errors.empty() && !flags.no_calibration)
    calibrated = use_saved_calibration(cluster, flags.calibration, flags.cluster_name, errors);
  o = planned_options(o, cluster);  // the memory estimate's attention terms
  if (!errors.empty()) {
    for (const std::string& e : errors) print_error(kCommand, e);
    return 2;
  }

  if (flags.suggest > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    SuggestStats stats;
    const std::vector<LayoutCandidate> list = suggest_layouts(o, cluster, flags.suggest, &stats);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (flags.json) {
      std::cout << suggest_json(list, cluster) << "\n";
    } else {
      if (!calibrated.empty()) std::cout << calibrated << "\n";
      print_suggestions(std::cout, o, cluster, list, stats, seconds);
    }
    if (list.empty()) {
      print_error(kCommand, "no valid layout of this model and global batch on " +
                                std::to_string(world) + " devices");
      return 1;
    }
    return 0;
  }

  Result<ParallelLayout> layout = make_layout(o, world);
  if (!layout) {  // layout_errors found nothing above, so this cannot happen
    print_error(kCommand, layout.status().message());
    return 1;
  }
  const MemoryEstimate est = estimate_memory(o, *layout);
  const StepEstimate step = estimate_step(o, *layout, cluster, est);
  if (flags.json) {
    std::cout << plan_json(*layout, est, cluster, step) << "\n";
  } else {
    print_table(std::cout, o, *layout, est);
    print_step(std::cout, o, est, cluster, step);
    if (!calibrated.empty()) std::cout << calibrated << "\n";
  }
  return 0;
}

}  // namespace lattice::cli
