// RankBarsChart: the memory and timer-breakdown bars from the store's latest snapshots.
#include "dashboard/rank_bars_chart.h"

#include <unistd.h>

#include <qcustomplot.h>
#include <QLabel>
#include <QTextStream>
#include <QVBoxLayout>
#include <algorithm>
#include <iterator>

#include "dashboard/series_store.h"
#include "lattice/rank_health.h"

namespace lattice::ui {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kMiB = 1024.0 * 1024;
// Beyond this ratio of capacity to the largest bar the capacity is named, not drawn.
constexpr double kMaxCapacityRatio = 6;

const char* const kMemoryNames[] = {"weights", "grads", "optimizer state", "activations",
                                    "workspace"};
const char* const kPhaseNames[] = {"forward",        "backward",           "pipeline wait",
                                   "embedding comm", "data-parallel comm", "optimizer"};
static_assert(std::size(kPhaseNames) == kPhaseCount);
const QColor kMemoryColors[] = {{0x42, 0x85, 0xf4},
                                {0x7e, 0x57, 0xc2},
                                {0xfb, 0x8c, 0x00},
                                {0x26, 0xa6, 0x9a},
                                {0x9e, 0x9e, 0x9e}};
// The memory colours, with the embedding all-reduce's own (the timeline's) before DP comm.
const QColor kPhaseColors[] = {{0x42, 0x85, 0xf4}, {0x7e, 0x57, 0xc2}, {0xfb, 0x8c, 0x00},
                               {0xd8, 0x1b, 0x60}, {0x26, 0xa6, 0x9a}, {0x9e, 0x9e, 0x9e}};

QString bytesText(double b) {
  return b >= kGiB ? QString::number(b / kGiB, 'f', 1) + " GiB"
                   : QString::number(b / kMiB, 'f', 0) + " MiB";
}

}  // namespace

QColor memoryCategoryColor(int i) {
  return i >= 0 && i < static_cast<int>(std::size(kMemoryColors)) ? kMemoryColors[i] : QColor();
}

double RankBarsChart::physicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<double>(pages) * size : 0;
}

RankBarsChart::RankBarsChart(Kind kind, SeriesStore* store, QWidget* parent)
    : ChartCard(kind == Kind::kMemory ? tr("Memory per rank") : tr("Time per phase per rank"),
                parent),
      kind_(kind),
      store_(store) {
  QCustomPlot* p = plot();
  const bool memory = kind == Kind::kMemory;
  const int count = memory ? static_cast<int>(std::size(kMemoryNames)) : kPhaseCount;
  for (int i = 0; i < count; i++) {
    auto* bars = new QCPBars(p->xAxis, p->yAxis);
    bars->setName(memory ? tr(kMemoryNames[i]) : tr(kPhaseNames[i]));
    const QColor colour = memory ? kMemoryColors[i] : kPhaseColors[i];
    bars->setBrush(colour);
    bars->setPen(QPen(colour.darker(130)));
    bars->setWidth(0.6);
    bars->setAntialiased(false);
    if (!bars_.isEmpty()) bars->moveAbove(bars_.back());
    bars_ << bars;
  }
  if (kind == Kind::kMemory) {
    peak_ = p->addGraph();
    peak_->setName(tr("peak RSS"));
    peak_->setLineStyle(QCPGraph::lsNone);
    peak_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, 9));
  }
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, p->legend);
  p->legend->setVisible(true);
  p->legend->setWrap(3);
  p->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);  // 3 per row, items exist
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  p->legend->setFont(small);
  p->plotLayout()->setRowStretchFactor(0, 0.001);
  if (kind == Kind::kPhases) {
    findings_ = new QLabel(this);
    findings_->setWordWrap(true);
    findings_->setTextFormat(Qt::PlainText);
    static_cast<QVBoxLayout*>(layout())->addWidget(findings_);
  }
  applyPalette();
}

QString RankBarsChart::findingsText() const {
  return findings_ ? findings_->text() : QString();
}

void RankBarsChart::setRun(qint64 run) {
  run_ = run;
}

void RankBarsChart::refresh() {
  plot()->clearItems();
  ranks_.clear();
  values_ = QList<QList<double>>(bars_.size());  // one list per category
  capacity_ = 0;
  capacityText_.clear();
  if (kind_ == Kind::kMemory)
    refreshMemory();
  else
    refreshPhases();
  QCustomPlot* p = plot();
  QVector<double> keys;
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  const int every = std::max<int>(1, ranks_.size() / 12);
  for (int i = 0; i < ranks_.size(); i++) {
    keys << i;
    if (i % every == 0 || namedRanks_.contains(ranks_[i])) {
      QString tick =
          ranks_.size() <= 8 ? tr("rank %1").arg(ranks_[i]) : QString::number(ranks_[i]);
      if (namedRanks_.contains(ranks_[i])) tick += tr(" (slow)");
      ticker->addTick(i, tick);
    }
  }
  double most = 0;
  for (int i = 0; i < ranks_.size(); i++) {
    double total = 0;
    for (const QList<double>& category : values_) total += category[i];
    most = std::max(most, total);
  }
  for (int c = 0; c < bars_.size(); c++)
    bars_[c]->setData(keys, QVector<double>(values_[c].begin(), values_[c].end()), true);
  p->xAxis->setTicker(ticker);
  p->xAxis->setRange(-0.6, std::max<int>(ranks_.size(), 1) - 0.4);
  p->xAxis->setLabel(ranks_.size() > 8 ? tr("rank") : QString());
  p->yAxis->setLabel(unitName_);
  const double cap = capacity_ / unit_;
  const bool capOnScale = capacity_ > 0 && cap <= kMaxCapacityRatio * std::max(most, 1e-12);
  double top = most;
  if (peak_ && peak_->dataCount() > 0) {
    bool ok = false;
    top = std::max(top, peak_->getValueRange(ok).upper);
  }
  p->yAxis->setRange(0, std::max((capOnScale ? std::max(cap, top) : top) * 1.15, 1e-6));
  if (capacity_ > 0) {
    auto* label = new QCPItemText(p);
    label->position->setType(QCPItemPosition::ptAxisRectRatio);
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    label->setColor(QColor(0xc6, 0x28, 0x28));
    QColor behind = palette().color(QPalette::Base);
    behind.setAlphaF(0.85);
    label->setBrush(behind);
    label->setPadding(QMargins(3, 1, 3, 1));
    if (capOnScale) {
      auto* line = new QCPItemStraightLine(p);
      line->point1->setCoords(0, cap);
      line->point2->setCoords(1, cap);
      line->setPen(QPen(QColor(0xc6, 0x28, 0x28), 1.5, Qt::DashLine));
      label->position->setTypeY(QCPItemPosition::ptPlotCoords);
      label->position->setCoords(0.01, cap);
      label->setText(capacityText_);
    } else {
      label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
      label->position->setCoords(0.01, 0.02);
      label->setText(tr("%1, far above this scale").arg(capacityText_));
    }
  }
  if (ranks_.isEmpty()) {
    auto* none = new QCPItemText(p);
    none->position->setType(QCPItemPosition::ptAxisRectRatio);
    none->position->setCoords(0.5, 0.5);
    none->setColor(palette().color(QPalette::PlaceholderText));
    none->setText(kind_ == Kind::kMemory
                      ? tr("no memory samples yet")
                      : tr("no timer breakdown yet (logged every --log-interval steps)"));
  }
  if (step_ < 0)
    setSubtitle(QString());
  else if (kind_ == Kind::kMemory)
    setSubtitle(tr("step %1").arg(step_));
  else
    setSubtitle(tr("step %1, mean of the iterations since the previous log").arg(step_));
}

void RankBarsChart::refreshMemory() {
  const MemorySnapshot* m = run_ >= 0 ? store_->memory(run_) : nullptr;
  step_ = m ? m->step : -1;
  QVector<double> peakKeys, peakValues;
  double most = 0;
  if (m) {
    for (const storage::MemorySample& s : m->ranks)
      most =
          std::max<double>(most, std::max<double>(s.peak, s.weights + s.grads + s.optimizer_state +
                                                              s.activations + s.workspace));
  }
  unit_ = most >= kGiB ? kGiB : kMiB;
  unitName_ = most >= kGiB ? tr("GiB") : tr("MiB");
  if (m) {
    for (const storage::MemorySample& s : m->ranks) {
      ranks_ << s.rank;
      const double v[] = {double(s.weights), double(s.grads), double(s.optimizer_state),
                          double(s.activations), double(s.workspace)};
      for (size_t c = 0; c < std::size(v); c++) values_[c] << v[c] / unit_;
      if (s.peak > 0) peakKeys << ranks_.size() - 1, peakValues << s.peak / unit_;
    }
  }
  if (peak_) peak_->setData(peakKeys, peakValues, true);
  const RunMeta* meta = run_ >= 0 ? store_->meta(run_) : nullptr;
  if (meta && meta->cpu && meta->onThisHost) {
    capacity_ = physicalMemoryBytes();
    capacityText_ = tr("host RAM %1 (CPU run on this host)").arg(bytesText(capacity_));
  }
  bars_[4]->setName(meta && meta->cpu ? tr("workspace + comm buffers") : tr("workspace"));
}

void RankBarsChart::refreshPhases() {
  const PhaseSample* ph = run_ >= 0 ? store_->phases(run_) : nullptr;
  step_ = ph ? ph->step : -1;
  double most = 0;
  if (ph)
    for (const auto& v : ph->byRank) {
      double total = 0;
      for (double x : v) total += x;
      most = std::max(most, total);
    }
  // The engine logs seconds per iteration, the mean over its last log interval (as
  // --timing-log-level prints them), not the interval's sum.
  unit_ = most >= 1 ? 1 : 1e-3;
  unitName_ = most >= 1 ? tr("s per iteration") : tr("ms per iteration");
  namedRanks_.clear();
  const RunMeta* meta = run_ >= 0 ? store_->meta(run_) : nullptr;
  std::vector<RankFinding> found;
  if (ph) {
    for (auto it = ph->byRank.begin(); it != ph->byRank.end(); ++it) {
      ranks_ << it.key();
      for (int c = 0; c < kPhaseCount; c++) values_[c] << it.value()[c] / unit_;
    }
    if (meta && ph->byRank.size() > 1) {
      // kPhaseKeys' order: forward, backward, pipeline wait, embedding comm, dp comm, optimizer.
      std::vector<RankPhaseTimes> times;
      for (auto it = ph->byRank.begin(); it != ph->byRank.end(); ++it) {
        const std::array<double, kPhaseCount>& v = it.value();
        times.push_back({it.key(), v[0], v[1], v[2], v[4], v[5]});
      }
      found = find_slow_ranks(meta->tp, meta->pp, meta->dp, times);
      for (const RankFinding& f : found)
        if (f.kind == RankFinding::kSlowRank) namedRanks_ << f.rank;
    }
  }
  if (meta)
    for (RankFinding& f : absent_ranks(meta->error.toStdString())) found.push_back(std::move(f));
  QStringList said;
  for (const RankFinding& f : found) said << QString::fromStdString(f.sentence);
  if (findings_) {
    findings_->setText(said.isEmpty()
                           ? (ranks_.size() > 1 ? tr("No slow rank: every rank within %1x of "
                                                     "its pipeline stage's peers.")
                                                      .arg(kSlowRatio)
                                                : QString())
                           : said.join(QStringLiteral(".\n")) + QStringLiteral("."));
    findings_->setVisible(!findings_->text().isEmpty());
  }
}

void RankBarsChart::writeCsv(QTextStream& out) const {
  out << "rank";
  for (const QCPBars* b : bars_) out << ',' << b->name() << " (" << unitName_ << ')';
  out << '\n';
  for (int i = 0; i < ranks_.size(); i++) {
    out << ranks_[i];
    for (const QList<double>& category : values_)
      out << ',' << QString::number(category[i], 'g', 10);
    out << '\n';
  }
}

void RankBarsChart::applyPalette() {
  ChartCard::applyPalette();
  plot()->xAxis->grid()->setVisible(false);
  if (peak_) peak_->setPen(QPen(palette().color(QPalette::Text), 1.5));
}

}  // namespace lattice::ui
