// The Plan form's "Vision tower" section (issue 27): a checkbox for a LLaVA-style tower
// (--vision-model-type clip) and its main sizes (--vision-num-layers, --vision-hidden-size,
// --vision-num-attention-heads, --vision-ffn-hidden-size, --img-h, --img-w, --patch-dim,
// --vision-select-layer), with its parameters, memory and FLOPs share from the planner. The
// sizes are hidden while the tower is off. Non-goals: the rarer flags (--num-channels,
// --vision-patch-bias, --disable-vision-class-token), which a config file still carries.
#pragma once

#include "plan/form_section.h"

namespace lattice::ui {

class VisionSection : public FormSection {
  Q_OBJECT

 public:
  explicit VisionSection(PlanModel* model, QWidget* parent = nullptr);
};

}  // namespace lattice::ui
