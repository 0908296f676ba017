// PlanModel: edits become SetPlanCommands on the undo stack; every change re-runs the analysis.
#include "plan/plan_model.h"

#include "plan/plan_commands.h"

namespace lattice::ui {

PlanModel::PlanModel(QObject* parent) : QObject(parent) {
  plan_ = defaultPlan();
  analysis_ = analyzePlan(plan_, cpuGflops_);
}

void PlanModel::edit(const QString& text, const std::function<void(Plan&)>& change,
                     const QString& mergeKey) {
  Plan next = plan_;
  change(next);
  normalizePlan(next);
  if (samePlan(next, plan_)) return;
  undoStack_.push(new SetPlanCommand(this, plan_, next, text, mergeKey));
}

void PlanModel::replacePlan(const Plan& plan, const QString& text) {
  Plan next = plan;
  normalizePlan(next);
  if (samePlan(next, plan_)) return;
  undoStack_.push(new SetPlanCommand(this, plan_, next, text, {}));
}

void PlanModel::resetPlan(const Plan& plan) {
  undoStack_.clear();
  Plan next = plan;
  normalizePlan(next);
  assign(next);
  undoStack_.setClean();
}

void PlanModel::setCpuGflops(double gflops) {
  if (gflops == cpuGflops_) return;
  cpuGflops_ = gflops;
  assign(plan_);
}

void PlanModel::assign(const Plan& plan) {
  plan_ = plan;
  analysis_ = analyzePlan(plan_, cpuGflops_);
  emit planChanged();
}

}  // namespace lattice::ui
