// The Plan view's left column: the model, cluster and parallelism sections in a scroll area,
// and the messages that concern no field of the form (flags set only in a loaded config).
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
  void changeEvent(QEvent* event) override;  // a new palette: new error colours

 private:
  void refresh();

  PlanModel* model_;
  QList<FormSection*> sections_;
  QLabel* otherErrors_;
};

}  // namespace lattice::ui
