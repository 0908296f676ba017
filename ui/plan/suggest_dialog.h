// Suggest: every valid layout of the plan's model and global batch on its cluster
// (suggest_layouts, run off the UI thread), ranked by estimated throughput; Apply replaces the
// plan's layout and batch flags as one undoable step. When none fits the device memory, a line
// above the table says so first and the table is sorted by memory, the closest first.
#pragma once

#include <QDialog>
#include <QFutureWatcher>

#include "lattice/plan.h"

class QLabel;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace lattice::ui {

class PlanModel;
class SuggestModel;

class SuggestDialog : public QDialog {
  Q_OBJECT

 public:
  explicit SuggestDialog(PlanModel* model, QWidget* parent = nullptr);
  SuggestModel* tableModel() const { return table_; }
  // Starts the search for the model's current plan.
  void search();
  // Applies the candidate in (proxy) row `row`.
  void applyRow(int row);

 signals:
  void searchFinished();

 private:
  struct Answer {
    std::vector<LayoutCandidate> candidates;
    SuggestStats stats;
    double elapsedMs = 0;
  };
  void showAnswer();

  PlanModel* model_;
  SuggestModel* table_;
  QSortFilterProxyModel* proxy_;
  QTableView* view_;
  QLabel* verdict_;  // above the table: that nothing fits
  QLabel* status_;
  QPushButton* apply_;
  QFutureWatcher<Answer> watcher_;
  double deviceMemory_ = 0;
};

}  // namespace lattice::ui
