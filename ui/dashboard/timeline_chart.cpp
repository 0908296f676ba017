// TimelineChart: lanes, boxes, labels and a legend of the kinds present.
#include "dashboard/timeline_chart.h"

#include <qcustomplot.h>
#include <QFontMetrics>
#include <QTextStream>
#include <algorithm>
#include <map>

#include "dashboard/series_store.h"

namespace lattice::ui {

TimelineLayout layoutTimeline(const std::vector<storage::TimelineEvent>& events) {
  TimelineLayout out;
  std::map<int, int> lowestRank;  // stage -> rank
  for (const storage::TimelineEvent& e : events) {
    auto [it, fresh] = lowestRank.emplace(e.stage, e.rank);
    if (!fresh) it->second = std::min(it->second, e.rank);
  }
  std::map<int, int> laneOf;
  for (const auto& [stage, rank] : lowestRank) {
    laneOf[stage] = out.laneStage.size();
    out.laneStage << stage;
    out.laneRank << rank;
  }
  bool first = true;
  for (const storage::TimelineEvent& e : events) {
    if (lowestRank[e.stage] != e.rank) continue;
    TimelineBox b{laneOf[e.stage], e.rank,
                  e.microbatch,    QString::fromStdString(e.kind),
                  e.start_s,       std::max(e.end_s, e.start_s)};
    out.start = first ? b.start : std::min(out.start, b.start);
    out.end = first ? b.end : std::max(out.end, b.end);
    first = false;
    out.boxes << b;
  }
  std::stable_sort(out.boxes.begin(), out.boxes.end(),
                   [](const TimelineBox& a, const TimelineBox& b) {
                     return a.lane != b.lane ? a.lane < b.lane : a.start < b.start;
                   });
  return out;
}

QColor TimelineChart::kindColor(const QString& kind) {
  if (kind == "forward") return {0x42, 0x85, 0xf4};
  if (kind == "backward") return {0x2e, 0xa0, 0x43};
  if (kind == "pipeline wait") return {0xbd, 0xbd, 0xbd};
  if (kind == "embedding comm") return {0xd8, 0x1b, 0x60};
  if (kind == "dp comm") return {0x9c, 0x27, 0xb0};
  if (kind == "optimizer") return {0xf5, 0x7c, 0x00};
  return {0x79, 0x55, 0x48};
}

TimelineChart::TimelineChart(SeriesStore* store, QWidget* parent)
    : ChartCard(tr("Pipeline timeline"), parent), store_(store) {
  QCustomPlot* p = plot();
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  p->axisRect()->setRangeDrag(Qt::Horizontal);
  p->axisRect()->setRangeZoom(Qt::Horizontal);
  p->yAxis->setRangeReversed(true);
  p->yAxis->grid()->setVisible(false);
  p->xAxis->setLabel(tr("milliseconds from the start of the iteration"));
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, p->legend);
  p->legend->setVisible(true);
  p->legend->setWrap(6);
  p->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  p->legend->setFont(small);
  p->plotLayout()->setRowStretchFactor(0, 0.001);
  // After the layout, before drawing: the pixel widths of the boxes are known then.
  connect(p, &QCustomPlot::afterLayout, this, [this] { updateLabels(); });
  applyPalette();
}

void TimelineChart::setRun(qint64 run) {
  run_ = run;
}

void TimelineChart::refresh() {
  QCustomPlot* p = plot();
  p->clearItems();
  p->clearPlottables();
  rects_.clear();
  labels_.clear();
  const TimelineSnapshot* t = run_ >= 0 ? store_->timeline(run_) : nullptr;
  step_ = t ? t->step : -1;
  layout_ = t ? layoutTimeline(t->events) : TimelineLayout{};
  // Milliseconds on x: pipeline boxes of tiny models last microseconds to milliseconds.
  constexpr double kMs = 1e3;
  QSharedPointer<QCPAxisTickerText> lanes(new QCPAxisTickerText);
  for (int i = 0; i < layout_.laneStage.size(); i++)
    lanes->addTick(i, tr("stage %1 · rank %2").arg(layout_.laneStage[i]).arg(layout_.laneRank[i]));
  p->yAxis->setTicker(lanes);
  p->yAxis->setRange(-0.6, std::max<int>(layout_.laneStage.size(), 1) - 0.4);
  QStringList kinds;
  for (const TimelineBox& b : layout_.boxes) {
    auto* r = new QCPItemRect(p);
    r->topLeft->setCoords(b.start * kMs, b.lane - 0.36);
    r->bottomRight->setCoords(b.end * kMs, b.lane + 0.36);
    const QColor c = kindColor(b.kind);
    QBrush brush(c, b.kind == "pipeline wait" ? Qt::BDiagPattern : Qt::SolidPattern);
    r->setBrush(brush);
    r->setPen(QPen(c.darker(140), 0.8));
    r->setClipToAxisRect(true);
    rects_ << r;
    QCPItemText* label = nullptr;
    if (b.kind == "forward" || b.kind == "backward") {
      label = new QCPItemText(p);
      label->position->setCoords((b.start + b.end) / 2 * kMs, b.lane);
      label->setText(QString::number(b.microbatch));
      label->setColor(Qt::white);
      label->setClipToAxisRect(true);
    }
    labels_ << label;
    if (!kinds.contains(b.kind)) kinds << b.kind;
  }
  const QStringList order = {"forward",        "backward", "pipeline wait",
                             "embedding comm", "dp comm",  "optimizer"};
  std::stable_sort(kinds.begin(), kinds.end(), [&](const QString& a, const QString& b) {
    const auto rank = [&](const QString& k) { return order.contains(k) ? order.indexOf(k) : 99; };
    return rank(a) < rank(b);
  });
  for (const QString& k : kinds) {  // legend entries: empty bars with the kind's brush
    auto* swatch = new QCPBars(p->xAxis, p->yAxis);
    swatch->setName(k);
    const QColor c = kindColor(k);
    swatch->setBrush(QBrush(c, k == "pipeline wait" ? Qt::BDiagPattern : Qt::SolidPattern));
    swatch->setPen(QPen(c.darker(140)));
  }
  const double span = std::max(layout_.end - layout_.start, 1e-9) * kMs;
  p->xAxis->setRange(layout_.start * kMs - span * 0.01, layout_.end * kMs + span * 0.01);
  if (layout_.boxes.isEmpty()) {
    auto* none = new QCPItemText(p);
    none->position->setType(QCPItemPosition::ptAxisRectRatio);
    none->position->setCoords(0.5, 0.5);
    none->setColor(palette().color(QPalette::PlaceholderText));
    none->setText(tr("no pipeline timeline recorded for this run"));
  }
  setSubtitle(step_ >= 0 ? tr("iteration %1 · %2 events · %3 ms")
                               .arg(step_)
                               .arg(layout_.boxes.size())
                               .arg((layout_.end - layout_.start) * kMs, 0, 'f', 2)
                         : QString());
  updateLabels();
}

void TimelineChart::updateLabels() {
  const QCPAxis* x = plot()->xAxis;
  const QFontMetrics fm(font());
  for (int i = 0; i < rects_.size(); i++) {
    if (!labels_[i]) continue;
    const double w = x->coordToPixel(rects_[i]->bottomRight->coords().x()) -
                     x->coordToPixel(rects_[i]->topLeft->coords().x());
    labels_[i]->setVisible(w >= fm.horizontalAdvance(labels_[i]->text()) + 6);
  }
}

int TimelineChart::visibleLabelCount() const {
  return static_cast<int>(std::count_if(labels_.begin(), labels_.end(),
                                        [](QCPItemText* t) { return t && t->visible(); }));
}

void TimelineChart::writeCsv(QTextStream& out) const {
  out << "step,stage,rank,kind,microbatch,start_s,end_s\n";
  for (const TimelineBox& b : layout_.boxes) {
    out << step_ << ',' << layout_.laneStage[b.lane] << ',' << b.rank << ',' << b.kind << ','
        << b.microbatch << ',' << QString::number(b.start, 'g', 17) << ','
        << QString::number(b.end, 'g', 17) << '\n';
  }
}

void TimelineChart::applyPalette() {
  ChartCard::applyPalette();
  plot()->yAxis->grid()->setVisible(false);
}

}  // namespace lattice::ui
