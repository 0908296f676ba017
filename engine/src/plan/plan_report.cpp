// The planner's results as JSON (`lattice plan --json`, `--suggest --json`) and a candidate's
// layout as `lattice train` flags, and the architecture in words. Non-goals: tables for people
// (app/cli/plan_command.cpp).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "lattice/plan.h"

namespace lattice {

namespace {

nlohmann::ordered_json cluster_object(const ClusterSpec& c) {
  const DeviceSpec& d = c.device;
  return {{"nodes", c.nodes},
          {"devices_per_node", c.devices_per_node},
          {"device",
           {{"name", d.name},
            {"key", d.key},
            {"memory_bytes", d.memory_bytes},
            {"peak_flops", d.peak_flops},
            {"intra_node_bandwidth", d.intra_node_bandwidth},
            {"inter_node_bandwidth", d.inter_node_bandwidth},
            {"memory_bandwidth", d.memory_bandwidth}}},
          {"compute_efficiency", c.compute_efficiency},
          {"memory_headroom", c.memory_headroom},
          {"usable_memory_bytes", c.usable_memory_bytes()}};
}

nlohmann::ordered_json step_object(const StepEstimate& s) {
  return {{"compute_s", s.compute_s},
          {"tp_comm_s", s.tp_comm_s},
          {"cp_comm_s", s.cp_comm_s},
          {"ep_comm_s", s.ep_comm_s},
          {"pp_comm_s", s.pp_comm_s},
          {"pp_bubble_s", s.pp_bubble_s},
          {"dp_comm_s", s.dp_comm_s},
          {"dp_comm_total_s", s.dp_comm_total_s},
          {"optimizer_s", s.optimizer_s},
          {"total_s", s.total_s},
          {"tokens_per_second", s.tokens_per_second},
          {"mfu", s.mfu},
          {"slowest_stage", s.slowest_stage}};
}

std::string recompute_name(const ParallelOptions& par) {
  return par.recompute_granularity.empty() ? "none" : par.recompute_granularity;
}

}  // namespace

std::string layout_flags(const TrainOptions& o) {
  const ParallelOptions& par = o.parallel;
  std::string out =
      "--tensor-model-parallel-size " + std::to_string(o.model.tensor_model_parallel_size) +
      " --pipeline-model-parallel-size " + std::to_string(par.pipeline_model_parallel_size);
  if (par.context_parallel_size > 1)
    out += " --context-parallel-size " + std::to_string(par.context_parallel_size);
  if (par.expert_model_parallel_size > 1)
    out += " --expert-model-parallel-size " + std::to_string(par.expert_model_parallel_size);
  if (par.num_layers_per_virtual_pipeline_stage > 0)
    out += " --num-layers-per-virtual-pipeline-stage " +
           std::to_string(par.num_layers_per_virtual_pipeline_stage);
  out += " --micro-batch-size " + std::to_string(o.micro_batch_size) + " --global-batch-size " +
         std::to_string(o.global_batch_size);
  if (par.sequence_parallel) out += " --sequence-parallel";
  if (par.use_distributed_optimizer) out += " --use-distributed-optimizer";
  if (!par.recompute_granularity.empty())
    out += " --recompute-granularity " + par.recompute_granularity;
  if (!par.recompute_method.empty())
    out += " --recompute-method " + par.recompute_method + " --recompute-num-layers " +
           std::to_string(par.recompute_num_layers);
  return out;
}

std::string plan_json(const ParallelLayout& layout, const MemoryEstimate& estimate,
                      const ClusterSpec& cluster, const StepEstimate& step, int indent) {
  nlohmann::ordered_json out = nlohmann::ordered_json::parse(plan_json(layout, estimate));
  out["cluster"] = cluster_object(cluster);
  out["fits"] = fits_in_memory(estimate, cluster);
  out["step"] = step_object(step);
  return out.dump(indent);
}

std::string suggest_json(const std::vector<LayoutCandidate>& candidates, const ClusterSpec& cluster,
                         int indent) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const LayoutCandidate& c : candidates) {
    const ParallelOptions& par = c.options.parallel;
    list.push_back({{"tp", c.layout.tp},
                    {"cp", c.layout.cp},
                    {"ep", c.layout.ep},
                    {"pp", c.layout.pp},
                    {"vpp", c.layout.vpp},
                    {"dp", c.layout.dp},
                    {"micro_batch_size", c.options.micro_batch_size},
                    {"micro_batches", c.memory.micro_batches},
                    {"recompute", recompute_name(par)},
                    {"distributed_optimizer", par.use_distributed_optimizer},
                    {"sequence_parallel", par.sequence_parallel},
                    {"most_loaded_bytes", c.memory.stages[c.memory.most_loaded].total_bytes()},
                    {"fits", c.fits},
                    {"step", step_object(c.step)},
                    {"flags", layout_flags(c.options)}});
  }
  const nlohmann::ordered_json out = {{"cluster", cluster_object(cluster)}, {"candidates", list}};
  return out.dump(indent);
}

std::string architecture_text(const ModelConfig& m) {
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, v == std::floor(v) && v < 1e15 ? "%.0f" : "%g", v);
    return std::string(buf);
  };
  std::string out = !m.group_query_attention ? "MHA"
                    : m.num_query_groups == 1
                        ? "MQA"
                        : "GQA " + std::to_string(m.num_query_groups) + " groups";
  out += m.swiglu ? ", SwiGLU" : ", GELU";
  char norm[64];
  std::snprintf(norm, sizeof norm, ", %s ε %g", m.normalization.c_str(), m.norm_epsilon);
  out += norm;
  if (m.rope()) {
    out += ", RoPE θ " + number(m.rotary_base);
    if (m.rotary_percent < 1.0f)
      out += " on " + number(100.0 * m.rotary_percent) + " % of each head";
  } else {
    out += m.learned_positions() ? ", learned positions" : ", no positions";
  }
  out += m.tied_output() ? ", tied head" : ", untied head";
  out += m.linear_bias() ? ", biases" : m.qkv_bias() ? ", QKV bias only" : ", no biases";
  return out;
}

}  // namespace lattice
