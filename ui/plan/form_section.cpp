// FormSection: bound editors, error rows, refresh with signals blocked (so that showing a value
// never records an edit).
#include "plan/form_section.h"

#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSpinBox>
#include <algorithm>
#include <cmath>

namespace lattice::ui {

QColor errorColor(const QPalette& palette) {
  return palette.color(QPalette::Window).lightness() < 128 ? QColor(0xff, 0x8a, 0x80)
                                                           : QColor(0xc6, 0x28, 0x28);
}

FormSection::FormSection(const QString& title, PlanModel* model, QWidget* parent)
    : QGroupBox(title, parent), model_(model), grid_(new QGridLayout(this)) {
  grid_->setColumnStretch(1, 1);
  grid_->setVerticalSpacing(4);
  grid_->setContentsMargins(8, 6, 8, 6);
}

void FormSection::addRow(const QString& label, QWidget* editor, const QStringList& fields,
                         const QString& toolTip) {
  auto* text = new QLabel(label, this);
  grid_->addWidget(text, rows_, 0, Qt::AlignLeft | Qt::AlignVCenter);
  grid_->addWidget(editor, rows_++, 1);
  labels_.insert(editor, text);
  if (!toolTip.isEmpty()) {
    editor->setToolTip(toolTip);
    text->setToolTip(toolTip);
  }
  if (fields.isEmpty()) return;
  auto* error = new QLabel(this);
  error->setObjectName(errorLabelName(fields.front()));
  error->setWordWrap(true);
  error->setTextFormat(Qt::PlainText);
  error->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error->setVisible(false);
  addFullRow(error);
  errorRows_.push_back({fields, error});
  fields_ << fields;
}

void FormSection::addFullRow(QWidget* widget) {
  grid_->addWidget(widget, rows_++, 0, 1, 2);
}

QWidget* FormSection::pair(QWidget* first, const QString& between, QWidget* second) {
  auto* box = new QWidget(this);
  auto* row = new QHBoxLayout(box);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(first, 1);
  row->addWidget(new QLabel(between, box));
  row->addWidget(second, 1);
  return box;
}

QLabel* FormSection::addNote() {
  auto* note = new QLabel(this);
  note->setWordWrap(true);
  note->setForegroundRole(QPalette::PlaceholderText);
  addFullRow(note);
  return note;
}

void FormSection::setRowVisible(QWidget* editor, bool visible) {
  editor->setVisible(visible);
  if (QLabel* label = labels_.value(editor)) label->setVisible(visible);
}

QSpinBox* FormSection::intEditor(int min, int max, const QString& field, const QString& text,
                                 std::function<int(const Plan&)> get,
                                 std::function<void(Plan&, int)> set) {
  auto* spin = new QSpinBox(this);
  spin->setRange(min, max);
  spin->setKeyboardTracking(false);  // typing "12" is one edit, not "1" then "12"
  spin->setAccelerated(true);
  spin->setObjectName(field);
  connect(spin, &QSpinBox::valueChanged, this, [this, text, field, set](int v) {
    model_->edit(
        text, [&](Plan& p) { set(p, v); }, field);
  });
  onRefresh([spin, get](const Plan& p, const PlanAnalysis&) { spin->setValue(get(p)); });
  return spin;
}

QCheckBox* FormSection::boolEditor(const QString& label, const QString& field, const QString& text,
                                   std::function<bool(const Plan&)> get,
                                   std::function<void(Plan&, bool)> set) {
  auto* box = new QCheckBox(label, this);
  box->setObjectName(field);
  connect(box, &QCheckBox::toggled, this,
          [this, text, set](bool on) { model_->edit(text, [&](Plan& p) { set(p, on); }); });
  onRefresh([box, get](const Plan& p, const PlanAnalysis&) { box->setChecked(get(p)); });
  return box;
}

QDoubleSpinBox* FormSection::doubleEditor(double min, double max, int decimals,
                                          const QString& suffix, const QString& field,
                                          const QString& text,
                                          std::function<double(const Plan&)> get,
                                          std::function<void(Plan&, double)> set) {
  auto* spin = new QDoubleSpinBox(this);
  spin->setRange(min, max);
  spin->setDecimals(decimals);
  spin->setSuffix(suffix);
  bindDouble(spin, field, text, std::move(get), std::move(set));
  return spin;
}

void FormSection::bindDouble(QDoubleSpinBox* spin, const QString& field, const QString& text,
                             std::function<double(const Plan&)> get,
                             std::function<void(Plan&, double)> set) {
  spin->setKeyboardTracking(false);
  spin->setObjectName(field);
  connect(spin, &QDoubleSpinBox::valueChanged, this, [this, text, field, set](double v) {
    model_->edit(
        text, [&](Plan& p) { set(p, v); }, field);
  });
  onRefresh([spin, get](const Plan& p, const PlanAnalysis&) { spin->setValue(get(p)); });
}

QComboBox* FormSection::choiceEditor(const QString& field, const QString& text,
                                     const std::vector<std::pair<QString, QString>>& items,
                                     std::function<QString(const Plan&)> get,
                                     std::function<void(Plan&, const QString&)> set) {
  auto* box = new QComboBox(this);
  box->setObjectName(field);
  for (const auto& [shown, value] : items) box->addItem(shown, value);
  connect(box, &QComboBox::activated, this, [this, box, text, set](int index) {
    const QString value = box->itemData(index).toString();
    model_->edit(text, [&](Plan& p) { set(p, value); });
  });
  onRefresh([box, get](const Plan& p, const PlanAnalysis&) {
    box->setCurrentIndex(std::max(box->findData(get(p)), 0));
  });
  return box;
}

ScientificSpinBox::ScientificSpinBox(QWidget* parent) : QDoubleSpinBox(parent) {
  setDecimals(30);  // QDoubleSpinBox rounds every value to its decimals
}

QString ScientificSpinBox::textFromValue(double value) const {
  return QString::number(value, 'g', 6);
}

double ScientificSpinBox::valueFromText(const QString& text) const {
  return text.trimmed().toDouble();
}

QValidator::State ScientificSpinBox::validate(QString& text, int&) const {
  bool ok = false;
  const double v = text.trimmed().toDouble(&ok);
  return ok && v >= minimum() && v <= maximum() ? QValidator::Acceptable : QValidator::Intermediate;
}

void ScientificSpinBox::stepBy(int steps) {
  setValue(value() * std::pow(10.0, steps));
}

void FormSection::onRefresh(std::function<void(const Plan&, const PlanAnalysis&)> update) {
  refreshers_.push_back(std::move(update));
}

void FormSection::refresh() {
  const Plan& plan = model_->plan();
  const PlanAnalysis& analysis = model_->analysis();
  {
    const QList<QWidget*> editors = findChildren<QWidget*>();
    std::vector<QSignalBlocker> blockers;
    blockers.reserve(editors.size());
    for (QWidget* w : editors) blockers.emplace_back(w);
    for (const auto& r : refreshers_) r(plan, analysis);
  }
  QPalette palette = this->palette();
  palette.setColor(QPalette::WindowText, errorColor(palette));
  for (const ErrorRow& row : errorRows_) {
    QStringList messages;
    for (const QString& f : row.fields) messages << analysis.messagesFor(f);
    row.label->setPalette(palette);
    row.label->setText(messages.join('\n'));
    row.label->setVisible(!messages.isEmpty());
  }
}

}  // namespace lattice::ui
