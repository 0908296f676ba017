// The one undo command of the Plan view: "the plan was A, is now B". Plans are small values,
// so storing both is simpler and safer than per-field commands.
#pragma once

#include <QElapsedTimer>
#include <QUndoCommand>

#include "plan/plan.h"

namespace lattice::ui {

class PlanModel;

class SetPlanCommand : public QUndoCommand {
 public:
  // `mergeKey` non-empty: consecutive commands with the same key within kMergeWindowMs merge.
  SetPlanCommand(PlanModel* model, Plan before, Plan after, const QString& text,
                 const QString& mergeKey);

  void undo() override;
  void redo() override;
  int id() const override;
  bool mergeWith(const QUndoCommand* other) override;

  static constexpr int kMergeWindowMs = 1000;

 private:
  PlanModel* model_;
  Plan before_, after_;
  QString mergeKey_;
  QElapsedTimer lastEdit_;
};

}  // namespace lattice::ui
