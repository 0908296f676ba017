// GroupPanel: grouping the runs, the groups table and the curve reads.
#include "history/group_panel.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <cmath>

#include "history/run_text.h"
#include "plan/text_format.h"

namespace lattice::ui {

namespace {

// Settings that say which run it is rather than how it was trained.
const QStringList kNotGroupable = {QStringLiteral("seed"), QStringLiteral("run-name")};

// "3.2871 ± 0.0123" over the values present, "-" when none.
QString meanStd(const std::vector<double>& values, int decimals) {
  if (values.empty()) return QStringLiteral("-");
  double sum = 0;
  for (double v : values) sum += v;
  const double mean = sum / static_cast<double>(values.size());
  if (values.size() < 2) return QString::number(mean, 'f', decimals);
  double squares = 0;
  for (double v : values) squares += (v - mean) * (v - mean);
  const double sd = std::sqrt(squares / static_cast<double>(values.size() - 1));
  return QStringLiteral("%1 ± %2").arg(mean, 0, 'f', decimals).arg(sd, 0, 'f', decimals);
}

}  // namespace

GroupPanel::GroupPanel(QWidget* parent) : QWidget(parent) {
  setting_ = new QComboBox(this);
  setting_->setObjectName(QStringLiteral("historyGroupBy"));
  setting_->setToolTip(
      tr("Group the runs by the value of this setting (the settings that "
         "differ between the runs; seeds are what a group averages over)"));
  setting_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  setting_->setMinimumContentsLength(16);
  setting_->addItem(tr("No grouping"), QString());
  metric_ = new QComboBox(this);
  metric_->setObjectName(QStringLiteral("historyGroupMetric"));
  metric_->addItem(tr("Loss"), QString::fromLatin1(kLossKey));
  metric_->addItem(tr("Validation loss"), QString::fromLatin1(kValidationLossKey));
  metric_->addItem(tr("Tokens/s"), QString::fromLatin1(kTokensKey));
  band_ = new QComboBox(this);
  band_->setObjectName(QStringLiteral("historyGroupBand"));
  band_->addItem(tr("Band: min–max"), static_cast<int>(BandKind::kMinMax));
  band_->addItem(tr("Band: ± 1 std"), static_cast<int>(BandKind::kStd));
  hint_ = new QLabel(this);
  hint_->setObjectName(QStringLiteral("historyGroupHint"));

  table_ = new QTableWidget(this);
  table_->setObjectName(QStringLiteral("historyGroupsTable"));
  table_->setColumnCount(5);
  table_->setHorizontalHeaderLabels(
      {tr("Value"), tr("Runs"), tr("Loss"), tr("Val loss"), tr("Tokens/s")});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setAlternatingRowColors(true);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setToolTip(tr("Final metrics: the mean ± sample standard deviation over the group"));
  chart_ = new GroupCurvesChart(this);

  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Group by"), this));
  controls->addWidget(setting_);
  controls->addWidget(metric_);
  controls->addWidget(band_);
  controls->addWidget(hint_, 1);
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(table_);
  split->addWidget(chart_);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 3);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 4, 0, 0);
  layout->addLayout(controls);
  layout->addWidget(split, 1);

  connect(setting_, &QComboBox::currentIndexChanged, this, [this] { regroup(); });
  connect(metric_, &QComboBox::currentIndexChanged, this, [this] { readCurves(); });
  connect(band_, &QComboBox::currentIndexChanged, this, [this] {
    chart_->setLines(chart_->lines(), metric_->currentText(),
                     static_cast<BandKind>(band_->currentData().toInt()));
  });
  connect(&reader_, &QFutureWatcher<SeriesRead>::finished, this, &GroupPanel::onCurvesRead);
  regroup();
}

void GroupPanel::setDatabase(const QString& path) {
  if (path == database_) return;
  database_ = path;
  curvesKey_.clear();
}

void GroupPanel::setRuns(std::vector<SweepRun> runs) {
  const quint64 signature = sweepSignature(runs);
  if (signature == signature_ && !runs_.empty()) return;
  signature_ = signature;
  runs_ = std::move(runs);
  updateChoices();
  regroup();
}

void GroupPanel::setGroupSetting(const QString& setting) {
  const int at = setting_->findData(setting);
  setting_->setCurrentIndex(std::max(at, 0));
}

QString GroupPanel::groupSetting() const {
  return setting_->currentData().toString();
}

QStringList GroupPanel::settingChoices() const {
  QStringList out;
  for (int i = 1; i < setting_->count(); ++i) out << setting_->itemData(i).toString();
  return out;
}

void GroupPanel::setCurveMetric(const QString& key) {
  metric_->setCurrentIndex(std::max(metric_->findData(key), 0));
}

void GroupPanel::setBand(BandKind band) {
  band_->setCurrentIndex(band_->findData(static_cast<int>(band)));
}

void GroupPanel::updateChoices() {
  const QStringList choices = differingSettings(runs_, kNotGroupable);
  const QString key = choices.join(QLatin1Char('\n'));
  if (key == choicesKey_) return;
  choicesKey_ = key;
  const QString chosen = groupSetting();
  const QSignalBlocker block(setting_);
  while (setting_->count() > 1) setting_->removeItem(1);
  for (const QString& c : choices) setting_->addItem(c, c);
  // A setting that no longer differs is still offered while chosen: the runs form one group.
  if (!chosen.isEmpty() && !choices.contains(chosen)) setting_->addItem(chosen, chosen);
  setting_->setCurrentIndex(std::max(setting_->findData(chosen), 0));
}

void GroupPanel::regroup() {
  groups_.clear();
  const QString setting = groupSetting();
  if (!setting.isEmpty()) {
    const std::string key = setting.toStdString();
    std::vector<std::optional<std::string>> values;
    values.reserve(runs_.size());
    for (const SweepRun& r : runs_) values.push_back(settingOf(r, key));
    for (const storage::SettingGroup& g : storage::group_by_value(values)) {
      Group group;
      group.value =
          g.value ? QString::fromStdString(storage::setting_text(*g.value)) : tr("(unset)");
      for (std::size_t i : g.members) group.runs << runs_[i].id;
      groups_ << group;
    }
  }
  const QString more =
      groups_.size() > kMaxCurves ? tr(" (curves of the first %1)").arg(kMaxCurves) : QString();
  hint_->setText(setting.isEmpty()
                     ? tr("%1: choose a setting to group them by")
                           .arg(plural(static_cast<long long>(runs_.size()), "run", "runs"))
                     : tr("%1 in %2")
                               .arg(plural(static_cast<long long>(runs_.size()), "run", "runs"),
                                    plural(groups_.size(), "group", "groups")) +
                           more);
  fillTable();
  readCurves();
}

void GroupPanel::fillTable() {
  QHash<qint64, const SweepRun*> byId;
  byId.reserve(static_cast<qsizetype>(runs_.size()));
  for (const SweepRun& r : runs_) byId.insert(r.id, &r);
  table_->setRowCount(static_cast<int>(groups_.size()));
  const QString setting = groupSetting();
  for (int row = 0; row < groups_.size(); ++row) {
    const Group& g = groups_[row];
    std::vector<double> loss, validation, tokens;
    for (qint64 id : g.runs) {
      const SweepRun* r = byId.value(id);
      if (r->loss && !std::isnan(*r->loss)) loss.push_back(*r->loss);
      if (r->validation && !std::isnan(*r->validation)) validation.push_back(*r->validation);
      if (r->tokens && !std::isnan(*r->tokens)) tokens.push_back(*r->tokens);
    }
    const QString cells[] = {setting + QLatin1Char('=') + g.value, QString::number(g.runs.size()),
                             meanStd(loss, 4), meanStd(validation, 4), meanStd(tokens, 0)};
    for (int c = 0; c < 5; ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c > 0) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      if (c == 0) item->setForeground(ChartCard::runColor(row, palette()));
      table_->setItem(row, c, item);
    }
  }
}

void GroupPanel::readCurves() {
  QList<qint64> ids;
  qint64 lastStep = -1;
  for (int i = 0; i < std::min<qsizetype>(groups_.size(), kMaxCurves); ++i) ids << groups_[i].runs;
  for (const SweepRun& r : runs_) lastStep = std::max(lastStep, r.lastStep);
  QString key = database_ + QLatin1Char('\n') + metric_->currentData().toString() +
                QLatin1Char('\n') + QString::number(signature_) + QLatin1Char('\n') +
                groupSetting();
  if (groups_.isEmpty() || database_.isEmpty()) {
    curvesKey_ = key;
    chart_->setLines({}, metric_->currentText(),
                     static_cast<BandKind>(band_->currentData().toInt()));
    emit curvesShown();
    return;
  }
  if (key == curvesKey_) return;
  curvesKey_ = key;
  if (reader_.isRunning()) {
    rereadWanted_ = true;  // the answer under way is for other runs or another metric
    return;
  }
  readKey_ = key;
  const QString database = database_;
  const std::string metric = metric_->currentData().toString().toStdString();
  reader_.setFuture(QtConcurrent::run([database, ids, metric, lastStep] {
    return readGroupSeries(database, ids, metric, lastStep);
  }));
}

void GroupPanel::onCurvesRead() {
  SeriesRead read = reader_.future().takeResult();
  if (rereadWanted_ || readKey_ != curvesKey_) {
    rereadWanted_ = false;
    curvesKey_.clear();
    readCurves();
    return;
  }
  QList<GroupLine> lines;
  const QString setting = groupSetting();
  for (int i = 0; i < std::min<qsizetype>(groups_.size(), kMaxCurves); ++i) {
    const Group& g = groups_[i];
    std::vector<std::vector<storage::StepValue>> members;
    for (qint64 id : g.runs) members.push_back(read.series.value(id));
    lines << GroupLine{
        QStringLiteral("%1=%2 (%3)").arg(setting, g.value, plural(g.runs.size(), "run", "runs")),
        storage::group_curve(members)};
  }
  chart_->setLines(lines, metric_->currentText(),
                   static_cast<BandKind>(band_->currentData().toInt()));
  if (!read.problem.isEmpty()) hint_->setText(tr("Cannot read the curves: %1").arg(read.problem));
  emit curvesShown();
}

}  // namespace lattice::ui
