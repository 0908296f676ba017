// PlanModel: edits become SetPlanCommands on the undo stack; every change re-runs the analysis.
#include "plan/plan_model.h"

#include "plan/plan_commands.h"

namespace lattice::ui {

PlanModel::PlanModel(QObject* parent) : QObject(parent) {
  plan_ = defaultPlan();
  analysis_ = analyzePlan(plan_, cpuGflops_);
}

void PlanModel::setCalibration(const std::optional<Calibration>& calibration) {
  calibration_ = calibration;
  assign(plan_);
}

void PlanModel::setUseSavedCalibrations(bool use) {
  useSaved_ = use;
  loadedFor_.clear();
  assign(plan_);
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
  analysis_ = analyzePlan(plan_, cpuGflops_, calibration_ ? &*calibration_ : nullptr);
  const std::string device = analysis_.defaultCluster.device.key;
  const QString key = plan_.cluster.name + '/' + QString::fromStdString(device);
  if (useSaved_ && key != loadedFor_) {
    // Looked up once per cluster and device pick, not on every edit: the cluster's own file,
    // else the device's (Note [calibration per cluster]); none leaves the defaults.
    loadedFor_ = key;
    calibration_.reset();
    for (const std::string& path :
         calibration_search_paths(device, plan_.cluster.name.toStdString())) {
      Result<std::optional<Calibration>> saved = load_calibration(path);
      if (!saved || !*saved) continue;
      calibration_ = **saved;
      break;
    }
    analysis_ = analyzePlan(plan_, cpuGflops_, calibration_ ? &*calibration_ : nullptr);
  }
  emit planChanged();
}

}  // namespace lattice::ui
