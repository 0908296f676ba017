// The Plan view's left column: the model, cluster and parallelism sections in a scroll area,
// and the messages that concern no field of the form (flags set only in a loaded config).
// Ctrl+Z / Ctrl+Shift+Z in a field undo and redo the plan unless the field has typing of its
// own to undo or redo.
#pragma once

#include <QScrollArea>

class QLabel;

namespace lattice::ui {

class FormSection;
class PlanModel;

class PlanForm : public QScrollArea {
  Q_OBJECT

 public:
  explicit PlanForm(PlanModel* model, QWidget* parent = nullptr);

 protected:
  void changeEvent(QEvent* event) override;                    // a new palette: new error colours
  bool eventFilter(QObject* watched, QEvent* event) override;  // the fields' undo keys

 private:
  void refresh();

  PlanModel* model_;
  QList<FormSection*> sections_;
  QLabel* otherErrors_;
};

}  // namespace lattice::ui
