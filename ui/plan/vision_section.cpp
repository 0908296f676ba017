// VisionSection: the vision tower's switch, sizes and the planner's figures for it.
#include "plan/vision_section.h"

#include <QCheckBox>
#include <QLabel>
#include <QSpinBox>

#include "plan/text_format.h"

namespace lattice::ui {

VisionSection::VisionSection(PlanModel* model, QWidget* parent)
    : FormSection(tr("Vision tower"), model, parent) {
  QCheckBox* on = boolEditor(
      tr("CLIP vision tower (LLaVA)"), "vision-model-type", tr("Toggle the vision tower"),
      [](const Plan& p) { return !p.options.vision_model_type.empty(); },
      [](Plan& p, bool v) { p.options.vision_model_type = v ? "clip" : ""; });
  on->setToolTip(
      tr("A CLIP ViT and an MLP projector on the first pipeline stage; each sample's image "
         "takes its patches' positions of the sequence  (--vision-model-type clip)"));
  addRow({}, on, {"vision-model-type"});

  auto vision_int = [this](const QString& what, const QString& flag, int min, int max, auto member,
                           const QString& tip) {
    QSpinBox* spin = intEditor(
        min, max, flag, tr("Set %1").arg(what),
        [member](const Plan& p) { return p.options.vision.*member; },
        [member](Plan& p, int v) { p.options.vision.*member = v; });
    spin->setToolTip(tip + "  (--" + flag + ")");
    return spin;
  };
  QSpinBox* layers = vision_int(tr("vision layers"), "vision-num-layers", 1, 1024,
                                &VisionConfig::num_layers, tr("Encoder layers"));
  QSpinBox* select = vision_int(
      tr("selected layer"), "vision-select-layer", -1024, 1024, &VisionConfig::select_layer,
      tr("The hidden state fed to the projector, LLaVA's; -2 the penultimate layer's "
         "output (later layers are not run)"));
  QWidget* layerRow = pair(layers, tr("select"), select);
  addRow(tr("Layers"), layerRow, {"vision-num-layers", "vision-select-layer"});
  QSpinBox* width = vision_int(tr("vision width"), "vision-hidden-size", 1, 1 << 16,
                               &VisionConfig::hidden_size, tr("Encoder width"));
  QSpinBox* heads = vision_int(tr("vision heads"), "vision-num-attention-heads", 1, 1024,
                               &VisionConfig::num_attention_heads, tr("Encoder attention heads"));
  QWidget* widthRow = pair(width, tr("heads"), heads);
  addRow(tr("Width"), widthRow, {"vision-hidden-size", "vision-num-attention-heads"});
  QSpinBox* ffn = vision_int(tr("vision MLP width"), "vision-ffn-hidden-size", 0, 1 << 18,
                             &VisionConfig::ffn_hidden_size, tr("Encoder MLP width"));
  ffn->setSpecialValueText(tr("4 × width"));
  addRow(tr("MLP width"), ffn, {"vision-ffn-hidden-size"});
  QSpinBox* imgH = vision_int(tr("image height"), "img-h", 1, 1 << 14, &VisionConfig::img_h,
                              tr("Image height in pixels"));
  QSpinBox* imgW = vision_int(tr("image width"), "img-w", 1, 1 << 14, &VisionConfig::img_w,
                              tr("Image width in pixels"));
  QWidget* imageRow = pair(imgH, tr("×"), imgW);
  addRow(tr("Image"), imageRow, {"img-h", "img-w"});
  QSpinBox* patch = vision_int(tr("patch side"), "patch-dim", 1, 1 << 10, &VisionConfig::patch_dim,
                               tr("Patch side in pixels"));
  addRow(tr("Patch"), patch, {"patch-dim", "num-channels"});

  QLabel* note = addNote();
  note->setObjectName("vision-figures");
  const QList<QWidget*> sizes = {layerRow, widthRow, ffn, imageRow, patch};
  onRefresh([this, note, sizes](const Plan& p, const PlanAnalysis& a) {
    const bool tower = !p.options.vision_model_type.empty();
    for (QWidget* w : sizes) setRowVisible(w, tower);
    note->setVisible(tower);
    if (!tower) return;
    if (!a.memory || a.memory->vision.parameters <= 0) {
      note->setText(tr("Vision tower: fix the fields above to see its figures"));
      return;
    }
    const VisionEstimate& v = a.memory->vision;
    const VisionConfig c = p.options.vision_config();
    note->setText(tr("%1 parameters per stage 0 rank · %2 image tokens · activations %3 per "
                     "micro-batch · %4 % of the model FLOPs")
                      .arg(humanCount(static_cast<double>(v.parameters)))
                      .arg(c.patches())
                      .arg(humanBytes(static_cast<double>(v.activation_bytes_per_micro_batch)))
                      .arg(100 * v.flops_per_iteration / a.memory->flops_per_iteration, 0, 'f', 1));
  });
}

}  // namespace lattice::ui
