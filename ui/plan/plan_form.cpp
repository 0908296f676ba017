// PlanForm: sections refreshed on every plan change.
#include "plan/plan_form.h"

#include <QAbstractSpinBox>
#include <QEvent>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QScrollBar>
#include <QVBoxLayout>

#include "plan/cluster_section.h"
#include "plan/model_section.h"
#include "plan/parallel_section.h"
#include "plan/vision_section.h"

namespace lattice::ui {

PlanForm::PlanForm(PlanModel* model, QWidget* parent) : QScrollArea(parent), model_(model) {
  auto* content = new QWidget(this);
  auto* column = new QVBoxLayout(content);
  sections_ = {new ModelSection(model, content), new VisionSection(model, content),
               new ClusterSection(model, content), new ParallelSection(model, content)};
  for (FormSection* s : sections_) column->addWidget(s);
  otherErrors_ = new QLabel(content);
  otherErrors_->setObjectName("other-errors");
  otherErrors_->setWordWrap(true);
  otherErrors_->setTextFormat(Qt::PlainText);
  column->addWidget(otherErrors_);
  column->addStretch(1);
  setWidget(content);
  setWidgetResizable(true);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setFrameShape(QFrame::NoFrame);
  connect(model_, &PlanModel::planChanged, this, &PlanForm::refresh);
  for (QAbstractSpinBox* field : content->findChildren<QAbstractSpinBox*>())
    field->installEventFilter(this);
  refresh();
  // Never narrower than the fields: the content does not scroll sideways.
  setMinimumWidth(content->minimumSizeHint().width() + verticalScrollBar()->sizeHint().width() +
                  2 * frameWidth());
}

void PlanForm::changeEvent(QEvent* event) {
  QScrollArea::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) refresh();
}

// A focused spin box claims the undo keys for its line edit (ShortcutOverride) even when that
// has nothing to undo, the usual case: a typed value is committed by Enter or Tab, and the
// committed text has no history. Then the keys go on to the window's Undo and Redo actions.
bool PlanForm::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() != QEvent::ShortcutOverride) return QScrollArea::eventFilter(watched, event);
  auto* key = static_cast<QKeyEvent*>(event);
  const bool undo = key->matches(QKeySequence::Undo);
  const bool redo = key->matches(QKeySequence::Redo) ||
                    key->keyCombination() == QKeyCombination(Qt::CTRL | Qt::Key_Y);
  const auto* edit = watched->findChild<QLineEdit*>();
  if (!edit || (!undo && !redo)) return QScrollArea::eventFilter(watched, event);
  if ((undo && edit->isUndoAvailable()) || (redo && edit->isRedoAvailable()))
    return QScrollArea::eventFilter(watched, event);
  event->ignore();  // not the field's: the shortcut runs
  return true;
}

void PlanForm::refresh() {
  QStringList claimed;
  for (FormSection* s : sections_) {
    s->refresh();
    claimed << s->fields();
  }
  QStringList other;
  for (const FieldError& e : model_->analysis().errors)
    if (!claimed.contains(e.field)) other << e.message;
  QPalette palette = otherErrors_->palette();
  palette.setColor(QPalette::WindowText, errorColor(palette));
  otherErrors_->setPalette(palette);
  otherErrors_->setText(other.isEmpty() ? QString()
                                        : tr("Other settings of this plan:\n") + other.join('\n'));
  otherErrors_->setVisible(!other.isEmpty());
}

}  // namespace lattice::ui
