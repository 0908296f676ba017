// The Plan form's "Parallelism and batch" section: TP, PP, virtual stages, the derived DP,
// sequence parallelism, the distributed optimizer, recomputation, precision and batch sizes.
#pragma once

#include "plan/form_section.h"

namespace lattice::ui {

class ParallelSection : public FormSection {
  Q_OBJECT

 public:
  explicit ParallelSection(PlanModel* model, QWidget* parent = nullptr);

 private:
  void addRecompute();
  void addPrecision();
};

}  // namespace lattice::ui
