// Validation of VisionConfig (lattice/vision_config.h).
#include <string>

#include "lattice/vision_config.h"

namespace lattice {

std::vector<std::string> VisionConfig::validate() const {
  std::vector<std::string> errors;
  auto str = [](int v) { return std::to_string(v); };
  auto positive = [&](const char* flag, int v) {
    if (v <= 0) errors.push_back(std::string(flag) + " " + str(v) + " must be positive.");
  };
  positive("--vision-num-layers", num_layers);
  positive("--vision-hidden-size", hidden_size);
  positive("--vision-num-attention-heads", num_attention_heads);
  positive("--patch-dim", patch_dim);
  positive("--img-h", img_h);
  positive("--img-w", img_w);
  positive("--num-channels", num_channels);
  positive("--hidden-size (the language model's, the projector's output)", lm_hidden_size);
  if (ffn_hidden_size < 0)
    errors.push_back("--vision-ffn-hidden-size " + str(ffn_hidden_size) +
                     " must be positive (or 0 for 4 x --vision-hidden-size).");
  if (num_attention_heads > 0 && hidden_size > 0 && hidden_size % num_attention_heads != 0)
    errors.push_back("--vision-num-attention-heads " + str(num_attention_heads) +
                     " does not divide --vision-hidden-size " + str(hidden_size) + ".");
  if (patch_dim > 0 && img_h > 0 && img_h % patch_dim != 0)
    errors.push_back("--patch-dim " + str(patch_dim) + " does not divide --img-h " + str(img_h) +
                     " (patches do not overlap or pad).");
  if (patch_dim > 0 && img_w > 0 && img_w % patch_dim != 0)
    errors.push_back("--patch-dim " + str(patch_dim) + " does not divide --img-w " + str(img_w) +
                     " (patches do not overlap or pad).");
  if (num_layers > 0 && (select_layer < -(num_layers + 1) || select_layer > num_layers))
    errors.push_back("--vision-select-layer " + str(select_layer) + " must lie in [" +
                     str(-(num_layers + 1)) + ", " + str(num_layers) +
                     "] for --vision-num-layers " + str(num_layers) + ".");
  if (projector_type != "mlp")
    errors.push_back("--vision-projector-type \"" + projector_type +
                     "\" is not supported; the one type is \"mlp\" (LLaVA-1.5's "
                     "Linear-GELU-Linear).");
  return errors;
}

std::vector<std::string> VisionConfig::tensor_parallel_errors(int tp) const {
  std::vector<std::string> errors;
  if (tp <= 1) return errors;
  const std::string by = "--tensor-model-parallel-size " + std::to_string(tp);
  if (num_attention_heads > 0 && num_attention_heads % tp != 0)
    errors.push_back(by + " does not divide --vision-num-attention-heads " +
                     std::to_string(num_attention_heads) +
                     " (each rank runs whole heads of the vision tower)");
  if (hidden_size > 0 && ffn() % tp != 0)
    errors.push_back(
        by + " does not divide the vision tower's MLP width " + std::to_string(ffn()) +
        (ffn_hidden_size > 0 ? " (--vision-ffn-hidden-size)" : " (4 x --vision-hidden-size)"));
  return errors;
}

}  // namespace lattice
