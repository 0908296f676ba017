// Base of the Plan view's form sections (model, cluster, parallelism): a group box whose rows
// are bound to the PlanModel. Each row names the fields (flags) it edits; the validation
// messages of those fields appear in plain words right under the row.
//
// The rows sit in a two-column QGridLayout, not a QFormLayout: with rows hidden by
// setRowVisible and word-wrapped message rows, Qt 6.4's QFormLayout under-reported its height
// for a width once a message row appeared (103 px where the Cluster rows needed 125), and the
// row that lost the difference was drawn 0 px high (issue 29: "Pipeline parallel" or "Device"
// vanished after TP 3 and Tab, though Tab still reached it). A grid drops hidden rows and their
// spacing and gives every shown row its height.
#pragma once

#include <QDoubleSpinBox>
#include <QGroupBox>
#include <QHash>
#include <QStringList>
#include <functional>
#include <utility>
#include <vector>

#include "plan/plan_model.h"

class QCheckBox;
class QComboBox;
class QGridLayout;
class QLabel;
class QSpinBox;

namespace lattice::ui {

class FormSection : public QGroupBox {
  Q_OBJECT

 public:
  FormSection(const QString& title, PlanModel* model, QWidget* parent = nullptr);

  // Fields of this section (for the form's list of messages no row claims).
  const QStringList& fields() const { return fields_; }
  // Re-reads every editor's value and the errors from the model (signals blocked).
  void refresh();

  // Object name of the error label of `field`'s row (tests look it up).
  static QString errorLabelName(const QString& field) { return "error:" + field; }

 protected:
  // A row: label, editor, and an error label for the messages of `fields`.
  void addRow(const QString& label, QWidget* editor, const QStringList& fields,
              const QString& toolTip = {});
  // Two editors on one row with a short word between them ("256 MLP 1024").
  QWidget* pair(QWidget* first, const QString& between, QWidget* second);
  // Derived information under the rows (a grey line: parameter count, DP, ...).
  QLabel* addNote();
  // Shows or hides the row of `editor` (its label too).
  void setRowVisible(QWidget* editor, bool visible);

  // Editors bound to an int / bool / double in the plan. `field` names the flag (the merge key
  // of the undo step) and `text` the undo step ("Set tensor parallel size").
  QSpinBox* intEditor(int min, int max, const QString& field, const QString& text,
                      std::function<int(const Plan&)> get, std::function<void(Plan&, int)> set);
  QCheckBox* boolEditor(const QString& label, const QString& field, const QString& text,
                        std::function<bool(const Plan&)> get, std::function<void(Plan&, bool)> set);
  QDoubleSpinBox* doubleEditor(double min, double max, int decimals, const QString& suffix,
                               const QString& field, const QString& text,
                               std::function<double(const Plan&)> get,
                               std::function<void(Plan&, double)> set);
  // Binds a spin box made by the caller (a ScientificSpinBox, say) as doubleEditor does.
  void bindDouble(QDoubleSpinBox* spin, const QString& field, const QString& text,
                  std::function<double(const Plan&)> get, std::function<void(Plan&, double)> set);
  // A choice of string values: `items` are (shown text, value) pairs; a value the plan holds
  // that no item has shows as the first item.
  QComboBox* choiceEditor(const QString& field, const QString& text,
                          const std::vector<std::pair<QString, QString>>& items,
                          std::function<QString(const Plan&)> get,
                          std::function<void(Plan&, const QString&)> set);
  // Runs on every refresh, after the editors are updated.
  void onRefresh(std::function<void(const Plan&, const PlanAnalysis&)> update);

  PlanModel* model_;

 private:
  // A widget across both columns on a new row.
  void addFullRow(QWidget* widget);

  struct ErrorRow {
    QStringList fields;
    QLabel* label;
  };
  QGridLayout* grid_;
  int rows_ = 0;
  QHash<QWidget*, QLabel*> labels_;  // editor -> the label beside it
  std::vector<ErrorRow> errorRows_;
  std::vector<std::function<void(const Plan&, const PlanAnalysis&)>> refreshers_;
  QStringList fields_;
};

// A spin box for values across decades (a norm's epsilon): shown as "1e-05", the arrows step
// by factors of ten.
class ScientificSpinBox : public QDoubleSpinBox {
 public:
  explicit ScientificSpinBox(QWidget* parent = nullptr);
  QString textFromValue(double value) const override;
  double valueFromText(const QString& text) const override;
  QValidator::State validate(QString& text, int& position) const override;
  void stepBy(int steps) override;
};

// Red for error text, readable on the light and the dark palette.
QColor errorColor(const QPalette& palette);

}  // namespace lattice::ui
