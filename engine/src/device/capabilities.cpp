// capability_errors (capabilities.h): a backend's limits turned into the engine's sentences.
// Host code in lattice_engine, so every build checks options against either backend. Non-goal:
// the rules every device shares (layout_errors, TrainOptions::validate), which run first.
#include "device/capabilities.h"

#include <algorithm>

namespace lattice {

namespace {

// "64 or 128", "32, 64 or 128".
std::string alternatives(const std::vector<int>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); i++)
    text += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + std::to_string(values[i]);
  return text;
}

}  // namespace

std::vector<std::string> capability_errors(const TrainOptions& o, const Capabilities& c) {
  std::vector<std::string> errors;
  if (o.fp64 && !c.fp64)
    errors.push_back("--fp64 is not supported by the GPU trainer yet (docs/gpu.md#scope)");
  // --bf16 on a CPU without bf16 GEMMs: OpenBLAS's sgemm on widened copies is slower than fp32
  // training, so it is refused unless asked for by name (kernels/cpu/README.md, Note [bf16
  // GEMMs]). --fp16 runs everywhere (capabilities.h).
  if (o.bf16 && !c.bf16) {
    std::string why = kernels::bf16_gemm_env_error();
    if (why.empty()) why = kernels::onednn_bf16_missing();
    errors.push_back(
        "--bf16 on the CPU needs bf16 GEMMs, and " + (why.empty() ? "they are off" : why) +
        ": add --device cuda (the lattice-gpu trainer, built with CUDA), or set "
        "LATTICE_CPU_BF16_GEMM=widened for fp32 GEMMs on widened bf16 copies (slower than "
        "fp32); --fp16 on the CPU runs fp32 arithmetic with the loss scaler");
  }
  // MoE layers (docs/models.md "Mixture of experts"): every op list of the CPU and of CUDA.
  if (o.model.moe() && !c.moe)
    errors.push_back("MoE layers (--num-experts) are not yet implemented on " +
                     std::string(c.device == "cuda" ? "CUDA" : c.device) +
                     ": train them on the CPU (--device cpu)");
  else if (o.model.moe() && (o.fp16 || o.bf16) && !c.moe_16bit)
    errors.push_back("MoE layers (--num-experts) run in fp32 and fp64 on the " + c.device +
                     ": drop --fp16 / --bf16" +
                     (c.device == "cuda" ? std::string() : ", or add --device cuda"));
  if (o.parallel.context_parallel_size > 1 && !c.context_parallel)
    errors.push_back(
        "--context-parallel-size > 1: the " + c.device +
        " backend has no ring attention (parallel/ring_attention.h) yet; use --device cpu");
  const int heads = o.model.num_attention_heads;
  const int head_size = heads > 0 ? o.model.hidden_size / heads : 0;
  const std::vector<int>& sizes = c.head_sizes;
  if (!sizes.empty() && std::find(sizes.begin(), sizes.end(), head_size) == sizes.end())
    errors.push_back(
        "head size --hidden-size / --num-attention-heads = " + std::to_string(head_size) +
        ": the GPU attention kernel takes " + alternatives(sizes));
  // Each tensor-parallel rank's MLP slice; a TP that does not divide the MLP is layout_errors'.
  const int tp = o.model.tensor_model_parallel_size, ffn = o.model.ffn();
  const int multiple = c.mlp_slice_multiple;
  if (multiple > 1 && tp >= 1 && ffn % tp == 0 && (ffn / tp) % multiple != 0)
    errors.push_back(
        tp > 1 ? "the GPU MLP needs --ffn-hidden-size / --tensor-model-parallel-size " +
                     std::to_string(tp) + " % " + std::to_string(multiple) + " == 0"
               : "the GPU MLP needs --ffn-hidden-size % " + std::to_string(multiple) + " == 0");
  // LoRA's GEMMs have the rank as a dimension (docs/lora.md); kept to the GEMMs' alignment.
  if (multiple > 1 && o.model.lora_rank > 0 && o.model.lora_rank % multiple != 0)
    errors.push_back("the GPU's LoRA GEMMs need --lora-rank % " + std::to_string(multiple) +
                     " == 0");
  return errors;
}

}  // namespace lattice
