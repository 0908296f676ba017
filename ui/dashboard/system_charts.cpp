// SystemChart and SystemPage (dashboard/system_charts.h).
#include "dashboard/system_charts.h"

#include <qcustomplot.h>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QTextStream>
#include <algorithm>

#include "dashboard/dashboard_feed.h"
#include "dashboard/series_store.h"
#include "lattice/system_metrics.h"

namespace lattice::ui {

namespace {

struct QuantitySpec {
  const char* key;  // after "rank R "
  const char* title;
  const char* unit;  // the y axis label
  double scale;      // recorded value -> plotted value
};

const QuantitySpec& spec(SystemChart::Quantity q) {
  static const QuantitySpec specs[] = {
      {kCpuPercentKey, "CPU per rank", "% of one core", 1},
      {kRssKey, "Resident memory per rank", "MiB", 1.0 / (1024 * 1024)},
      {kGpuUtilizationKey, "GPU utilization per rank", "% of time a kernel ran", 1},
      {kGpuMemoryKey, "GPU memory per rank", "GiB used on the device", 1.0 / (1024 * 1024 * 1024)},
      {kGpuPowerKey, "GPU power per rank", "W", 1},
      {kGpuTemperatureKey, "GPU temperature per rank", "°C", 1}};
  return specs[static_cast<int>(q)];
}

QString seriesKey(int rank, const char* key) {
  return QStringLiteral("rank %1 %2").arg(rank).arg(QLatin1String(key));
}

}  // namespace

SystemChart::SystemChart(Quantity quantity, SeriesStore* store, DashboardFeed* feed,
                         QWidget* parent)
    : ChartCard(tr(spec(quantity).title), parent), quantity_(quantity), store_(store), feed_(feed) {
  QCustomPlot* p = plot();
  p->xAxis->setLabel(tr("step"));
  p->yAxis->setLabel(tr(spec(quantity).unit));
  p->legend->setVisible(true);
  p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
  setMinimumHeight(220);
}

void SystemChart::setRun(qint64 run) {
  if (run != run_) requested_ = -1;
  run_ = run;
}

int SystemChart::viewId() const {
  return 1000 + static_cast<int>(quantity_);
}

// The history read (each bucket at its last value), then the tail's points past it.
QVector<QPointF> SystemChart::points(int rank) const {
  const QString key = seriesKey(rank, spec(quantity_).key);
  QVector<QPointF> out;
  qint64 after = -1;
  if (const ViewSpans* v = store_->view(viewId(), run_, key)) {
    for (const Span& s : v->spans) out.append({double(s.lastStep), s.last});
    after = v->last;
  }
  if (const Tail* t = store_->tail(run_, key))
    for (qsizetype i = 0; i < t->steps.size(); i++)
      if (t->steps[i] > after) out.append({double(t->steps[i]), t->values[i]});
  return out;
}

void SystemChart::refresh() {
  QCustomPlot* p = plot();
  const RunMeta* meta = run_ >= 0 ? store_->meta(run_) : nullptr;
  const int world = meta ? meta->tp * meta->pp * meta->dp : 0;
  const QuantitySpec& s = spec(quantity_);
  const qint64 last = run_ >= 0 ? store_->lastStep(run_) : -1;
  if (feed_ && world > 0 && last >= 0 && requested_ < 0) {
    // Once per run: the steps recorded before it was shown. Later steps arrive in the tail
    // (a tail that lost its oldest half past the read asks again).
    QStringList keys;
    for (int r = 0; r < world; r++) keys << seriesKey(r, s.key);
    feed_->requestRange(viewId(), run_, keys, 0, last, kBuckets);
    requested_ = last;
  } else if (feed_ && requested_ >= 0) {
    const Tail* t = store_->tail(run_, seriesKey(0, s.key));
    if (t && !t->steps.isEmpty() && t->from > requested_ + 1) requested_ = -1;
  }
  QList<int> ranks;
  QList<QVector<QPointF>> data;
  for (int r = 0; r < world; r++) {
    QVector<QPointF> pts = points(r);
    if (pts.isEmpty()) continue;
    ranks << r;
    data << pts;
  }
  if (ranks != ranks_) {  // a rank's first point, or another run: one line per rank
    p->clearGraphs();
    lines_.clear();
    for (int i = 0; i < ranks.size(); i++) {
      QCPGraph* g = p->addGraph();
      g->setName(tr("rank %1").arg(ranks[i]));
      g->setPen(QPen(runColor(i, palette()), 1.6));
      g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
      lines_ << g;
    }
    ranks_ = ranks;
  }
  double top = 0;
  for (int i = 0; i < ranks_.size(); i++) {
    QVector<double> x(data[i].size()), y(data[i].size());
    for (qsizetype j = 0; j < data[i].size(); j++) {
      x[j] = data[i][j].x();
      y[j] = data[i][j].y() * s.scale;
      top = std::max(top, y[j]);
    }
    lines_[i]->setData(x, y, true);
  }
  p->xAxis->rescale();
  p->yAxis->setRange(0, top > 0 ? top * 1.1 : 1);
  if (quantity_ == Quantity::kCpu)
    setSubtitle(
        tr("100 % is one core busy (the engine's --threads, MPI and I/O threads "
           "together)"));
}

void SystemChart::writeCsv(QTextStream& out) const {
  out << "rank,step," << spec(quantity_).key << "\n";
  for (int i = 0; i < lines_.size(); i++)
    for (auto it = lines_[i]->data()->constBegin(); it != lines_[i]->data()->constEnd(); ++it)
      out << ranks_[i] << "," << it->key << "," << it->value / spec(quantity_).scale << "\n";
}

void SystemChart::applyPalette() {
  ChartCard::applyPalette();
  for (int i = 0; i < lines_.size(); i++) lines_[i]->setPen(QPen(runColor(i, palette()), 1.6));
}

SystemPage::SystemPage(SeriesStore* store, DashboardFeed* feed, QWidget* parent)
    : QWidget(parent), store_(store) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(4, 6, 4, 4);
  grid->setSpacing(10);
  auto* pick = new QHBoxLayout;
  pick->addWidget(new QLabel(tr("Run"), this));
  run_ = new QComboBox(this);
  run_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  run_->setMinimumContentsLength(16);
  pick->addWidget(run_);
  pick->addStretch(1);
  grid->addLayout(pick, 0, 0, 1, 2);
  using Q = SystemChart::Quantity;
  const Q quantities[] = {Q::kCpu,       Q::kRss,      Q::kGpuUtilization,
                          Q::kGpuMemory, Q::kGpuPower, Q::kGpuTemperature};
  for (int i = 0; i < 6; i++) {
    auto* c = new SystemChart(quantities[i], store_, feed, this);
    grid->addWidget(c, 1 + i / 2, i % 2);
    charts_ << c;
  }
  connect(run_, &QComboBox::currentIndexChanged, this, &SystemPage::runChanged);
}

void SystemPage::setRuns(const QList<qint64>& runs) {
  const QSignalBlocker block(run_);
  run_->clear();
  for (qint64 r : runs) run_->addItem(tr("run %1").arg(r), r);
}

SystemChart* SystemPage::chart(SystemChart::Quantity quantity) const {
  for (SystemChart* c : charts_)
    if (c->quantity() == quantity) return c;
  return nullptr;
}

void SystemPage::refresh() {
  for (int i = 0; i < run_->count(); i++) {  // names arrive with the first batch
    const RunMeta* m = store_->meta(run_->itemData(i).toLongLong());
    if (m && !m->name.isEmpty()) run_->setItemText(i, m->name);
  }
  const qint64 run = run_->currentIndex() >= 0 ? run_->currentData().toLongLong() : -1;
  for (SystemChart* c : charts_) {
    c->setRun(run);
    c->refresh();
    const bool gpu = c->quantity() != SystemChart::Quantity::kCpu &&
                     c->quantity() != SystemChart::Quantity::kRss;
    c->setVisible(!gpu || !c->ranks().isEmpty());  // CPU and memory: always, empty or not
    if (c->isVisible()) c->plot()->replot();
  }
}

}  // namespace lattice::ui
