// The Plan form's "Cluster" section: nodes, devices per node and the device kind (this
// machine's CPU with its measured SGEMM rate, the built-in GPU table, or a custom device).
#pragma once

#include "plan/form_section.h"

namespace lattice::ui {

class ClusterSection : public FormSection {
  Q_OBJECT

 public:
  explicit ClusterSection(PlanModel* model, QWidget* parent = nullptr);
};

}  // namespace lattice::ui
