// The Plan view's data model: the current Plan, its analysis, and the undo stack every edit
// goes through. Widgets read from it and call edit(); they never hold plan state themselves.
// Thread affinity: the GUI thread. Non-goals: persistence (the main window stores the plan).
#pragma once

#include <QObject>
#include <QUndoStack>
#include <functional>

#include "plan/plan.h"
#include "plan/plan_analysis.h"

namespace lattice::ui {

class PlanModel : public QObject {
  Q_OBJECT

 public:
  explicit PlanModel(QObject* parent = nullptr);

  const Plan& plan() const { return plan_; }
  const PlanAnalysis& analysis() const { return analysis_; }
  bool isValid() const { return analysis_.valid(); }
  QUndoStack* undoStack() { return &undoStack_; }

  // One undoable edit: `change` is applied to a copy of the plan. Edits with the same
  // `mergeKey` (a field name) in quick succession (spin-box arrows) merge into one undo step.
  // An edit that changes nothing pushes nothing.
  void edit(const QString& text, const std::function<void(Plan&)>& change,
            const QString& mergeKey = {});
  // Replaces the whole plan as one undoable step (a preset, Open, Apply of a suggestion).
  void replacePlan(const Plan& plan, const QString& text);
  // Starts over from `plan` with an empty undo history (New plan, start-up).
  void resetPlan(const Plan& plan);

  // This machine's measured SGEMM rate for the CPU device (0: not measured yet).
  double cpuGflops() const { return cpuGflops_; }
  void setCpuGflops(double gflops);

  // The planner's fitted rates (docs/studio.md "Calibrate"): applied to the analysis where the
  // device is the calibration's; not part of the plan (no undo entry). nullopt: the defaults.
  const std::optional<Calibration>& calibration() const { return calibration_; }
  void setCalibration(const std::optional<Calibration>& calibration);
  // With this on, each device the plan picks gets its saved calibration
  // (calibration_path(device key)) when one exists: the Studio's window turns it on; tests and
  // screenshots start from the defaults.
  void setUseSavedCalibrations(bool use);

 signals:
  // The plan or its analysis changed (after an edit, undo, redo or reset).
  void planChanged();

 private:
  friend class SetPlanCommand;
  void assign(const Plan& plan);  // no undo entry

  Plan plan_;
  PlanAnalysis analysis_;
  double cpuGflops_ = 0;
  std::optional<Calibration> calibration_;
  bool useSaved_ = false;
  QString loadedFor_;  // "<cluster name>/<device key>" whose saved calibration was looked up
  QUndoStack undoStack_;
};

}  // namespace lattice::ui
