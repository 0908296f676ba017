// SuggestModel: candidates as table cells.
#include "plan/suggest_model.h"

#include <QColor>
#include <QGuiApplication>
#include <QPalette>

#include "plan/text_format.h"

namespace lattice::ui {

namespace {

QString recomputeName(const ParallelOptions& p) {
  if (p.recompute_granularity == "full") return QObject::tr("full");
  if (p.recompute_granularity == "selective") return QObject::tr("selective");
  return QObject::tr("none");
}

double mostLoadedBytes(const LayoutCandidate& c) {
  return c.memory.stages.empty()
             ? 0
             : static_cast<double>(c.memory.stages[c.memory.most_loaded].total_bytes());
}

}  // namespace

SuggestModel::SuggestModel(QObject* parent) : QAbstractTableModel(parent) {}

void SuggestModel::setCandidates(std::vector<LayoutCandidate> candidates, double deviceMemory) {
  beginResetModel();
  candidates_ = std::move(candidates);
  deviceMemory_ = deviceMemory;
  endResetModel();
}

int SuggestModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(candidates_.size());
}

int SuggestModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant SuggestModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const LayoutCandidate& c = candidates_[index.row()];
  switch (role) {
    case Qt::DisplayRole:
      return display(c, index.row(), index.column());
    case kSortRole:
      return sortValue(c, index.row(), index.column());
    case Qt::TextAlignmentRole:
      return index.column() == kRecompute || index.column() == kFits
                 ? QVariant(Qt::AlignLeft | Qt::AlignVCenter)
                 : QVariant(Qt::AlignRight | Qt::AlignVCenter);
    case Qt::ForegroundRole:
      if (!c.fits) return QGuiApplication::palette().color(QPalette::PlaceholderText);
      return {};
    case Qt::ToolTipRole:
      return QString::fromStdString(layout_flags(c.options));
    default:
      return {};
  }
}

QVariant SuggestModel::display(const LayoutCandidate& c, int row, int column) const {
  const ParallelLayout& l = c.layout;
  const StepEstimate& s = c.step;
  switch (column) {
    case kRank:
      return row + 1;
    case kTp:
      return l.tp;
    case kPp:
      return l.pp;
    case kDp:
      return l.dp;
    case kVirtual:
      return l.vpp;
    case kMicroBatch:
      return c.options.micro_batch_size;
    case kRecompute:
      return recomputeName(c.options.parallel);
    case kDistributed:
      return c.options.parallel.use_distributed_optimizer ? tr("yes") : tr("no");
    case kMemory:
      return humanBytes(mostLoadedBytes(c));
    case kFits:
      return c.fits ? tr("fits") : tr("too big");
    case kStepTime:
      return QString::number(s.total_s, 'f', s.total_s >= 10 ? 1 : 3) + " s";
    case kTokens:
      return QString::number(s.tokens_per_second, 'f', 0);
    case kMfu:
      return QString::number(s.mfu * 100, 'f', 1) + " %";
    default:
      return {};
  }
}

QVariant SuggestModel::sortValue(const LayoutCandidate& c, int row, int column) const {
  switch (column) {
    case kRecompute:
      return recomputeName(c.options.parallel);
    case kDistributed:
      return c.options.parallel.use_distributed_optimizer;
    case kMemory:
      return mostLoadedBytes(c);
    case kFits:
      return c.fits;
    case kStepTime:
      return c.step.total_s;
    case kTokens:
      return c.step.tokens_per_second;
    case kMfu:
      return c.step.mfu;
    default:
      return display(c, row, column);
  }
}

QVariant SuggestModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= kColumnCount) return {};
  if (role == Qt::ToolTipRole && section == kMemory)
    return tr("Memory of the most loaded rank; the device has %1").arg(humanBytes(deviceMemory_));
  if (role != Qt::DisplayRole) return {};
  static const char* const kNames[] = {"#",         "TP",        "PP",         "DP",     "VPP",
                                       "Micro",     "Recompute", "Dist. opt.", "Memory", "Fits",
                                       "Step time", "Tokens/s",  "MFU"};
  return tr(kNames[section]);
}

}  // namespace lattice::ui
