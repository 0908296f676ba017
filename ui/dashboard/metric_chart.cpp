// MetricChart: assembling plotted samples from the store, range reads, axes and crosshair.
#include "dashboard/metric_chart.h"

#include <qcustomplot.h>
#include <QFontMetrics>
#include <QMouseEvent>
#include <QTextStream>
#include <algorithm>
#include <cmath>

#include "dashboard/dashboard_feed.h"
#include "dashboard/smoothing.h"

namespace lattice::ui {

namespace {

QString number(double v) {
  if (std::isnan(v)) return QStringLiteral("NaN");
  if (v != 0 && (std::fabs(v) < 1e-3 || std::fabs(v) >= 1e6)) return QString::number(v, 'e', 3);
  return QString::number(v, 'g', 5);
}

QString humanCount(double v) {
  if (v >= 1e9) return QString::number(v / 1e9, 'f', 2) + " G";
  if (v >= 1e6) return QString::number(v / 1e6, 'f', 2) + " M";
  if (v >= 1e3) return QString::number(v / 1e3, 'f', 1) + " K";
  return QString::number(v, 'f', 0);
}

// Value range of a graph over a key range, merged into *range.
void mergeValueRange(const QCPGraph* g, const QCPRange& keys, QCP::SignDomain sign, bool* found,
                     QCPRange* range) {
  if (!g->visible() || g->data()->isEmpty()) return;
  bool ok = false;
  const QCPRange r = g->getValueRange(ok, sign, keys);
  if (!ok) return;
  *range = *found ? QCPRange(std::min(range->lower, r.lower), std::max(range->upper, r.upper)) : r;
  *found = true;
}

}  // namespace

MetricChart::MetricChart(int viewId, const QString& title, const QList<ChartSeriesSpec>& series,
                         SeriesStore* store, DashboardFeed* feed, QWidget* parent)
    : ChartCard(title, parent),
      viewId_(viewId),
      specs_(series),
      store_(store),
      feed_(feed),
      lineage_(plot()) {
  QCustomPlot* p = plot();
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  p->axisRect()->setRangeDrag(Qt::Horizontal);
  p->axisRect()->setRangeZoom(Qt::Horizontal);
  p->setNoAntialiasingOnDrag(true);
  p->legend->setVisible(true);
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  p->legend->setFont(small);
  p->legend->setIconSize(16, 8);
  p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  p->xAxis->setLabel(tr("step"));
  for (const ChartSeriesSpec& s : specs_) {
    if (!s.rightAxis) continue;
    p->yAxis2->setVisible(true);
    p->yAxis2->setLabel(s.label + tr(" (dotted)"));
    p->yAxis->setLabel(specs_.value(0).label);
  }
  // QCustomPlot's own top layer; buffered, so the crosshair replots it alone.
  p->layer("overlay")->setMode(QCPLayer::lmBuffered);
  crossLine_ = new QCPItemStraightLine(p);
  crossLine_->setLayer("overlay");
  crossLine_->setVisible(false);
  crossText_ = new QCPItemText(p);
  crossText_->setLayer("overlay");
  crossText_->setVisible(false);
  crossText_->setClipToAxisRect(false);
  crossText_->position->setType(QCPItemPosition::ptAbsolute);
  crossText_->setPadding(QMargins(5, 3, 5, 3));
  crossText_->setTextAlignment(Qt::AlignLeft);
  crossText_->setFont(small);
  p->setMouseTracking(true);
  p->installEventFilter(this);
  connect(p, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
    if (!plot()->axisRect()->rect().contains(e->pos())) {
      crossLine_->setVisible(false);
      crossText_->setVisible(false);
      plot()->layer("overlay")->replot();
      return;
    }
    moveCrosshair(plot()->xAxis->pixelToCoord(e->pos().x()));
  });
  connect(p, &QCustomPlot::mouseDoubleClick, this, [this] {
    setFollow(true);
    emit replotWanted();
  });
  connect(p->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          &MetricChart::onXRangeChanged);
  refine_.setSingleShot(true);
  refine_.setInterval(80);
  connect(&refine_, &QTimer::timeout, this, [this] {
    refresh();
    emit replotWanted();
  });
  applyPalette();
}

QStringList MetricChart::keys() const {
  QStringList all;
  for (const ChartSeriesSpec& s : specs_) all << s.key;
  return all;
}

void MetricChart::setLineageVisible(bool on) {
  lineage_.setVisible(on);
}

void MetricChart::setSmoothing(double weight) {
  weight_ = weight;
}

void MetricChart::setLogScale(bool on) {
  log_ = on;
  for (QCPAxis* axis : {plot()->yAxis, plot()->yAxis2}) {
    axis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (on) {
      axis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
      axis->setNumberFormat("gb");
    } else {
      axis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
      axis->setNumberFormat("g");
    }
  }
}

void MetricChart::setXAxisMode(XAxisMode mode) {
  xMode_ = mode;
  QCPAxis* x = plot()->xAxis;
  if (mode == XAxisMode::kTime) {
    QSharedPointer<QCPAxisTickerTime> ticker(new QCPAxisTickerTime);
    ticker->setTimeFormat("%h:%m:%s");
    x->setTicker(ticker);
    x->setLabel(tr("time since the run started (h:m:s)"));
  } else {
    x->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    x->setNumberFormat(mode == XAxisMode::kTokens ? "gb" : "g");
    x->setLabel(mode == XAxisMode::kTokens ? tr("tokens (consumed samples × sequence length)")
                                           : tr("step"));
  }
  // Views were read for step ranges; the x mapping changed, so follow again.
  setFollow(true);
}

void MetricChart::setFollow(bool on) {
  if (following_ == on) return;
  following_ = on;
  setSubtitle(on ? QString() : tr("zoomed · double-click to follow"));
  emit followChanged(on);
}

double MetricChart::xOf(qint64 run, double step) const {
  switch (xMode_) {
    case XAxisMode::kStep:
      return step;
    case XAxisMode::kTokens: {
      const RunMeta* m = store_->meta(run);
      const Anchors* a = store_->samplesAnchors(run);
      if (!m || !a || a->isEmpty() || m->seqLength <= 0) return step;
      return a->at(step) * m->seqLength;
    }
    case XAxisMode::kTime: {
      const RunMeta* m = store_->meta(run);
      const Anchors* a = store_->wallAnchors(run);
      if (!m || !a || a->isEmpty()) return step;
      return a->at(step) - m->startedAt;
    }
  }
  return step;
}

double MetricChart::stepOf(qint64 run, double x) const {
  switch (xMode_) {
    case XAxisMode::kStep:
      return x;
    case XAxisMode::kTokens: {
      const RunMeta* m = store_->meta(run);
      const Anchors* a = store_->samplesAnchors(run);
      if (!m || !a || a->isEmpty() || m->seqLength <= 0) return x;
      return a->stepAt(x / m->seqLength);
    }
    case XAxisMode::kTime: {
      const RunMeta* m = store_->meta(run);
      const Anchors* a = store_->wallAnchors(run);
      if (!m || !a || a->isEmpty()) return x;
      return a->stepAt(x + m->startedAt);
    }
  }
  return x;
}

int MetricChart::pixelWidth() const {
  return std::max(plot()->axisRect()->width(), 100);
}

MetricChart::Line& MetricChart::line(int runIndex, qint64 run, int spec) {
  Line& l = lines_[{run, spec}];
  if (!l.raw) {
    QCustomPlot* p = plot();
    QCPAxis* y = specs_[spec].rightAxis ? p->yAxis2 : p->yAxis;
    l.raw = p->addGraph(p->xAxis, y);
    l.raw->removeFromLegend();
    l.smooth = p->addGraph(p->xAxis, y);
  }
  const QColor c = runColor(runIndex, palette());
  QColor faint = c;
  faint.setAlphaF(0.28);
  const Qt::PenStyle style = specs_[spec].rightAxis ? Qt::DotLine
                             : specs_[spec].dashed  ? Qt::DashLine
                                                    : Qt::SolidLine;
  l.raw->setPen(QPen(faint, 1, style));
  l.smooth->setPen(QPen(c, 1, style));
  l.raw->setAntialiased(false);
  // A series drawn as logged is its own line; the faint copy would only double it.
  l.raw->setVisible(specs_[spec].smoothed);
  l.smooth->setScatterStyle(specs_[spec].events   ? QCPScatterStyle(QCPScatterStyle::ssTriangle, 11)
                            : specs_[spec].points ? QCPScatterStyle(QCPScatterStyle::ssDisc, 5)
                                                  : QCPScatterStyle());
  l.smooth->setLineStyle(specs_[spec].events ? QCPGraph::lsNone : QCPGraph::lsLine);
  const RunMeta* m = store_->meta(run);
  const QString name = m && !m->name.isEmpty() ? m->name : tr("run %1").arg(run);
  l.smooth->setName(specs_.size() > 1 ? name + " · " + specs_[spec].label : name);
  return l;
}

void MetricChart::assemble(qint64 run, const ChartSeriesSpec& spec, Line& l) {
  const ViewSpans* v = store_->view(viewId_, run, spec.key);
  const Tail* t = store_->tail(run, spec.key);
  l.samples.clear();
  qint64 after = -1;
  if (v) {
    l.samples = v->spans;
    after = v->last;
  }
  if (t) {
    auto it = std::upper_bound(t->steps.begin(), t->steps.end(), after);
    for (qsizetype i = it - t->steps.begin(); i < t->steps.size(); i++) {
      const double x = t->values[i];
      l.samples.append({t->steps[i], t->steps[i], x, x, x, 1});
    }
  }
  // A bucket is drawn as its two extremes, the one nearer its last value second, so that
  // a spike survives down-sampling; a point or a flat bucket is one point.
  QVector<QCPGraphData> raw;
  raw.reserve(l.samples.size() * 2);
  l.xs.resize(l.samples.size());
  QVector<double> lasts(l.samples.size());
  for (qsizetype i = 0; i < l.samples.size(); i++) {
    const Span& s = l.samples[i];
    const double xl = xOf(run, static_cast<double>(s.lastStep));
    l.xs[i] = xl;
    lasts[i] = s.last;
    if (s.count <= 1 || !(s.min < s.max)) {
      raw.append({xl, s.count <= 1 ? s.last : s.max});
    } else {
      const double xf = xOf(run, static_cast<double>(s.firstStep));
      const bool endHigh = std::fabs(s.last - s.max) <= std::fabs(s.last - s.min);
      raw.append({xf, endHigh ? s.min : s.max});
      raw.append({xl, endHigh ? s.max : s.min});
    }
  }
  l.raw->data()->set(raw, true);
  l.smoothed = spec.smoothed ? emaSmooth(lasts, weight_) : lasts;
  l.smooth->setData(l.xs, l.smoothed, true);
}

void MetricChart::refresh() {
  const QList<qint64>& runs = store_->runs();
  for (auto it = lines_.begin(); it != lines_.end();) {
    if (runs.contains(it.key().first)) {
      ++it;
      continue;
    }
    plot()->removeGraph(it->raw);
    plot()->removeGraph(it->smooth);
    it = lines_.erase(it);
  }
  for (int r = 0; r < runs.size(); r++)
    for (int s = 0; s < specs_.size(); s++) assemble(runs[r], specs_[s], line(r, runs[r], s));
  lineage_.keepRuns(runs);
  for (int r = 0; r < runs.size(); r++)
    for (int s = 0; s < specs_.size(); s++) {
      const LineageCurve* curve = store_->lineage(runs[r], specs_[s].key);
      const Line& l = lines_[{runs[r], s}];
      lineage_.draw(runs[r], s, curve && xMode_ != XAxisMode::kTime ? *curve : LineageCurve{},
                    l.raw->valueAxis(), runColor(r, palette()), specs_[s].smoothed ? weight_ : 0,
                    s == 0, [this, run = runs[r]](double step) { return xOf(run, step); });
    }
  fitAxes();
  requestReads();
}

void MetricChart::fitAxes() {
  QCustomPlot* p = plot();
  if (following_) {
    bool found = false;
    QCPRange keys;
    QList<QCPGraph*> graphs;
    for (const Line& l : lines_) graphs << l.raw;
    if (lineage_.visible()) graphs << lineage_.graphs();
    for (const QCPGraph* g : graphs) {
      bool ok = false;
      const QCPRange r = g->getKeyRange(ok);
      if (!ok) continue;
      keys = found ? QCPRange(std::min(keys.lower, r.lower), std::max(keys.upper, r.upper)) : r;
      found = true;
    }
    if (found) {
      if (keys.size() <= 0) keys = QCPRange(keys.lower - 1, keys.upper + 1);
      settingRange_ = true;
      p->xAxis->setRange(keys);
      settingRange_ = false;
    }
  }
  const QCP::SignDomain sign = log_ ? QCP::sdPositive : QCP::sdBoth;
  for (QCPAxis* axis : {p->yAxis, p->yAxis2}) {
    bool found = false;
    QCPRange values;
    for (const Line& l : lines_) {
      if (l.raw->valueAxis() != axis) continue;
      mergeValueRange(l.raw, p->xAxis->range(), sign, &found, &values);
      mergeValueRange(l.smooth, p->xAxis->range(), sign, &found, &values);
    }
    for (const QCPGraph* g : lineage_.graphs())
      if (g->valueAxis() == axis) mergeValueRange(g, p->xAxis->range(), sign, &found, &values);
    if (!found) continue;
    if (log_) {
      axis->setRange(values.lower / 1.15, values.upper * 1.15);
    } else {
      // A flat series (up to rounding: the EMA of a constant wobbles in the last bits) gets
      // a band around its value, not a zoom into floating-point noise.
      const double magnitude = std::max(std::fabs(values.lower), std::fabs(values.upper));
      const bool flat = values.size() <= 1e-9 * magnitude || values.size() == 0;
      const double pad = !flat ? values.size() * 0.06 : magnitude > 0 ? magnitude * 0.1 : 1;
      axis->setRange(values.lower - pad, values.upper + pad);
    }
  }
}

void MetricChart::requestReads() {
  if (!feed_) return;
  const int width = pixelWidth();
  QStringList keys;
  for (const ChartSeriesSpec& s : specs_) keys << s.key;
  for (qint64 run : store_->runs()) {
    const qint64 last = store_->lastStep(run);
    if (last < 0) continue;
    qint64 a = 0, b = last;
    if (!following_) {
      const QCPRange r = plot()->xAxis->range();
      a = std::clamp<qint64>(static_cast<qint64>(std::floor(stepOf(run, r.lower))), 0, last);
      b = std::clamp<qint64>(static_cast<qint64>(std::ceil(stepOf(run, r.upper))), 0, last);
      if (a >= b) continue;
    }
    const qint64 tolerance = std::max<qint64>(1, (b - a) / width);
    bool need = false;
    for (const ChartSeriesSpec& s : specs_) {
      const ViewSpans* v = store_->view(viewId_, run, s.key);
      const Tail* t = store_->tail(run, s.key);
      if (!v) {
        need = true;
        break;
      }
      const qint64 beyond =
          t ? t->steps.end() - std::upper_bound(t->steps.begin(), t->steps.end(), v->last) : 0;
      const bool gap = t && !t->steps.isEmpty() && t->from > v->last + 1;
      const bool resized = std::abs(v->buckets - width) > width / 10;
      if (following_) {
        need |= v->first != 0 || gap || resized || beyond > std::max(64, width / 2);
      } else {
        const bool endCovered = b <= v->last + tolerance || (!gap && beyond <= width);
        need |= std::llabs(v->first - a) > tolerance || !endCovered || resized ||
                (v->last - b > tolerance);
      }
    }
    Pending& p = pending_[run];
    if (!need) {
      p = {};
      continue;
    }
    if (p.first == a && p.last == b && p.buckets == width) continue;  // asked already
    p = {a, b, width};
    feed_->requestRange(viewId_, run, keys, a, b, width);
  }
}

void MetricChart::onXRangeChanged() {
  if (settingRange_) return;
  setFollow(false);
  refine_.start();
}

QString MetricChart::formatX(double x) const {
  switch (xMode_) {
    case XAxisMode::kStep:
      return tr("step %1").arg(std::llround(x));
    case XAxisMode::kTokens:
      return tr("%1 tokens").arg(humanCount(x));
    case XAxisMode::kTime:
      return tr("%1 s").arg(x, 0, 'f', 1);
  }
  return {};
}

QString MetricChart::crosshairText(double x) const {
  QStringList lines;
  const QList<qint64>& runs = store_->runs();
  for (int r = 0; r < runs.size(); r++) {
    for (int s = 0; s < specs_.size(); s++) {
      auto it = lines_.find({runs[r], s});
      if (it == lines_.end() || it->xs.isEmpty()) continue;
      const QVector<double>& xs = it->xs;
      qsizetype i = std::lower_bound(xs.begin(), xs.end(), x) - xs.begin();
      if (i == xs.size() || (i > 0 && x - xs[i - 1] < xs[i] - x)) i--;
      const Span& sample = it->samples[i];
      QString text = QStringLiteral("<span style='color:%1'>■</span> %2: <b>%3</b>")
                         .arg(runColor(r, palette()).name(), it->smooth->name().toHtmlEscaped(),
                              number(it->smoothed[i]));
      if (weight_ > 0 && specs_[s].smoothed) text += tr(" (raw %1)").arg(number(sample.last));
      text += sample.count > 1 ? tr(" · steps %1–%2").arg(sample.firstStep).arg(sample.lastStep)
                               : tr(" · step %1").arg(sample.lastStep);
      lines << text;
    }
  }
  if (lines.isEmpty()) return {};
  return formatX(x) + "<br>" + lines.join("<br>");
}

void MetricChart::moveCrosshair(double x) {
  QCustomPlot* p = plot();
  const QString html = crosshairText(x);
  // QCPItemText draws plain text: strip the markup used for the tooltip-like rich form.
  QString text = html;
  text.replace("<br>", "\n");
  text.remove(QRegularExpression("<[^>]*>"));
  text.replace(QStringLiteral("■ "), QString());
  crossLine_->point1->setCoords(x, 0);
  crossLine_->point2->setCoords(x, 1);
  crossLine_->setVisible(true);
  crossText_->setVisible(!text.isEmpty());
  crossText_->setText(text);
  // Beside the line, on the side with more room, kept inside the axis rect.
  const QRect rect = p->axisRect()->rect();
  const double px = p->xAxis->coordToPixel(x);
  const int width = QFontMetrics(crossText_->font()).boundingRect(QRect(), 0, text).width() + 12;
  double left = px > rect.center().x() ? px - 8 - width : px + 8;
  left = std::clamp<double>(left, rect.left() + 2,
                            std::max(rect.left() + 2, rect.right() - width - 2));
  crossText_->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  crossText_->position->setCoords(left, rect.top() + 4);
  p->layer("overlay")->replot();
}

bool MetricChart::eventFilter(QObject* watched, QEvent* event) {
  if (watched == plot() && event->type() == QEvent::Leave) {
    crossLine_->setVisible(false);
    crossText_->setVisible(false);
    plot()->layer("overlay")->replot();
  }
  return ChartCard::eventFilter(watched, event);
}

int MetricChart::plottedPoints(qint64 run, const QString& key) const {
  const QCPGraph* g = rawGraph(run, key);
  return g ? g->dataCount() : 0;
}

QCPGraph* MetricChart::rawGraph(qint64 run, const QString& key) const {
  for (int s = 0; s < specs_.size(); s++)
    if (specs_[s].key == key) {
      auto it = lines_.find({run, s});
      return it == lines_.end() ? nullptr : it->raw;
    }
  return nullptr;
}

QCPGraph* MetricChart::smoothGraph(qint64 run, const QString& key) const {
  for (int s = 0; s < specs_.size(); s++)
    if (specs_[s].key == key) {
      auto it = lines_.find({run, s});
      return it == lines_.end() ? nullptr : it->smooth;
    }
  return nullptr;
}

void MetricChart::writeCsv(QTextStream& out) const {
  out << "run,series,first_step,last_step,x,min,max,last,count,smoothed\n";
  for (auto it = lines_.begin(); it != lines_.end(); ++it) {
    const RunMeta* m = store_->meta(it.key().first);
    const QString run = m && !m->name.isEmpty() ? m->name : QString::number(it.key().first);
    const QString key = specs_[it.key().second].key;
    for (qsizetype i = 0; i < it->samples.size(); i++) {
      const Span& s = it->samples[i];
      out << run << ',' << key << ',' << s.firstStep << ',' << s.lastStep << ','
          << QString::number(it->xs[i], 'g', 17) << ',' << QString::number(s.min, 'g', 17) << ','
          << QString::number(s.max, 'g', 17) << ',' << QString::number(s.last, 'g', 17) << ','
          << s.count << ',' << QString::number(it->smoothed[i], 'g', 17) << '\n';
    }
  }
}

void MetricChart::applyPalette() {
  ChartCard::applyPalette();
  plot()->xAxis->grid()->setVisible(true);
  const QPalette& pal = palette();
  QColor cross = pal.color(QPalette::Text);
  cross.setAlphaF(0.5);
  crossLine_->setPen(QPen(cross, 1, Qt::DashLine));
  QColor back = pal.color(QPalette::ToolTipBase);
  back.setAlphaF(0.92);
  crossText_->setBrush(back);
  crossText_->setColor(pal.color(QPalette::ToolTipText));
  crossText_->setPen(QPen(pal.color(QPalette::Mid)));
  const QList<qint64>& runs = store_->runs();
  for (auto it = lines_.begin(); it != lines_.end(); ++it)
    line(runs.indexOf(it.key().first), it.key().first, it.key().second);
}

}  // namespace lattice::ui
