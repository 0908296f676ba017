// The Plan form's "Model" section: a preset list ("Custom" when the fields match none) and
// every architecture field, GPT-2's and the Llama family's (positions, RoPE, norm, SwiGLU,
// query groups, untied head, biases), with the parameter count and the architecture in words
// updated on each edit.
#pragma once

#include "plan/form_section.h"

namespace lattice::ui {

class ModelSection : public FormSection {
  Q_OBJECT

 public:
  explicit ModelSection(PlanModel* model, QWidget* parent = nullptr);

 private:
  // The Llama family's rows (model_section_architecture.cpp).
  void addArchitectureRows();
};

}  // namespace lattice::ui
