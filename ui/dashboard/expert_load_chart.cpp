// ExpertLoadChart: each expert's share of its layer's routes, from the store's tails.
#include "dashboard/expert_load_chart.h"

#include <qcustomplot.h>
#include <QComboBox>
#include <QTextStream>
#include <cmath>
#include <map>

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

ExpertLoadChart::ExpertLoadChart(SeriesStore* store, QWidget* parent)
    : ChartCard(tr("Expert load (share of routes, %)"), parent), store_(store) {
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
  // The first shown run with load rows, and its layers and experts.
  run_ = -1;
  layers_.clear();
  for (qint64 run : store_->runs()) {
    for (const QString& key : store_->keys(run)) {
      int layer = -1, expert = -1;
      if (!parse_moe_load_key(key.toStdString(), &layer, &expert)) continue;
      layers_[layer] = std::max(layers_.value(layer), expert + 1);
    }
    if (!layers_.isEmpty()) {
      run_ = run;
      break;
    }
  }
  if (!layers_.contains(layer_)) layer_ = layers_.isEmpty() ? -1 : layers_.firstKey();
  if (layerBox_->count() != layers_.size()) {
    const QSignalBlocker block(layerBox_);
    layerBox_->clear();
    for (int l : layers_.keys()) layerBox_->addItem(tr("layer %1").arg(l), l);
  }
  layerBox_->setCurrentIndex(std::max(0, layerBox_->findData(layer_)));

  const int experts = layer_ >= 0 ? layers_.value(layer_) : 0;
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
  // The layer's routes at each step, then each expert's share of them.
  std::map<qint64, double> total;
  for (int e = 0; e < experts; e++)
    if (const Tail* t = store_->tail(run_, loadKey(layer_, e)))
      for (int i = 0; i < t->steps.size(); i++) total[t->steps[i]] += t->values[i];
  double top = 0;
  qint64 first = -1, last = -1;
  for (int e = 0; e < experts; e++) {
    QVector<double> xs, ys;
    if (const Tail* t = store_->tail(run_, loadKey(layer_, e)))
      for (int i = 0; i < t->steps.size(); i++) {
        const double sum = total[t->steps[i]];
        if (sum <= 0) continue;
        xs << t->steps[i];
        ys << 100 * t->values[i] / sum;
        top = std::max(top, ys.back());
      }
    if (!xs.isEmpty()) {
      first = first < 0 ? qint64(xs.front()) : std::min(first, qint64(xs.front()));
      last = std::max(last, qint64(xs.back()));
    }
    graphs_[e]->setData(xs, ys, true);
  }
  even_->setVisible(experts > 0);
  if (experts > 0) {
    even_->point1->setCoords(0, 100.0 / experts);
    even_->point2->setCoords(1, 100.0 / experts);
  }
  p->xAxis->setRange(first < 0 ? 0 : first - 0.5, last < 0 ? 1 : last + 0.5);
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
