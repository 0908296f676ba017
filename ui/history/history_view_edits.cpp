// HistoryView's edits: the dialogs that ask for them (tags, notes, delete) and the queue that
// writes them off the UI thread, one batch at a time, in the order asked. Nothing is queued
// while the store is read-only.
#include "history/history_view.h"

#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QTableView>
#include <QtConcurrent/QtConcurrentRun>
#include <utility>

#include "history/run_filter_model.h"
#include "history/run_text.h"
#include "plan/text_format.h"

namespace lattice::ui {

namespace {

QString runLine(const storage::RunInfo& r) {
  return QObject::tr("'%1' (run %2, %3, %4)")
      .arg(QString::fromStdString(r.name))
      .arg(r.id)
      .arg(runStatusText(r.status))
      .arg(r.latest_step ? QObject::tr("step %1").arg(*r.latest_step) : QObject::tr("no steps"));
}

}  // namespace

// ---- edits -----------------------------------------------------------------------------

void HistoryView::renameRun(qint64 id, const QString& name) {
  queueEdits({{RunEdit::Kind::kRename, id, name.trimmed(), {}}});
}

void HistoryView::addTags(const QList<qint64>& ids, const QStringList& tags) {
  if (tags.isEmpty()) return;
  QList<RunEdit> edits;
  for (qint64 id : ids) edits.append({RunEdit::Kind::kAddTags, id, {}, tags});
  queueEdits(edits);
}

void HistoryView::removeTags(const QList<qint64>& ids, const QStringList& tags) {
  if (tags.isEmpty()) return;
  QList<RunEdit> edits;
  for (qint64 id : ids) edits.append({RunEdit::Kind::kRemoveTags, id, {}, tags});
  queueEdits(edits);
}

void HistoryView::setNotes(qint64 id, const QString& notes) {
  queueEdits({{RunEdit::Kind::kNotes, id, notes, {}}});
}

bool HistoryView::deleteRuns(const QList<qint64>& ids) {
  if (access_ == StoreAccess::kReadOnly) {
    refuseEdits();
    return false;
  }
  QStringList lines;
  bool anyRunning = false;
  QList<RunEdit> edits;
  for (qint64 id : ids) {
    const storage::RunInfo* r = model_->run(id);
    if (!r) continue;
    lines << runLine(*r);
    anyRunning = anyRunning || r->status == storage::RunStatus::kRunning;
    edits.append({RunEdit::Kind::kDelete, id, {}, {}});
  }
  if (edits.isEmpty()) return false;
  const QString question =
      lines.size() == 1 ? tr("Delete run %1?").arg(lines.front())
                        : tr("Delete these %1 runs?\n\n%2")
                              .arg(lines.size())
                              .arg(QStringLiteral("• ") + lines.join(QStringLiteral("\n• ")));
  QMessageBox box(QMessageBox::Warning, tr("Delete runs"), question,
                  QMessageBox::Yes | QMessageBox::Cancel, this);
  box.setObjectName(QStringLiteral("historyDeleteConfirmation"));
  box.setInformativeText(
      tr("Every metric, memory sample, timeline event, log line and checkpoint record of %1 is "
         "removed from the database; checkpoint files on disk stay.%2")
          .arg(lines.size() == 1 ? tr("the run") : tr("these runs"))
          .arg(anyRunning ? tr(" A run that is still running is refused.") : QString()));
  box.button(QMessageBox::Yes)->setText(tr("Delete"));
  box.setDefaultButton(QMessageBox::Cancel);
  if (box.exec() != QMessageBox::Yes) return false;
  queueEdits(edits);
  return true;
}

void HistoryView::queueEdits(const QList<RunEdit>& edits) {
  if (edits.isEmpty()) return;
  // A dialog or cell editor opened on the local history may close after the view moved on to
  // a job's store: the edit is refused, not written there.
  if (access_ == StoreAccess::kReadOnly) {
    refuseEdits();
    return;
  }
  if (queuedEdits_.isEmpty() || queuedEdits_.back().database != database_)
    queuedEdits_.append({database_, {}});
  queuedEdits_.back().edits += edits;
  startWrites();
}

void HistoryView::refuseEdits() {
  const QString message =
      tr("Not changed: %1 is a running cluster job's store, shown read-only. Edit its runs once "
         "the job ends and they are imported into the local history.")
          .arg(database_);
  showError(message);
  emit editsApplied({message});
  refresh();
}

void HistoryView::startWrites() {
  if (writer_.isRunning() || queuedEdits_.isEmpty()) return;
  const EditBatch batch = queuedEdits_.takeFirst();
  writer_.setFuture(QtConcurrent::run([batch] { return applyEdits(batch.database, batch.edits); }));
}

void HistoryView::onWritten() {
  writeErrors_ += writer_.result();
  if (!queuedEdits_.isEmpty()) {  // asked for while this batch was written
    startWrites();
    return;
  }
  const QStringList errors = std::exchange(writeErrors_, {});
  showError(errors.join(QLatin1Char('\n')));
  emit editsApplied(errors);
  refresh();
}

void HistoryView::showError(const QString& text) {
  error_->setText(text);
  error_->parentWidget()->setVisible(!text.isEmpty());
}

QString HistoryView::errorText() const {
  return error_->text();
}

// ---- actions -----------------------------------------------------------------------------

void HistoryView::openSelected() {
  const QList<qint64> ids = selectedOrCurrent();
  if (!ids.isEmpty()) emit openInDashboard(ids);
}

void HistoryView::renameCurrent() {
  const QList<qint64> ids = selectedOrCurrent();
  if (ids.size() != 1) return;
  const QModelIndex source = model_->index(model_->rowOfRun(ids.front()), RunTableModel::kName);
  const QModelIndex at = proxy_->mapFromSource(source);
  if (!at.isValid()) return;
  table_->setCurrentIndex(at);
  table_->edit(at);
}

void HistoryView::editNotesOfCurrent() {
  const QList<qint64> ids = selectedOrCurrent();
  if (ids.size() != 1) return;
  const storage::RunInfo* r = model_->run(ids.front());
  if (!r) return;
  bool ok = false;
  const QString notes = QInputDialog::getMultiLineText(
      this, tr("Notes"), tr("Notes on run '%1':").arg(QString::fromStdString(r->name)),
      QString::fromStdString(r->notes), &ok);
  if (ok && notes != QString::fromStdString(r->notes)) setNotes(ids.front(), notes);
}

void HistoryView::askAddTags() {
  const QList<qint64> ids = selectedOrCurrent();
  if (ids.isEmpty()) return;
  bool ok = false;
  const QString text = QInputDialog::getText(
      this, tr("Add tags"),
      tr("Tags for %1 (comma-separated):").arg(plural(ids.size(), "run", "runs")),
      QLineEdit::Normal, {}, &ok);
  if (ok) addTags(ids, parseTags(text));
}

void HistoryView::askRemoveTag() {
  const QList<qint64> ids = selectedOrCurrent();
  QStringList tags;
  for (qint64 id : ids) {
    if (const storage::RunInfo* r = model_->run(id)) {
      for (const std::string& t : r->tags) tags << QString::fromStdString(t);
    }
  }
  tags.removeDuplicates();
  tags.sort(Qt::CaseInsensitive);
  if (tags.isEmpty()) return;
  bool ok = false;
  const QString tag = QInputDialog::getItem(
      this, tr("Remove tag"), tr("Tag to remove from %1:").arg(plural(ids.size(), "run", "runs")),
      tags, 0, false, &ok);
  if (ok) removeTags(ids, {tag});
}

void HistoryView::askDelete() {
  deleteRuns(selectedOrCurrent());
}

}  // namespace lattice::ui
