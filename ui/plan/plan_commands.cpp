// SetPlanCommand: swap the model's plan; merge quick repeated edits of one field.
#include "plan/plan_commands.h"

#include "plan/plan_model.h"

namespace lattice::ui {

namespace {

// QUndoCommand ids are ints: one per merge key, -1 (never merge) without one.
int idForKey(const QString& key) {
  if (key.isEmpty()) return -1;
  return static_cast<int>(qHash(key) & 0x7fffffff);
}

}  // namespace

SetPlanCommand::SetPlanCommand(PlanModel* model, Plan before, Plan after, const QString& text,
                               const QString& mergeKey)
    : model_(model), before_(std::move(before)), after_(std::move(after)), mergeKey_(mergeKey) {
  setText(text);
  lastEdit_.start();
}

void SetPlanCommand::undo() {
  model_->assign(before_);
}

void SetPlanCommand::redo() {
  model_->assign(after_);
}

int SetPlanCommand::id() const {
  return idForKey(mergeKey_);
}

bool SetPlanCommand::mergeWith(const QUndoCommand* other) {
  const auto* next = static_cast<const SetPlanCommand*>(other);
  if (next->mergeKey_ != mergeKey_ || lastEdit_.elapsed() > kMergeWindowMs) return false;
  after_ = next->after_;
  lastEdit_.restart();
  if (samePlan(before_, after_)) setObsolete(true);  // back where it started: drop the step
  return true;
}

}  // namespace lattice::ui
