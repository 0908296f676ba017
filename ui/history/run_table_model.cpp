// RunTableModel: recorded runs as table cells, merged in place on every read.
#include "history/run_table_model.h"

#include <QColor>
#include <QGuiApplication>
#include <QPalette>
#include <QSet>
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "history/run_text.h"
#include "plan/text_format.h"

namespace lattice::ui {

namespace {

constexpr double kMissing = std::numeric_limits<double>::lowest();  // sorts first

// Configs are not read with the rows (RunFilter::with_config false): not compared.
bool sameRun(const storage::RunInfo& a, const storage::RunInfo& b) {
  auto sameLatest = [&] {
    if (a.latest.size() != b.latest.size()) return false;
    return std::equal(
        a.latest.begin(), a.latest.end(), b.latest.begin(), [](const auto& x, const auto& y) {
          return x.first == y.first &&
                 (x.second == y.second || (std::isnan(x.second) && std::isnan(y.second)));
        });
  };
  return a.id == b.id && a.name == b.name && a.status == b.status && a.started_at == b.started_at &&
         a.ended_at == b.ended_at && a.heartbeat_at == b.heartbeat_at && a.tags == b.tags &&
         a.notes == b.notes && a.error == b.error && a.latest_step == b.latest_step &&
         a.layout.tp == b.layout.tp && a.layout.pp == b.layout.pp && a.layout.dp == b.layout.dp &&
         a.parameter_count == b.parameter_count && a.host == b.host &&
         a.command_line == b.command_line && sameLatest();
}

QStringList tagList(const storage::RunInfo& r) {
  QStringList tags;
  for (const std::string& t : r.tags) tags << QString::fromStdString(t);
  return tags;
}

double numberOrMissing(std::optional<double> v) {
  if (!v) return kMissing;
  if (std::isnan(*v)) return std::numeric_limits<double>::max();  // NaN losses sort last
  return *v;
}

}  // namespace

QStringList parseTags(const QString& text) {
  QStringList tags;
  for (const QString& part : text.split(QLatin1Char(','))) {
    const QString tag = part.trimmed();
    if (!tag.isEmpty() && !tags.contains(tag)) tags << tag;
  }
  return tags;
}

RunTableModel::RunTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunTableModel::clear() {
  beginResetModel();
  runs_.clear();
  rowOf_.clear();
  settings_.clear();
  configsWanted_.clear();
  endResetModel();
}

void RunTableModel::indexRows() {
  rowOf_.clear();
  rowOf_.reserve(static_cast<qsizetype>(runs_.size()));
  for (int i = 0; i < static_cast<int>(runs_.size()); ++i) rowOf_.insert(runs_[i].id, i);
}

void RunTableModel::setEditable(bool editable) {
  editable_ = editable;  // views ask flags() when an edit starts: nothing to announce
}

void RunTableModel::setRuns(std::vector<storage::RunInfo> fresh, double now) {
  QSet<qint64> freshIds;
  for (const storage::RunInfo& r : fresh) freshIds.insert(r.id);
  for (auto it = settings_.begin(); it != settings_.end();)  // runs that went
    it = freshIds.contains(it.key()) ? std::next(it) : settings_.erase(it);
  for (auto it = configsWanted_.begin(); it != configsWanted_.end();)
    it = freshIds.contains(*it) ? std::next(it) : configsWanted_.erase(it);
  // The runs that stay must keep their relative order (the store lists by id); if they do not,
  // the rows cannot be merged and the model resets.
  std::vector<qint64> staying, freshOrder;
  QSet<qint64> oldIds;
  for (const storage::RunInfo& r : runs_) {
    oldIds.insert(r.id);
    if (freshIds.contains(r.id)) staying.push_back(r.id);
  }
  for (const storage::RunInfo& r : fresh) {
    if (oldIds.contains(r.id)) freshOrder.push_back(r.id);
  }
  if (runs_.empty() || staying != freshOrder || freshIds.size() != static_cast<int>(fresh.size())) {
    beginResetModel();
    for (const storage::RunInfo& r : fresh)  // kept settings stay valid if unchanged (setRuns)
      if (!settings_.contains(r.id) || !run(r.id) || !sameRun(*run(r.id), r))
        configsWanted_.insert(r.id);
    runs_ = std::move(fresh);
    indexRows();
    now_ = now;
    endResetModel();
    return;
  }
  // Remove the runs that went, back to front, one contiguous block at a time.
  for (int row = static_cast<int>(runs_.size()) - 1; row >= 0;) {
    if (freshIds.contains(runs_[row].id)) {
      --row;
      continue;
    }
    int first = row;
    while (first > 0 && !freshIds.contains(runs_[first - 1].id)) --first;
    beginRemoveRows({}, first, row);
    runs_.erase(runs_.begin() + first, runs_.begin() + row + 1);
    indexRows();
    endRemoveRows();
    row = first - 1;
  }
  // Walk the fresh list: a matching row is updated, a missing one inserted where it belongs.
  const bool clockMoved = now != now_;
  now_ = now;
  for (int i = 0; i < static_cast<int>(fresh.size()); ++i) {
    if (i < static_cast<int>(runs_.size()) && runs_[i].id == fresh[i].id) {
      if (!sameRun(runs_[i], fresh[i])) {
        configsWanted_.insert(fresh[i].id);
        runs_[i] = std::move(fresh[i]);
        emit dataChanged(index(i, 0), index(i, kColumnCount - 1));
      } else if (clockMoved && !runs_[i].ended_at && runs_[i].started_at) {
        emit dataChanged(index(i, kDuration), index(i, kDuration));  // a live run's age
      }
      continue;
    }
    // The fresh runs from i up to the next one the model holds arrive as one block: 10,000
    // single-row inserts would each re-sort the proxy.
    int end = i + 1;
    while (end < static_cast<int>(fresh.size()) &&
           !(i < static_cast<int>(runs_.size()) && runs_[i].id == fresh[end].id))
      ++end;
    beginInsertRows({}, i, end - 1);
    for (int j = i; j < end; ++j) configsWanted_.insert(fresh[j].id);
    runs_.insert(runs_.begin() + i, std::make_move_iterator(fresh.begin() + i),
                 std::make_move_iterator(fresh.begin() + end));
    indexRows();
    endInsertRows();
    i = end - 1;
  }
}

void RunTableModel::addSettings(const QHash<qint64, std::shared_ptr<const ParsedSettings>>& more) {
  for (auto it = more.begin(); it != more.end(); ++it)
    if (rowOf_.contains(it.key())) settings_.insert(it.key(), it.value());
}

std::vector<qint64> RunTableModel::takeConfigsWanted() {
  std::vector<qint64> ids;
  ids.reserve(static_cast<std::size_t>(configsWanted_.size()));
  for (const storage::RunInfo& r : runs_)
    if (configsWanted_.contains(r.id)) ids.push_back(r.id);
  configsWanted_.clear();
  return ids;
}

void RunTableModel::wantConfigs(const std::vector<qint64>& ids) {
  for (qint64 id : ids)
    if (rowOf_.contains(id)) configsWanted_.insert(id);
}

int RunTableModel::rowOfRun(qint64 id) const {
  return rowOf_.value(id, -1);
}

const storage::RunInfo* RunTableModel::run(qint64 id) const {
  const int row = rowOfRun(id);
  return row < 0 ? nullptr : &runs_[row];
}

QStringList RunTableModel::allTags() const {
  QStringList tags;
  for (const storage::RunInfo& r : runs_) tags << tagList(r);
  tags.removeDuplicates();
  tags.sort(Qt::CaseInsensitive);
  return tags;
}

int RunTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}

int RunTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant RunTableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const storage::RunInfo& r = runs_[index.row()];
  const int column = index.column();
  switch (role) {
    case Qt::DisplayRole:
      return display(r, column);
    case Qt::EditRole:
      if (column == kName) return QString::fromStdString(r.name);
      if (column == kTags) return tagList(r).join(QStringLiteral(", "));
      if (column == kNotes) return QString::fromStdString(r.notes);
      return display(r, column);
    case kSortRole:
      return sortValue(r, column);
    case kRunIdRole:
      return static_cast<qlonglong>(r.id);
    case kTagsRole:
      return tagList(r);
    case kStatusRole:
      return runStatusText(r.status);
    case kSearchRole:
      return QString::fromStdString(r.name) + QLatin1Char('\n') +
             tagList(r).join(QLatin1Char(' ')) + QLatin1Char('\n') +
             QString::fromStdString(r.notes);
    case Qt::TextAlignmentRole:
      switch (column) {
        case kId:
        case kModelSize:
        case kSteps:
        case kLoss:
        case kTokens:
        case kDuration:
          return QVariant(Qt::AlignRight | Qt::AlignVCenter);
        case kLayout:
          return QVariant(Qt::AlignCenter);
        default:
          return QVariant(Qt::AlignLeft | Qt::AlignVCenter);
      }
    case Qt::ForegroundRole:
      return foreground(r, column);
    case Qt::ToolTipRole:
      if (column == kStatus && !r.error.empty()) return QString::fromStdString(r.error);
      if (column == kName) {
        return tr("%1 on %2\n%3")
            .arg(QString::fromStdString(r.name), QString::fromStdString(r.host),
                 QString::fromStdString(r.command_line));
      }
      if (column == kLayout) {
        return tr("TP %1 × PP %2 × DP %3 (%4 ranks)")
            .arg(r.layout.tp)
            .arg(r.layout.pp)
            .arg(r.layout.dp)
            .arg(r.world_size);
      }
      if (column == kNotes && !r.notes.empty()) return QString::fromStdString(r.notes);
      return {};
    default:
      return {};
  }
}

QVariant RunTableModel::display(const storage::RunInfo& r, int column) const {
  switch (column) {
    case kId:
      return static_cast<qlonglong>(r.id);
    case kName:
      return QString::fromStdString(r.name);
    case kStatus:
      return runStatusText(r.status);
    case kLayout:
      return runLayoutText(r.layout);
    case kModelSize:
      return r.parameter_count > 0 ? humanCount(static_cast<double>(r.parameter_count))
                                   : QStringLiteral("-");
    case kSteps:
      return r.latest_step ? QString::number(*r.latest_step) : QStringLiteral("-");
    case kLoss:
      return lossText(latestMetric(r, kLossKey));
    case kTokens:
      return tokensText(latestMetric(r, kTokensKey));
    case kStarted:
      return runStartText(r);
    case kDuration: {
      const std::optional<double> d = runDurationSeconds(r, now_);
      return d ? durationText(*d) : QStringLiteral("-");
    }
    case kTags:
      return tagList(r).join(QStringLiteral(", "));
    case kNotes: {
      // One line in the table; the tooltip and the editor hold all of it.
      QString notes = QString::fromStdString(r.notes);
      return notes.section(QLatin1Char('\n'), 0, 0) + (notes.contains('\n') ? " …" : "");
    }
    default:
      return {};
  }
}

QVariant RunTableModel::sortValue(const storage::RunInfo& r, int column) const {
  switch (column) {
    case kId:
      return static_cast<qlonglong>(r.id);
    case kName:
      return QString::fromStdString(r.name).toLower();
    case kStatus:
      return runStatusText(r.status);
    case kLayout:  // by world size, then TP, PP
      return static_cast<qlonglong>(r.layout.tp) * r.layout.pp * r.layout.dp * 1000000 +
             r.layout.tp * 1000 + r.layout.pp;
    case kModelSize:
      return static_cast<qlonglong>(r.parameter_count);
    case kSteps:
      return static_cast<qlonglong>(r.latest_step.value_or(-1));
    case kLoss:
      return numberOrMissing(latestMetric(r, kLossKey));
    case kTokens:
      return numberOrMissing(latestMetric(r, kTokensKey));
    case kStarted:
      return r.started_at.value_or(kMissing);
    case kDuration:
      return runDurationSeconds(r, now_).value_or(kMissing);
    case kTags:
      return tagList(r).join(QLatin1Char(',')).toLower();
    case kNotes:
      return QString::fromStdString(r.notes).toLower();
    default:
      return {};
  }
}

QVariant RunTableModel::foreground(const storage::RunInfo& r, int column) const {
  if (column != kStatus) return {};
  switch (r.status) {
    case storage::RunStatus::kRunning:
      return QColor(0x2e, 0x9d, 0x4f);
    case storage::RunStatus::kFailed:
    case storage::RunStatus::kCrashed:
      return QColor(0xd9, 0x45, 0x3a);
    case storage::RunStatus::kKilled:
      return QColor(0xc7, 0x7c, 0x1a);
    default:
      return {};
  }
}

QVariant RunTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  static const char* const kTitles[kColumnCount] = {"ID",      "Name",     "Status", "Layout",
                                                    "Model",   "Steps",    "Loss",   "Tokens/s",
                                                    "Started", "Duration", "Tags",   "Notes"};
  static const char* const kTips[kColumnCount] = {
      "The run's id (lattice runs takes it, or the name)",
      "Unique within the database; F2 renames",
      "A running run whose heartbeat stopped over a minute ago is shown as crashed",
      "Tensor × pipeline × data parallel sizes",
      "Parameter count",
      "Latest logged step",
      "Latest training lm loss",
      "Latest throughput, tokens per second",
      "When the run started",
      "Ended − started, or how long it has been running",
      "Comma-separated; edit to add or remove",
      "Free text; edit to change"};
  if (section < 0 || section >= kColumnCount) return {};
  if (role == Qt::DisplayRole) return tr(kTitles[section]);
  if (role == Qt::ToolTipRole) return tr(kTips[section]);
  return {};
}

Qt::ItemFlags RunTableModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (editable_ && index.isValid() &&
      (index.column() == kName || index.column() == kTags || index.column() == kNotes)) {
    f |= Qt::ItemIsEditable;
  }
  return f;
}

bool RunTableModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::EditRole || !editable_ ||
      !checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return false;
  const storage::RunInfo& r = runs_[index.row()];
  QList<RunEdit> edits;
  if (index.column() == kName) {
    const QString name = value.toString().trimmed();
    if (!name.isEmpty() && name != QString::fromStdString(r.name)) {
      edits.append({RunEdit::Kind::kRename, r.id, name, {}});
    }
  } else if (index.column() == kTags) {
    const QStringList before = tagList(r), after = parseTags(value.toString());
    QStringList added, removed;
    for (const QString& t : after) {
      if (!before.contains(t)) added << t;
    }
    for (const QString& t : before) {
      if (!after.contains(t)) removed << t;
    }
    if (!added.isEmpty()) edits.append({RunEdit::Kind::kAddTags, r.id, {}, added});
    if (!removed.isEmpty()) edits.append({RunEdit::Kind::kRemoveTags, r.id, {}, removed});
  } else if (index.column() == kNotes) {
    const QString notes = value.toString();
    if (notes != QString::fromStdString(r.notes)) {
      edits.append({RunEdit::Kind::kNotes, r.id, notes, {}});
    }
  }
  if (!edits.isEmpty()) emit editRequested(edits);
  return false;
}

}  // namespace lattice::ui
