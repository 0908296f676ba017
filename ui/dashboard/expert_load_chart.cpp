// ExpertLoadChart: each expert's share of its layer's routes, from the store's tails.
#include "dashboard/expert_load_chart.h"

#include <qcustomplot.h>
#include <QComboBox>
#include <QTextStream>
#include <cmath>
#include <map>

#include "dashboard/dashboard_feed.h"
#include "dashboard/series_store.h"
#include "lattice/run_record.h"

namespace lattice::ui {

namespace {

QString loadKey(int layer, int expert) {
  return QString::fromStdString(moe_load_key(layer, expert));
}

// Distinct hues for up to a few dozen experts (golden-ratio steps).
QColor expertColor(int e) {
  return QColor::fromHsvF(std::fmod(0.58 + 0.61803 * e, 1.0), 0.75, 0.8);
}

}  // namespace

ExpertLoadChart::ExpertLoadChart(SeriesStore* store, DashboardFeed* feed, QWidget* parent)
    : ChartCard(tr("Expert load (share of routes, %)"), parent), store_(store), feed_(feed) {
  setObjectName("expert-load");
  layerBox_ = new QComboBox(this);
  layerBox_->setObjectName("expert-load-layer");
  layerBox_->setToolTip(tr("The MoE layer whose experts are drawn"));
  addHeaderWidget(layerBox_);
  connect(layerBox_, &QComboBox::activated, this, [this](int index) {
    setLayer(layerBox_->itemData(index).toInt());
    plot()->replot();
  });
  QCustomPlot* p = plot();
  p->xAxis->setLabel(tr("step"));
  p->yAxis->setLabel(tr("% of the layer's routes"));
  even_ = new QCPItemStraightLine(p);
  even_->setVisible(false);
  p->legend->setVisible(true);
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  p->legend->setFont(small);
  applyPalette();
}

void ExpertLoadChart::setLayer(int layer) {
  layer_ = layer;
  refresh();
}

void ExpertLoadChart::refresh() {
  run_ = -1;
  layers_.clear();
  experts_ = 0;
  for (qint64 run : store_->runs())
    if (const RunMeta* m = store_->meta(run); m && m->numExperts > 0 && !m->moeLayers.isEmpty()) {
      run_ = run;
      layers_ = m->moeLayers;
      experts_ = m->numExperts;
      break;
    }
  if (!layers_.contains(layer_)) layer_ = layers_.isEmpty() ? -1 : layers_.front();
  if (layerBox_->count() != layers_.size()) {
    const QSignalBlocker block(layerBox_);
    layerBox_->clear();
    for (int l : layers_) layerBox_->addItem(tr("layer %1").arg(l), l);
  }
  layerBox_->setCurrentIndex(std::max(0, layerBox_->findData(layer_)));
  // The past of the chosen layer, read once (the live tail brings the rest).
  const qint64 last = run_ >= 0 ? store_->lastStep(run_) : -1;
  if (feed_ && last >= 0 && (asked_.run != run_ || asked_.layer != layer_)) {
    QStringList keys;
    for (int e = 0; e < experts_; e++) keys << loadKey(layer_, e);
    feed_->requestRange(kViewId, run_, keys, 0, last, kBuckets);
    asked_ = {run_, last, layer_};
  }

  const int experts = layer_ >= 0 ? experts_ : 0;
  QCustomPlot* p = plot();
  while (graphs_.size() > experts) p->removeGraph(graphs_.takeLast());
  while (graphs_.size() < experts) {
    QCPGraph* g = p->addGraph();
    const int e = graphs_.size();
    g->setName(tr("expert %1").arg(e));
    g->setPen(QPen(expertColor(e), 1.6));
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
    graphs_ << g;
  }
  // Each expert's routes by step (the read range's buckets at their last step, then the
  // tail after them), the layer's total by step, then each expert's share of it.
  std::vector<std::map<qint64, double>> routes(experts);
  std::map<qint64, double> total;
  for (int e = 0; e < experts; e++) {
    const QString key = loadKey(layer_, e);
    qint64 upTo = -1;
    if (const ViewSpans* v = store_->view(kViewId, run_, key)) {
      for (const Span& s : v->spans) routes[e][s.lastStep] = s.last;
      upTo = v->last;
    }
    if (const Tail* t = store_->tail(run_, key))
      for (int i = 0; i < t->steps.size(); i++)
        if (t->steps[i] > upTo) routes[e][t->steps[i]] = t->values[i];
    for (const auto& [step, value] : routes[e]) total[step] += value;
  }
  double top = 0;
  qint64 first = -1, lastStep = -1;
  for (int e = 0; e < experts; e++) {
    QVector<double> xs, ys;
    for (const auto& [step, value] : routes[e]) {
      const double sum = total[step];
      if (sum <= 0) continue;
      xs << step;
      ys << 100 * value / sum;
      top = std::max(top, ys.back());
    }
    if (!xs.isEmpty()) {
      first = first < 0 ? qint64(xs.front()) : std::min(first, qint64(xs.front()));
      lastStep = std::max(lastStep, qint64(xs.back()));
    }
    graphs_[e]->setData(xs, ys, true);
  }
  even_->setVisible(experts > 0);
  if (experts > 0) {
    even_->point1->setCoords(0, 100.0 / experts);
    even_->point2->setCoords(1, 100.0 / experts);
  }
  p->xAxis->setRange(first < 0 ? 0 : first - 0.5, lastStep < 0 ? 1 : lastStep + 0.5);
  p->yAxis->setRange(0, std::max(top, 100.0 / std::max(experts, 1)) * 1.15 + 1);
  setSubtitle(layer_ < 0 ? tr("no MoE load logged")
                         : tr("%1 experts; dashed: the even share %2 %")
                               .arg(experts)
                               .arg(100.0 / experts, 0, 'g', 3));
}

void ExpertLoadChart::writeCsv(QTextStream& out) const {
  out << "step";
  for (int e = 0; e < graphs_.size(); e++) out << ",expert " << e << " share %";
  out << "\n";
  if (graphs_.isEmpty()) return;
  const auto data = graphs_[0]->data();
  for (int i = 0; i < data->size(); i++) {
    out << (data->constBegin() + i)->key;
    for (QCPGraph* g : graphs_)
      out << "," << (i < g->data()->size() ? (g->data()->constBegin() + i)->value : qQNaN());
    out << "\n";
  }
}

void ExpertLoadChart::applyPalette() {
  ChartCard::applyPalette();
  if (!even_) return;
  QColor c = palette().color(QPalette::Text);
  c.setAlphaF(0.5);
  even_->setPen(QPen(c, 1, Qt::DashLine));
}

}  // namespace lattice::ui
