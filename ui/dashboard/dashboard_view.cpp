// DashboardView: the toolbar, the pages and the coalescing replot.
#include "dashboard/dashboard_view.h"

#include <qcustomplot.h>
#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <QStackedWidget>
#include <QTabWidget>
#include <QVBoxLayout>

#include "dashboard/dashboard_feed.h"
#include "dashboard/estimate_charts.h"
#include "dashboard/expert_load_chart.h"
#include "dashboard/rank_bars_chart.h"
#include "dashboard/series_store.h"
#include "dashboard/system_charts.h"
#include "dashboard/timeline_chart.h"
#include "lattice/storage/run_store.h"

namespace lattice::ui {

DashboardView::DashboardView(QWidget* parent)
    : QWidget(parent), store_(new SeriesStore(this)), feed_(new DashboardFeed(store_, this)) {
  auto* column = new QVBoxLayout(this);
  column->addWidget(buildToolbar());
  problem_ = new QLabel(this);
  problem_->setObjectName("dashboard-problem");
  problem_->setWordWrap(true);
  problem_->setVisible(false);
  column->addWidget(problem_);
  stack_ = new QStackedWidget(this);
  auto* empty = new QLabel(tr("No run shown. Start one from the Launch view, or pick runs in "
                              "History to compare them here."),
                           this);
  empty->setAlignment(Qt::AlignCenter);
  empty->setWordWrap(true);
  empty->setForegroundRole(QPalette::PlaceholderText);
  stack_->addWidget(empty);
  stack_->addWidget(buildPages());
  column->addWidget(stack_, 1);

  replotTimer_.setSingleShot(true);
  replotTimer_.setInterval(kReplotMs);
  connect(&replotTimer_, &QTimer::timeout, this, &DashboardView::replotNow);
  connect(store_, &SeriesStore::changed, this, &DashboardView::scheduleReplot);
  connect(store_, &SeriesStore::timelineStepsChanged, this, [this](qint64 run) {
    if (run == systemRun_->currentData().toLongLong()) refreshTimelineSteps();
  });
  connect(feed_, &DashboardFeed::problem, this, [this](const QString& message) {
    problem_->setText(tr("Cannot read the run store: %1").arg(message));
    problem_->setVisible(true);
    emit problem(message);
  });
  setSmoothing(smoothing_);
}

DashboardView::~DashboardView() {
  // The feed's worker thread posts to the store until the feed stops it. Children are deleted
  // oldest first, which would free the store while the worker still runs: stop the feed first.
  delete feed_;
}

QWidget* DashboardView::buildToolbar() {
  auto* bar = new QWidget(this);
  auto* row = new QHBoxLayout(bar);
  row->setContentsMargins(0, 0, 0, 0);
  runLabel_ = new QLabel(bar);
  runLabel_->setObjectName("dashboard-runs");
  runLabel_->setTextFormat(Qt::RichText);
  runLabel_->setWordWrap(true);  // run names and states wrap instead of widening the window
  row->addWidget(runLabel_, 1);
  row->addWidget(new QLabel(tr("X axis"), bar));
  xMode_ = new QComboBox(bar);
  xMode_->addItem(tr("Step"), int(XAxisMode::kStep));
  xMode_->addItem(tr("Tokens"), int(XAxisMode::kTokens));
  xMode_->addItem(tr("Time"), int(XAxisMode::kTime));
  xMode_->setToolTip(
      tr("Tokens: consumed samples × sequence length. Time: since the run started."));
  row->addWidget(xMode_);
  row->addSpacing(12);
  row->addWidget(new QLabel(tr("Smoothing"), bar));
  smoothSlider_ = new QSlider(Qt::Horizontal, bar);
  smoothSlider_->setRange(0, 999);
  smoothSlider_->setFixedWidth(120);  // room for Lineage within the 800 px window
  smoothSlider_->setToolTip(
      tr("TensorBoard's debiased exponential moving average; raw values "
         "are drawn faint behind"));
  row->addWidget(smoothSlider_);
  smoothValue_ = new QLabel(bar);
  smoothValue_->setMinimumWidth(QFontMetrics(font()).horizontalAdvance("0.999") + 4);
  row->addWidget(smoothValue_);
  row->addSpacing(12);
  log_ = new QCheckBox(tr("Log scale"), bar);
  row->addWidget(log_);
  follow_ = new QCheckBox(tr("Follow"), bar);
  follow_->setChecked(true);
  follow_->setToolTip(
      tr("The x axis tracks the newest step; zooming or panning a chart stops "
         "it for that chart (double-click the chart to follow again)"));
  row->addWidget(follow_);
  lineage_ = new QCheckBox(tr("Lineage"), bar);
  lineage_->setObjectName("dashboard-lineage");
  lineage_->setChecked(true);
  lineage_->setVisible(false);  // shown while a shown run has ancestors (loadLineage)
  lineage_->setToolTip(
      tr("A run resumed from another run's checkpoint is drawn with the runs before it as one "
         "curve; the steps a later run did again are drawn faded (not on the time axis)"));
  row->addWidget(lineage_);

  connect(xMode_, &QComboBox::currentIndexChanged, this,
          [this] { setXAxisMode(XAxisMode(xMode_->currentData().toInt())); });
  connect(smoothSlider_, &QSlider::valueChanged, this, [this](int v) { setSmoothing(v / 1000.0); });
  connect(log_, &QCheckBox::toggled, this, &DashboardView::setLogScale);
  connect(follow_, &QCheckBox::clicked, this, &DashboardView::setFollow);
  connect(lineage_, &QCheckBox::toggled, this, &DashboardView::setLineageVisible);
  return bar;
}

MetricChart* DashboardView::addChart(const QString& title, const QList<ChartSeriesSpec>& series) {
  auto* c = new MetricChart(charts_.size(), title, series, store_, feed_, this);
  connect(c, &MetricChart::replotWanted, this, &DashboardView::scheduleReplot);
  connect(c, &MetricChart::followChanged, this, [this] {
    bool all = true;
    for (MetricChart* m : charts_) all &= m->following();
    const QSignalBlocker block(follow_);
    follow_->setChecked(all);
  });
  charts_ << c;
  return c;
}

QWidget* DashboardView::buildPages() {
  tabs_ = new QTabWidget(this);
  tabs_->setDocumentMode(true);
  auto grid = [this](const QString& name) {
    auto* page = new QWidget(tabs_);
    auto* g = new QGridLayout(page);
    g->setContentsMargins(4, 6, 4, 4);
    g->setSpacing(10);
    tabs_->addTab(page, name);
    return g;
  };
  auto place = [this](QGridLayout* g, MetricChart* c, int row, int col, int span = 1) {
    g->addWidget(c, row, col, 1, span);
    pageOf_ << g->parentWidget();
  };
  QGridLayout* training = grid(tr("Training"));
  // Smoothed: the noisy per-step measurements. As logged: validation (sparse, every point its
  // own evaluation), schedules and counters.
  place(training,
        addChart(tr("Loss"), {{.key = "lm loss", .label = tr("lm loss")},
                              {.key = "validation lm loss",
                               .label = tr("validation"),
                               .dashed = true,
                               .smoothed = false,
                               .points = true},
                              // docs/studio.md "Instability": a triangle at each spike.
                              {.key = "loss spike value",
                               .label = tr("loss spike"),
                               .smoothed = false,
                               .events = true}}),
        0, 0);
  place(training,
        addChart(tr("Learning rate"),
                 {{.key = "learning rate", .label = tr("learning rate"), .smoothed = false}}),
        0, 1);
  place(training,
        addChart(tr("Grad norm"), {{"grad norm", tr("grad norm")},
                                   {.key = "grad norm spike value",
                                    .label = tr("grad norm spike"),
                                    .smoothed = false,
                                    .events = true}}),
        1, 0);
  place(training,
        addChart(tr("Loss scale and skipped iterations"),
                 {{.key = "loss scale", .label = tr("loss scale"), .smoothed = false},
                  {.key = "skipped iterations",
                   .label = tr("skipped iterations"),
                   .rightAxis = true,
                   .smoothed = false}}),
        1, 1);
  QGridLayout* throughput = grid(tr("Throughput"));
  place(throughput, addChart(tr("Tokens per second"), {{"tokens per second", tr("tokens/s")}}), 0,
        0);
  place(throughput, addChart(tr("TFLOP/s per device"), {{"TFLOP/s per device", tr("TFLOP/s")}}), 0,
        1);
  place(throughput, addChart(tr("MFU (fraction of peak)"), {{"MFU", tr("MFU")}}), 1, 0);
  place(throughput, addChart(tr("Step time (s)"), {{"step time", tr("step time")}}), 1, 1);

  auto* system = new QWidget(tabs_);
  auto* sys = new QGridLayout(system);
  sys->setContentsMargins(4, 6, 4, 4);
  sys->setSpacing(10);
  auto* pick = new QHBoxLayout;
  pick->addWidget(new QLabel(tr("Run"), system));
  systemRun_ = new QComboBox(system);
  systemRun_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  systemRun_->setMinimumContentsLength(16);
  pick->addWidget(systemRun_);
  pick->addSpacing(12);
  pick->addWidget(new QLabel(tr("Timeline iteration"), system));
  iteration_ = new QComboBox(system);
  iteration_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  iteration_->setToolTip(tr("The iterations that recorded pipeline timeline events"));
  pick->addWidget(iteration_);
  pick->addStretch(1);
  sys->addLayout(pick, 0, 0, 1, 2);
  memory_ = new RankBarsChart(RankBarsChart::Kind::kMemory, store_, system);
  phases_ = new RankBarsChart(RankBarsChart::Kind::kPhases, store_, system);
  timeline_ = new TimelineChart(store_, system);
  sys->addWidget(memory_, 1, 0);
  sys->addWidget(phases_, 1, 1);
  sys->addWidget(timeline_, 2, 0, 1, 2);
  sys->setRowStretch(1, 1);
  sys->setRowStretch(2, 1);
  tabs_->addTab(system, tr("Memory and timers"));

  auto* estimate = new QWidget(tabs_);
  auto* est = new QGridLayout(estimate);
  est->setContentsMargins(4, 6, 4, 4);
  est->setSpacing(10);
  auto* pickEstimate = new QHBoxLayout;
  pickEstimate->addWidget(new QLabel(tr("Run"), estimate));
  estimateRun_ = new QComboBox(estimate);
  estimateRun_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  estimateRun_->setMinimumContentsLength(16);
  pickEstimate->addWidget(estimateRun_);
  pickEstimate->addStretch(1);
  est->addLayout(pickEstimate, 0, 0);
  estimate_ = new EstimateChart(store_, estimate);
  bubble_ = new BubbleChart(store_, estimate);
  est->addWidget(estimate_, 1, 0);
  est->addWidget(bubble_, 2, 0);
  est->setRowStretch(1, 1);
  est->setRowStretch(2, 1);
  tabs_->addTab(estimate, tr("Estimate and measurement"));
  connect(estimateRun_, &QComboBox::currentIndexChanged, this, [this] {
    refreshSystemRun();
    scheduleReplot();
  });

  systemMetrics_ = new SystemPage(store_, feed_, tabs_);
  tabs_->addTab(systemMetrics_, tr("System metrics"));
  connect(systemMetrics_, &SystemPage::runChanged, this, &DashboardView::scheduleReplot);

  // Last, so that the pages before keep their indices (Page). --eval-tasks
  // (docs/evaluation.md): the mean over the task files, at each validation point.
  QGridLayout* tasks = grid(tr("Tasks"));
  place(tasks,
        addChart(tr("Multiple-choice accuracy"),
                 {{.key = "task acc", .label = tr("acc"), .smoothed = false, .points = true},
                  {.key = "task acc_norm",
                   .label = tr("acc_norm"),
                   .dashed = true,
                   .smoothed = false,
                   .points = true}}),
        0, 0);

  // MoE models (docs/studio.md "MoE"): after Tasks, hidden until a shown run logs MoE rows.
  QGridLayout* moe = grid(tr("MoE"));
  expertLoad_ = new ExpertLoadChart(store_, feed_, tabs_->widget(kMoePage));
  moe->addWidget(expertLoad_, 0, 0);
  place(moe,
        addChart(tr("MoE load-balancing loss"),
                 {{.key = "moe aux loss", .label = tr("moe aux loss"), .points = true}}),
        0, 1);
  tabs_->setTabVisible(kMoePage, false);

  connect(tabs_, &QTabWidget::currentChanged, this, &DashboardView::scheduleReplot);
  connect(systemRun_, &QComboBox::currentIndexChanged, this, [this] {
    refreshSystemRun();
    refreshTimelineSteps();
    scheduleReplot();
  });
  connect(iteration_, &QComboBox::activated, this, [this] {
    const qint64 step = iteration_->currentData().toLongLong();
    feed_->requestTimeline(systemRun_->currentData().toLongLong(), step);
  });
  return tabs_;
}

void DashboardView::setDatabase(const QString& path) {
  database_ = path;
  problem_->setVisible(false);
  feed_->setDatabase(path);
  if (!store_->runs().isEmpty()) showRuns(store_->runs());
}

// Synchronous: the ancestors are read once, a few thousand down-sampled points per key.
void DashboardView::loadLineage(const QList<qint64>& runIds) {
  lineage_->setVisible(false);
  if (database_.isEmpty() || runIds.isEmpty()) return;
  storage::OpenOptions options;
  options.read_only = true;
  auto store = storage::RunStore::open(database_.toStdString(), options);
  if (!store) return;  // the feed says why the store cannot be read
  QStringList keys;
  for (const MetricChart* c : charts_) keys << c->keys();
  for (qint64 run : runIds)
    if (auto curves = readLineage(**store, run, keys); curves && !curves->isEmpty()) {
      store_->setLineage(run, std::move(*curves));
      lineage_->setVisible(true);
    }
}

void DashboardView::setLineageVisible(bool on) {
  {
    const QSignalBlocker block(lineage_);
    lineage_->setChecked(on);
  }
  for (MetricChart* c : charts_) c->setLineageVisible(on);
  scheduleReplot();
}

void DashboardView::showRuns(const QList<qint64>& runIds) {
  feed_->showRuns(runIds);
  loadLineage(runIds);
  for (MetricChart* c : charts_) {
    c->forgetReads();
    c->setFollow(true);
  }
  {
    const QSignalBlocker block(systemRun_);
    systemRun_->clear();
    for (qint64 r : runIds) systemRun_->addItem(tr("run %1").arg(r), r);
    const QSignalBlocker blockEstimate(estimateRun_);
    estimateRun_->clear();
    for (qint64 r : runIds) estimateRun_->addItem(tr("run %1").arg(r), r);
  }
  systemMetrics_->setRuns(runIds);
  refreshSystemRun();
  refreshTimelineSteps();
  stack_->setCurrentIndex(runIds.isEmpty() ? 0 : 1);
  scheduleReplot();
}

QList<qint64> DashboardView::runs() const {
  return store_->runs();
}

void DashboardView::setSmoothing(double weight) {
  smoothing_ = std::clamp(weight, 0.0, 0.999);
  {
    const QSignalBlocker block(smoothSlider_);
    smoothSlider_->setValue(static_cast<int>(std::lround(smoothing_ * 1000)));
  }
  smoothValue_->setText(QString::number(smoothing_, 'f', 3));
  for (MetricChart* c : charts_) c->setSmoothing(smoothing_);
  scheduleReplot();
}

void DashboardView::setLogScale(bool on) {
  {
    const QSignalBlocker block(log_);
    log_->setChecked(on);
  }
  for (MetricChart* c : charts_) c->setLogScale(on);
  scheduleReplot();
}

void DashboardView::setXAxisMode(XAxisMode mode) {
  {
    const QSignalBlocker block(xMode_);
    xMode_->setCurrentIndex(xMode_->findData(int(mode)));
  }
  for (MetricChart* c : charts_) c->setXAxisMode(mode);
  scheduleReplot();
}

void DashboardView::setFollow(bool on) {
  {
    const QSignalBlocker block(follow_);
    follow_->setChecked(on);
  }
  if (on)
    for (MetricChart* c : charts_) c->setFollow(true);
  scheduleReplot();
}

bool DashboardView::isPageShown(Page page) const {
  return tabs_->isTabVisible(page);
}

void DashboardView::setCurrentPage(Page page) {
  tabs_->setCurrentIndex(page);
}

void DashboardView::selectTimelineStep(qint64 step) {
  const int i = iteration_->findData(step);
  if (i >= 0) iteration_->setCurrentIndex(i);
  feed_->requestTimeline(systemRun_->currentData().toLongLong(), step);
}

MetricChart* DashboardView::chart(const QString& key) const {
  for (MetricChart* c : charts_)
    if (c->firstKey() == key) return c;
  return nullptr;
}

void DashboardView::scheduleReplot() {
  if (!replotTimer_.isActive()) replotTimer_.start();
}

void DashboardView::replotNow() {
  replotTimer_.stop();
  refreshRunLabel();
  QWidget* page = tabs_->currentWidget();
  for (int i = 0; i < charts_.size(); i++) {
    if (pageOf_[i] != page) continue;
    charts_[i]->refresh();
    charts_[i]->plot()->replot();
  }
  if (page == memory_->parentWidget()) {
    // Names arrive with the first batch; keep the run picker's texts current.
    for (int i = 0; i < systemRun_->count(); i++) {
      const RunMeta* m = store_->meta(systemRun_->itemData(i).toLongLong());
      if (m && !m->name.isEmpty()) systemRun_->setItemText(i, m->name);
    }
    for (ChartCard* c : {static_cast<ChartCard*>(memory_), static_cast<ChartCard*>(phases_)}) {
      static_cast<RankBarsChart*>(c)->refresh();
      c->plot()->replot();
    }
    timeline_->refresh();
    timeline_->plot()->replot();
  }
  if (page == estimate_->parentWidget()) {
    for (int i = 0; i < estimateRun_->count(); i++) {
      const RunMeta* m = store_->meta(estimateRun_->itemData(i).toLongLong());
      if (m && !m->name.isEmpty()) estimateRun_->setItemText(i, m->name);
    }
    estimate_->refresh();
    estimate_->plot()->replot();
    bubble_->refresh();
    bubble_->plot()->replot();
  }
  if (page == systemMetrics_) systemMetrics_->refresh();
  bool moe = false;  // a shown run's configuration has experts
  for (qint64 run : store_->runs())
    if (const RunMeta* m = store_->meta(run)) moe |= m->numExperts > 0;
  if (moe != tabs_->isTabVisible(kMoePage)) tabs_->setTabVisible(kMoePage, moe);
  if (page == expertLoad_->parentWidget()) {
    expertLoad_->refresh();
    expertLoad_->plot()->replot();
  }
  replots_++;
  emit replotted();
}

void DashboardView::refreshRunLabel() {
  QStringList parts;
  const QList<qint64>& runs = store_->runs();
  for (int i = 0; i < runs.size(); i++) {
    const RunMeta* m = store_->meta(runs[i]);
    const QString name = m && !m->name.isEmpty() ? m->name : tr("run %1").arg(runs[i]);
    QString state = m && !m->status.isEmpty() ? m->status : tr("loading");
    const qint64 step = store_->lastStep(runs[i]);
    if (step >= 0) state += tr(", step %1").arg(step);
    parts << QStringLiteral("<span style='color:%1'>■</span> <b>%2</b> (%3)")
                 .arg(ChartCard::runColor(i, palette()).name(), name.toHtmlEscaped(), state);
  }
  runLabel_->setText(parts.join("&nbsp;&nbsp; "));
}

void DashboardView::refreshSystemRun() {
  const qint64 run = systemRun_->currentIndex() >= 0 ? systemRun_->currentData().toLongLong() : -1;
  memory_->setRun(run);
  phases_->setRun(run);
  timeline_->setRun(run);
  const qint64 chosen =
      estimateRun_->currentIndex() >= 0 ? estimateRun_->currentData().toLongLong() : -1;
  estimate_->setRun(chosen);
  bubble_->setRun(chosen);
}

void DashboardView::refreshTimelineSteps() {
  const qint64 run = systemRun_->currentIndex() >= 0 ? systemRun_->currentData().toLongLong() : -1;
  const TimelineSnapshot* t = run >= 0 ? store_->timeline(run) : nullptr;
  const qint64 chosen =
      iteration_->currentIndex() >= 0 ? iteration_->currentData().toLongLong() : -1;
  const QSignalBlocker block(iteration_);
  iteration_->clear();
  iteration_->addItem(tr("newest"), qint64(-1));
  if (t)
    for (auto it = t->steps.rbegin(); it != t->steps.rend(); ++it)
      iteration_->addItem(QString::number(*it), *it);
  iteration_->setCurrentIndex(std::max(0, iteration_->findData(chosen)));
}

}  // namespace lattice::ui
