// EstimateChart and BubbleChart: the planner's numbers beside the run's measurements, from the
// store's EstimateSnapshot (lattice/run_estimate.h computes both comparisons).
#include "dashboard/estimate_charts.h"

#include <qcustomplot.h>
#include <QLabel>
#include <QTextStream>
#include <QVBoxLayout>
#include <algorithm>

#include "dashboard/rank_bars_chart.h"
#include "dashboard/series_store.h"

namespace lattice::ui {

namespace {

constexpr double kMiB = 1024.0 * 1024;
constexpr double kGiB = 1024.0 * kMiB;
constexpr double kBarWidth = 0.36;

QLabel* addNote(QWidget* card) {
  auto* note = new QLabel(card);
  note->setWordWrap(true);
  note->setTextFormat(Qt::PlainText);
  static_cast<QVBoxLayout*>(card->layout())->addWidget(note);
  return note;
}

void placeholder(QCustomPlot* p, const QString& text) {
  auto* none = new QCPItemText(p);
  none->position->setType(QCPItemPosition::ptAxisRectRatio);
  none->position->setCoords(0.5, 0.5);
  none->setColor(p->palette().color(QPalette::PlaceholderText));
  none->setText(text);
}

}  // namespace

EstimateChart::EstimateChart(SeriesStore* store, QWidget* parent)
    : ChartCard(tr("Memory: estimate and measurement per rank"), parent), store_(store) {
  QCustomPlot* p = plot();
  for (int k = 0; k < kPlannedCategories; k++) {
    const QColor colour = memoryCategoryColor(k);
    auto* planned = new QCPBars(p->xAxis, p->yAxis);
    QColor pale = colour;
    pale.setAlphaF(0.3);
    planned->setBrush(QBrush(pale));
    planned->setPen(QPen(colour, 1, Qt::DashLine));
    planned->setWidth(kBarWidth);
    planned->setAntialiased(false);
    if (!planned_.isEmpty()) planned->moveAbove(planned_.back());
    planned_ << planned;
    auto* measured = new QCPBars(p->xAxis, p->yAxis);
    measured->setName(tr(planned_category_name(k)));
    measured->setBrush(colour);
    measured->setPen(QPen(colour.darker(130)));
    measured->setWidth(kBarWidth);
    measured->setAntialiased(false);
    if (!measured_.isEmpty()) measured->moveAbove(measured_.back());
    measured_ << measured;
  }
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, p->legend);
  p->legend->setVisible(true);
  p->legend->setWrap(4);
  p->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  for (QCPBars* b : planned_) p->legend->removeItem(p->legend->itemWithPlottable(b));
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  p->legend->setFont(small);
  p->plotLayout()->setRowStretchFactor(0, 0.001);
  note_ = addNote(this);
  applyPalette();
}

QString EstimateChart::verdict() const {
  return note_->text();
}

void EstimateChart::refresh() {
  QCustomPlot* p = plot();
  p->clearItems();
  rows_.clear();
  gaps_.clear();
  const EstimateSnapshot* e = run_ >= 0 ? store_->estimate(run_) : nullptr;
  QString note;
  if (e && e->known && !e->plan) {
    note = tr("No estimate: %1.").arg(e->problem);
  } else if (e && e->plan) {
    std::vector<MeasuredMemory> measured;
    for (const storage::StepMemory& m : e->peaks)
      measured.push_back(
          {m.sample.rank,
           m.step,
           {m.sample.weights, m.sample.grads, m.sample.optimizer_state, m.sample.activations,
          m.sample.workspace}});
    const std::vector<RankMemoryCheck> checks = check_memory(*e->plan, measured);
    for (const RankMemoryCheck& c : checks) {
      Row r{c.rank, c.pp};
      for (int k = 0; k < kPlannedCategories; k++) {
        r.planned[k] = c.categories[k].planned;
        r.measured[k] = c.categories[k].measured;
      }
      rows_ << r;
    }
    for (const std::string& g : memory_gap_sentences(checks)) gaps_ << QString::fromStdString(g);
    if (rows_.isEmpty())
      note =
          tr("No memory samples yet: ranks report memory after iteration 1 and every "
             "--log-interval steps.");
    else if (gaps_.isEmpty())
      note = tr("Estimate and measurement agree: no category is off by both 10 % and 4 MiB.");
    else
      note = gaps_.join(QStringLiteral("; ")) + QStringLiteral(".");
  }
  note_->setText(note);
  double most = 0;
  for (const Row& r : rows_) {
    double planned = 0, measured = 0;
    for (int k = 0; k < kPlannedCategories; k++) planned += r.planned[k], measured += r.measured[k];
    most = std::max({most, planned, measured});
  }
  const double unit = most >= kGiB ? kGiB : kMiB;
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  const int every = std::max<int>(1, rows_.size() / 8);
  for (int k = 0; k < kPlannedCategories; k++) {
    QVector<double> left, right, planned, measured;
    for (int i = 0; i < rows_.size(); i++) {
      left << i - kBarWidth / 2 - 0.02;
      right << i + kBarWidth / 2 + 0.02;
      planned << rows_[i].planned[k] / unit;
      measured << rows_[i].measured[k] / unit;
    }
    planned_[k]->setData(left, planned, true);
    measured_[k]->setData(right, measured, true);
  }
  for (int i = 0; i < rows_.size(); i += every)
    ticker->addTick(i,
                    tr("rank %1 · pp %2\nplanned | measured").arg(rows_[i].rank).arg(rows_[i].pp));
  p->xAxis->setTicker(ticker);
  p->xAxis->setRange(-0.6, std::max<int>(rows_.size(), 1) - 0.4);
  p->yAxis->setLabel(unit == kGiB ? tr("GiB") : tr("MiB"));
  p->yAxis->setRange(0, std::max(most / unit * 1.15, 1e-6));
  if (rows_.isEmpty())
    placeholder(p, e && e->known && !e->plan ? tr("no estimate") : tr("no memory samples yet"));
  const qint64 step =
      e && !e->peaks.empty()
          ? std::max_element(e->peaks.begin(), e->peaks.end(),
                             [](const auto& a, const auto& b) { return a.step < b.step; })
                ->step
          : -1;
  setSubtitle(step < 0 ? QString() : tr("measured: peak of the samples up to step %1").arg(step));
}

void EstimateChart::writeCsv(QTextStream& out) const {
  out << "rank,pp,category,planned (bytes),measured peak (bytes)\n";
  for (const Row& r : rows_)
    for (int k = 0; k < kPlannedCategories; k++)
      out << r.rank << ',' << r.pp << ',' << planned_category_name(k) << ','
          << QString::number(r.planned[k], 'f', 0) << ',' << QString::number(r.measured[k], 'f', 0)
          << '\n';
}

void EstimateChart::applyPalette() {
  ChartCard::applyPalette();
  plot()->xAxis->grid()->setVisible(false);
}

BubbleChart::BubbleChart(SeriesStore* store, QWidget* parent)
    : ChartCard(tr("Pipeline bubble per stage: measured and analytic"), parent), store_(store) {
  QCustomPlot* p = plot();
  analyticLine_ = p->addGraph();
  analyticLine_->setName(tr("analytic (p−1)/(v·m)"));
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, p->legend);
  p->legend->setVisible(true);
  p->legend->setWrap(4);
  p->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  p->legend->setFont(small);
  p->plotLayout()->setRowStretchFactor(0, 0.001);
  p->xAxis->setLabel(tr("iteration"));
  p->yAxis->setLabel(tr("wait / compute (%)"));
  note_ = addNote(this);
  applyPalette();
}

QString BubbleChart::verdict() const {
  return note_->text();
}

QList<QPointF> BubbleChart::shares(int pp) const {
  QList<QPointF> out;
  if (pp < 0 || pp >= stages_.size()) return out;
  for (auto it = stages_[pp]->data()->constBegin(); it != stages_[pp]->data()->constEnd(); ++it)
    out << QPointF(it->key, it->value / 100);
  return out;
}

void BubbleChart::refresh() {
  QCustomPlot* p = plot();
  p->clearItems();
  const EstimateSnapshot* e = run_ >= 0 ? store_->estimate(run_) : nullptr;
  const std::vector<PipelineWait> none;
  const std::vector<PipelineWait>& waits = e ? e->waits : none;
  const int stages = waits.empty() ? 0 : static_cast<int>(waits.back().stages.size());
  while (stages_.size() > stages) p->removeGraph(stages_.takeLast());
  while (stages_.size() < stages) {
    QCPGraph* g = p->addGraph();
    const int pp = stages_.size();
    g->setName(tr("pp %1").arg(pp));
    const QColor colour = QColor::fromHsv((pp * 67 + 210) % 360, 170, 200);
    g->setPen(QPen(colour, 1.5));
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, colour, 5));
    stages_ << g;
  }
  double top = 0, first = 0, last = 1;
  for (int s = 0; s < stages; s++) {
    QVector<double> x, y;
    for (const PipelineWait& w : waits) {
      if (s >= static_cast<int>(w.stages.size())) continue;
      x << static_cast<double>(w.step);
      y << w.stages[s].share() * 100;
      top = std::max(top, y.back());
    }
    stages_[s]->setData(x, y, true);
  }
  analytic_ = waits.empty() ? 0 : waits.back().analytic;
  if (!waits.empty()) {
    first = static_cast<double>(waits.front().step);
    last = std::max(static_cast<double>(waits.back().step), first + 1);
  }
  analyticLine_->setData({first, last}, {analytic_ * 100, analytic_ * 100}, true);
  top = std::max(top, analytic_ * 100);
  const double pad = (last - first) * 0.03;
  p->xAxis->setRange(first - pad, last + pad);
  p->yAxis->setRange(0, std::max(top * 1.15, 1.0));
  QString note;
  const RunMeta* meta = run_ >= 0 ? store_->meta(run_) : nullptr;
  if (!waits.empty()) {
    const PipelineWait& w = waits.back();
    QStringList parts;
    for (const StageWait& s : w.stages)
      parts << tr("pp %1 %2 %").arg(s.pp).arg(s.share() * 100, 0, 'f', 1);
    note = tr("Iteration %1: %2 of compute spent waiting; analytic (p−1)/(v·m) = %3/(%4·%5) = "
              "%6 %. Wait: the pipeline's span less the stage's forward and backward time.")
               .arg(w.step)
               .arg(parts.join(QStringLiteral(", ")))
               .arg(w.pp - 1)
               .arg(w.vpp)
               .arg(w.micro_batches)
               .arg(w.analytic * 100, 0, 'f', 1);
  } else if (e && e->known && e->plan && e->plan->layout.pp <= 1) {
    note = tr("No pipeline: the run has one stage, so nothing waits on a neighbour.");
  }
  note_->setText(note);
  if (waits.empty())
    placeholder(p, e && e->known && e->plan && e->plan->layout.pp <= 1
                       ? tr("no pipeline (one stage)")
                       : tr("no pipeline timeline yet"));
  setSubtitle(meta && !waits.empty() ? tr("%1 recorded iterations").arg(waits.size()) : QString());
}

void BubbleChart::writeCsv(QTextStream& out) const {
  out << "step,pp,wait / compute,analytic\n";
  for (int s = 0; s < stages_.size(); s++)
    for (const QPointF& x : shares(s))
      out << qint64(x.x()) << ',' << s << ',' << QString::number(x.y(), 'g', 6) << ','
          << QString::number(analytic_, 'g', 6) << '\n';
}

void BubbleChart::applyPalette() {
  ChartCard::applyPalette();
  analyticLine_->setPen(QPen(palette().color(QPalette::Text), 1.5, Qt::DashLine));
}

}  // namespace lattice::ui
