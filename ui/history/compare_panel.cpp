// ComparePanel: two tables built from the selected runs.
#include "history/compare_panel.h"

#include <QCheckBox>
#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPalette>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>

#include "history/run_text.h"
#include "lattice/storage/run_export.h"
#include "plan/text_format.h"

namespace lattice::ui {

namespace {

// A JSON value as a person reads it: strings without their quotes.
QString settingText(const std::optional<std::string>& json) {
  if (!json) return QObject::tr("(unset)");
  QString text = QString::fromStdString(*json);
  if (text.size() >= 2 && text.startsWith('"') && text.endsWith('"'))
    text = text.mid(1, text.size() - 2);
  return text;
}

QTableWidget* makeTable(QWidget* parent) {
  auto* t = new QTableWidget(parent);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->setSelectionMode(QAbstractItemView::ContiguousSelection);
  t->setAlternatingRowColors(true);
  t->setWordWrap(false);
  t->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  t->horizontalHeader()->setMinimumSectionSize(90);
  return t;
}

void setRunHeaders(QTableWidget* t, const std::vector<storage::RunInfo>& runs) {
  t->setColumnCount(static_cast<int>(runs.size()));
  for (int c = 0; c < static_cast<int>(runs.size()); ++c) {
    auto* h = new QTableWidgetItem(QString::fromStdString(runs[c].name));
    h->setToolTip(QObject::tr("run %1").arg(runs[c].id));
    t->setHorizontalHeaderItem(c, h);
  }
}

}  // namespace

ComparePanel::ComparePanel(QWidget* parent) : QWidget(parent) {
  title_ = new QLabel(this);
  QFont bold = title_->font();
  bold.setBold(true);
  title_->setFont(bold);
  curves_ = new QPushButton(tr("Compare curves"), this);
  curves_->setObjectName(QStringLiteral("historyCompareCurves"));
  curves_->setToolTip(tr("Open the selected runs in the Dashboard, their curves on one axis"));
  connect(curves_, &QPushButton::clicked, this, &ComparePanel::compareCurvesClicked);

  settingsTitle_ = new QLabel(this);
  showAll_ = new QCheckBox(tr("Show all settings"), this);
  showAll_->setObjectName(QStringLiteral("historyShowAllSettings"));
  connect(showAll_, &QCheckBox::toggled, this, [this] { rebuildSettings(); });
  settings_ = makeTable(this);
  settings_->setObjectName(QStringLiteral("historySettingsTable"));
  metrics_ = makeTable(this);
  metrics_->setObjectName(QStringLiteral("historyMetricsTable"));
  metrics_->setRowCount(kDurationRow + 1);
  const QStringList metricNames = {tr("Status"),   tr("Steps"),    tr("Loss"),
                                   tr("Val loss"), tr("Tokens/s"), tr("Duration")};
  metrics_->setVerticalHeaderLabels(metricNames);
  metrics_->verticalHeaderItem(kLossRow)->setToolTip(tr("Latest training lm loss"));
  metrics_->verticalHeaderItem(kValidationRow)->setToolTip(tr("Latest validation lm loss"));

  auto* header = new QHBoxLayout;
  header->addWidget(title_);
  header->addStretch();
  header->addWidget(curves_);

  auto* settingsHeader = new QHBoxLayout;
  settingsHeader->addWidget(settingsTitle_);
  settingsHeader->addStretch();
  settingsHeader->addWidget(showAll_);
  auto* settingsBox = new QVBoxLayout;
  settingsBox->addLayout(settingsHeader);
  settingsBox->addWidget(settings_);

  auto* metricsBox = new QVBoxLayout;
  auto* metricsTitle = new QLabel(tr("Final metrics"), this);
  metricsTitle->setMinimumHeight(showAll_->sizeHint().height());
  metricsBox->addWidget(metricsTitle);
  metricsBox->addWidget(metrics_);

  auto* tables = new QHBoxLayout;
  tables->addLayout(settingsBox, 3);
  tables->addLayout(metricsBox, 2);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 4, 0, 0);
  layout->addLayout(header);
  layout->addLayout(tables, 1);
}

bool ComparePanel::showAllSettings() const {
  return showAll_->isChecked();
}

void ComparePanel::setShowAllSettings(bool all) {
  showAll_->setChecked(all);
}

QStringList ComparePanel::shownSettings() const {
  QStringList paths;
  for (int r = 0; r < settings_->rowCount(); ++r) paths << settings_->verticalHeaderItem(r)->text();
  return paths;
}

void ComparePanel::setRuns(const std::vector<storage::RunInfo>& runs, double now) {
  runs_ = runs;
  title_->setText(
      tr("Comparing %1").arg(plural(static_cast<long long>(runs.size()), "run", "runs")));
  rebuildSettings();
  rebuildMetrics(now);
}

void ComparePanel::rebuildSettings() {
  std::string key = showAll_->isChecked() ? "all" : "diff";
  for (const storage::RunInfo& r : runs_) {
    key += '\x1f' + std::to_string(r.id) + '\x1f' + r.name + '\x1f' + r.config_json;
  }
  if (key == settingsKey_) return;
  settingsKey_ = key;

  storage::CompareOptions options;
  options.include_equal = showAll_->isChecked();
  const storage::ConfigComparison c = storage::compare_configs(runs_, options);
  std::size_t differing = 0;
  for (const storage::SettingDifference& d : c.differences) differing += d.differs ? 1 : 0;
  settingsTitle_->setText(
      differing == 0 ? tr("Settings: all %1 the same").arg(c.compared)
                     : tr("Settings that differ: %1 of %2").arg(differing).arg(c.compared));

  settings_->clearContents();
  setRunHeaders(settings_, runs_);
  settings_->setRowCount(static_cast<int>(c.differences.size()));
  QColor marked = palette().color(QPalette::Highlight);  // a tint that reads in both themes
  marked.setAlpha(60);
  for (int r = 0; r < static_cast<int>(c.differences.size()); ++r) {
    const storage::SettingDifference& d = c.differences[r];
    auto* head = new QTableWidgetItem(QString::fromStdString(d.setting));
    QFont font = head->font();
    font.setBold(d.differs && options.include_equal);  // with every key shown, mark the few
    head->setFont(font);
    settings_->setVerticalHeaderItem(r, head);
    for (int col = 0; col < static_cast<int>(d.values.size()); ++col) {
      auto* item = new QTableWidgetItem(settingText(d.values[col]));
      item->setToolTip(item->text());
      item->setFont(font);
      if (!d.values[col]) item->setForeground(palette().color(QPalette::PlaceholderText));
      if (d.differs && options.include_equal) item->setBackground(marked);
      settings_->setItem(r, col, item);
    }
  }
}

void ComparePanel::rebuildMetrics(double now) {
  setRunHeaders(metrics_, runs_);
  // Bold marks the best run of a row: the lowest loss, the highest throughput.
  auto best = [&](const char* key, bool lowest) {
    int at = -1;
    double value = 0;
    for (int c = 0; c < static_cast<int>(runs_.size()); ++c) {
      const std::optional<double> v = latestMetric(runs_[c], key);
      if (!v || std::isnan(*v)) continue;
      if (at < 0 || (lowest ? *v < value : *v > value)) at = c, value = *v;
    }
    return runs_.size() > 1 ? at : -1;
  };
  const int bestLoss = best(kLossKey, true), bestValidation = best(kValidationLossKey, true),
            bestTokens = best(kTokensKey, false);
  for (int c = 0; c < static_cast<int>(runs_.size()); ++c) {
    const storage::RunInfo& r = runs_[c];
    const std::optional<double> duration = runDurationSeconds(r, now);
    const QString cells[] = {runStatusText(r.status),
                             r.latest_step ? QString::number(*r.latest_step) : QStringLiteral("-"),
                             lossText(latestMetric(r, kLossKey)),
                             lossText(latestMetric(r, kValidationLossKey)),
                             tokensText(latestMetric(r, kTokensKey)),
                             duration ? durationText(*duration) : QStringLiteral("-")};
    for (int row = 0; row <= kDurationRow; ++row) {
      auto* item = new QTableWidgetItem(cells[row]);
      item->setTextAlignment(row == kStatusRow ? (Qt::AlignLeft | Qt::AlignVCenter)
                                               : (Qt::AlignRight | Qt::AlignVCenter));
      const bool isBest = (row == kLossRow && c == bestLoss) ||
                          (row == kValidationRow && c == bestValidation) ||
                          (row == kTokensRow && c == bestTokens);
      if (isBest) {
        QFont font = item->font();
        font.setBold(true);
        item->setFont(font);
      }
      if (row == kStatusRow && !r.error.empty()) item->setToolTip(QString::fromStdString(r.error));
      metrics_->setItem(row, c, item);
    }
  }
}

}  // namespace lattice::ui
