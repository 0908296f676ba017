// One curve across resumes: the ancestors' points (readLineage) and their graphs
// (LineageOverlay).
#include "dashboard/lineage_series.h"

#include <qcustomplot.h>

#include <cmath>
#include <limits>

#include "dashboard/smoothing.h"
#include "lattice/storage/run_store.h"

namespace lattice::ui {

namespace {

// The points of `key` of one run over [first, last], down-sampled; empty when none.
Result<LineagePiece> readPiece(storage::RunStore& store, const storage::LineageLink& link,
                               const QString& key, qint64 first, qint64 last, int buckets,
                               bool discarded) {
  LineagePiece piece;
  piece.run = link.run_id;
  piece.name = QString::fromStdString(link.name);
  piece.discarded = discarded;
  if (first > last) return piece;
  Result<std::vector<storage::Bucket>> read =
      store.downsample(link.run_id, key.toStdString(), first, last, buckets);
  if (!read) return read.status();
  for (const storage::Bucket& b : *read) {
    piece.steps << b.last_step;
    piece.values << b.last;
  }
  return piece;
}

}  // namespace

Result<QHash<QString, LineageCurve>> readLineage(storage::RunStore& store, qint64 run,
                                                 const QStringList& keys, int buckets) {
  Result<std::vector<storage::LineageLink>> lineage = store.run_lineage(run);
  if (!lineage) return lineage.status();
  QHash<QString, LineageCurve> curves;
  if (lineage->size() < 2) return curves;
  for (const QString& key : keys) {
    LineageCurve curve;
    // Every run but the shown one (the last), which the chart draws from its own series.
    for (std::size_t i = 0; i + 1 < lineage->size(); i++) {
      const storage::LineageLink& link = (*lineage)[i];
      const qint64 first = link.resumed_at ? *link.resumed_at + 1 : 0;
      const qint64 kept = link.kept_until.value_or(0);
      const qint64 last = link.last_step.value_or(-1);
      Result<LineagePiece> solid = readPiece(store, link, key, first, kept, buckets, false);
      if (!solid) return solid.status();
      Result<LineagePiece> tail = readPiece(store, link, key, kept + 1, last, buckets, true);
      if (!tail) return tail.status();
      if (!solid->steps.isEmpty()) curve.pieces << *solid;
      if (!tail->steps.isEmpty()) curve.pieces << *tail;
      const storage::LineageLink& next = (*lineage)[i + 1];
      curve.resumes << LineageResume{kept, next.run_id, QString::fromStdString(next.name)};
    }
    if (!curve.pieces.isEmpty()) curves.insert(key, curve);
  }
  return curves;
}

void LineageOverlay::remove(Graphs& g) {
  for (QCPGraph* graph : {g.kept, g.tail, g.markers})
    if (graph) plot_->removeGraph(graph);
  for (QCPItemText* label : g.labels) plot_->removeItem(label);
  g = {};
}

void LineageOverlay::draw(qint64 run, int series, const LineageCurve& curve, QCPAxis* y,
                          const QColor& color, double weight, bool labelled,
                          const std::function<double(double)>& xOf) {
  const QPair<qint64, int> id{run, series};
  if (curve.isEmpty()) {
    if (graphs_.contains(id)) remove(graphs_[id]);
    graphs_.remove(id);
    return;
  }
  Graphs& g = graphs_[id];
  if (!g.kept) {
    g.kept = plot_->addGraph(plot_->xAxis, y);
    g.tail = plot_->addGraph(plot_->xAxis, y);
    g.markers = plot_->addGraph(plot_->xAxis, y);
    for (QCPGraph* graph : {g.kept, g.tail, g.markers}) graph->removeFromLegend();
  }
  for (QCPItemText* label : g.labels) plot_->removeItem(label);
  g.labels.clear();

  // Kept pieces follow one another without a gap: one line, smoothed as one series. Each
  // tail is its own line (smoothed alone), a NaN between tails breaks the line there.
  QVector<double> keptX, keptY, tailX, tailY;
  for (const LineagePiece& p : curve.pieces) {
    QVector<double> xs;
    for (qint64 s : p.steps) xs << xOf(static_cast<double>(s));
    if (p.discarded) {
      if (!tailX.isEmpty()) {
        tailX << tailX.back();
        tailY << std::numeric_limits<double>::quiet_NaN();
      }
      tailX << xs;
      tailY << emaSmooth(p.values, weight);
    } else {
      keptX << xs;
      keptY << p.values;
    }
  }
  g.kept->setData(keptX, emaSmooth(keptY, weight), true);
  g.tail->setData(tailX, tailY, true);
  g.kept->setPen(QPen(color, 1, Qt::SolidLine));
  QColor faded = color;
  faded.setAlphaF(0.35);
  g.tail->setPen(QPen(faded, 1, Qt::DashLine));

  // A marker on the kept line at each resume step, labelled with the run that resumed there.
  QVector<double> markX, markY;
  const QVector<double> smoothKept = emaSmooth(keptY, weight);
  for (const LineageResume& r : curve.resumes) {
    const double x = xOf(static_cast<double>(r.step));
    const qsizetype i = std::upper_bound(keptX.begin(), keptX.end(), x) - keptX.begin() - 1;
    if (i < 0) continue;
    markX << x;
    markY << smoothKept[i];
    if (!labelled) continue;
    auto* label = new QCPItemText(plot_);
    label->setClipToAxisRect(true);
    label->position->setAxes(plot_->xAxis, y);
    label->position->setCoords(x, smoothKept[i]);
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    label->setPadding(QMargins(4, 0, 0, 3));
    label->setText(QObject::tr("↺ %1 resumed at %2").arg(r.name).arg(r.step));
    label->setColor(color);
    QFont small = plot_->font();
    small.setPointSizeF(small.pointSizeF() * 0.8);
    label->setFont(small);
    label->setVisible(visible_);
    g.labels << label;
  }
  g.markers->setData(markX, markY, true);
  g.markers->setLineStyle(QCPGraph::lsNone);
  g.markers->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, color,
                                             plot_->palette().color(QPalette::Base), 8));
  for (QCPGraph* graph : {g.kept, g.tail, g.markers}) graph->setVisible(visible_);
}

void LineageOverlay::keepRuns(const QList<qint64>& runs) {
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (runs.contains(it.key().first)) {
      ++it;
      continue;
    }
    remove(*it);
    it = graphs_.erase(it);
  }
}

void LineageOverlay::setVisible(bool on) {
  visible_ = on;
  for (const Graphs& g : graphs_) {
    for (QCPGraph* graph : {g.kept, g.tail, g.markers}) graph->setVisible(on);
    for (QCPItemText* label : g.labels) label->setVisible(on);
  }
}

QCPGraph* LineageOverlay::keptGraph(qint64 run, int series) const {
  auto it = graphs_.find({run, series});
  return it == graphs_.end() ? nullptr : it->kept;
}

QCPGraph* LineageOverlay::tailGraph(qint64 run, int series) const {
  auto it = graphs_.find({run, series});
  return it == graphs_.end() ? nullptr : it->tail;
}

QCPGraph* LineageOverlay::markerGraph(qint64 run, int series) const {
  auto it = graphs_.find({run, series});
  return it == graphs_.end() ? nullptr : it->markers;
}

QList<QCPGraph*> LineageOverlay::graphs() const {
  QList<QCPGraph*> all;
  for (const Graphs& g : graphs_) all << g.kept << g.tail << g.markers;
  return all;
}

QStringList LineageOverlay::labels() const {
  QStringList texts;
  for (const Graphs& g : graphs_)
    for (QCPItemText* label : g.labels) texts << label->text();
  return texts;
}

}  // namespace lattice::ui
