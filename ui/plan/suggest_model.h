// The Suggest dialog's table: one row per LayoutCandidate (suggest_layouts' order: fitting
// first, by estimated tokens/s). Qt::DisplayRole is text, kSortRole the raw number for sorting.
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "lattice/plan.h"

namespace lattice::ui {

class SuggestModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kRank,
    kTp,
    kPp,
    kDp,
    kVirtual,
    kMicroBatch,
    kRecompute,
    kDistributed,
    kMemory,
    kFits,
    kStepTime,
    kTokens,
    kMfu,
    kColumnCount
  };
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit SuggestModel(QObject* parent = nullptr);

  void setCandidates(std::vector<LayoutCandidate> candidates, double deviceMemoryBytes);
  const LayoutCandidate& candidate(int row) const { return candidates_[row]; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QVariant display(const LayoutCandidate& c, int row, int column) const;
  QVariant sortValue(const LayoutCandidate& c, int row, int column) const;

  std::vector<LayoutCandidate> candidates_;
  double deviceMemory_ = 0;
};

}  // namespace lattice::ui
