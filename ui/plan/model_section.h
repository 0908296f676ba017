// The Plan form's "Model" section: a preset list and every architecture field, with the
// parameter count updated on each edit.
#pragma once

#include "plan/form_section.h"

namespace lattice::ui {

class ModelSection : public FormSection {
  Q_OBJECT

 public:
  explicit ModelSection(PlanModel* model, QWidget* parent = nullptr);
};

}  // namespace lattice::ui
