// DashboardFeed: the worker thread's polling loop and range reads. Every result is posted to
// the UI thread with QMetaObject::invokeMethod on the store, tagged with the epoch of the
// showRuns call it belongs to.
#include "dashboard/dashboard_feed.h"

#include <unistd.h>

#include <QDateTime>
#include <QFileInfo>
#include <QHash>
#include <QTimer>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

namespace lattice::ui {

namespace {

QString hostName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return QString::fromLocal8Bit(host);
}

RunMeta readMeta(const storage::RunInfo& info) {
  RunMeta m;
  m.id = info.id;
  m.name = QString::fromStdString(info.name);
  m.status = QString::fromLatin1(storage::run_status_name(info.status));
  m.host = QString::fromStdString(info.host);
  m.onThisHost = m.host == hostName();
  m.startedAt = info.started_at.value_or(info.created_at);
  m.latestStep = info.latest_step.value_or(-1);
  m.tp = info.layout.tp;
  m.pp = info.layout.pp;
  m.dp = info.layout.dp;
  m.error = QString::fromStdString(info.error);
  const nlohmann::json config = nlohmann::json::parse(info.config_json, nullptr, false);
  if (config.is_object()) {
    if (auto it = config.find("seq-length"); it != config.end() && it->is_number())
      m.seqLength = it->get<int>();
    // The CPU engine's configuration names no device; a GPU one would.
    if (auto it = config.find("device"); it != config.end() && it->is_string())
      m.cpu = it->get<std::string>() == "cpu";
    ModelConfig mc;  // the flags the MoE layers depend on, defaults where not recorded
    for (auto [key, field] :
         {std::pair{"num-experts", &mc.num_experts}, std::pair{"num-layers", &mc.num_layers},
          std::pair{"moe-layer-freq", &mc.moe_layer_freq}})
      if (auto it = config.find(key); it != config.end() && it->is_number_integer())
        *field = it->get<int>();
    m.numExperts = std::max(mc.num_experts, 0);
    for (int l = 0; l < mc.num_layers && l < 4096; l++)
      if (mc.is_moe_layer(l)) m.moeLayers << l;
  }
  return m;
}

}  // namespace

// Lives on DashboardFeed::thread_; every member is touched on that thread only.
class FeedWorker : public QObject {
 public:
  FeedWorker(DashboardFeed* feed, SeriesStore* store, std::shared_ptr<std::atomic<int>> epoch)
      : feed_(feed), store_(store), epoch_(std::move(epoch)) {}

  void start() {
    timer_ = new QTimer(this);
    timer_->setInterval(DashboardFeed::kPollMs);
    QObject::connect(timer_, &QTimer::timeout, this, [this] { poll(); });
    timer_->start();
  }

  void setDatabase(const QString& path) {
    path_ = path;
    db_.reset();
    runs_.clear();
    layouts_.clear();
  }

  // The runs are loaded (history, then tailing from the newest row) by the next poll, which
  // also covers a database that does not exist yet when they are shown.
  void showRuns(const QList<qint64>& runs, int epoch) {
    epochSeen_ = epoch;
    runs_.clear();
    layouts_.clear();
    ranges_.clear();
    for (qint64 run : runs) runs_[run];
    poll();
  }

  struct Range {
    int view = 0;
    qint64 run = 0;
    QStringList keys;
    qint64 first = 0, last = 0;
    int buckets = 0;
    int epoch = 0;
  };

  void requestRange(const Range& r) {
    const bool idle = ranges_.isEmpty();
    ranges_[{r.view, r.run}] = r;
    if (idle) QTimer::singleShot(0, this, [this] { readRanges(); });
  }

  void requestTimeline(qint64 run, qint64 step, int epoch) {
    auto it = runs_.find(run);
    if (it == runs_.end() || !it->loaded || epoch != epochSeen_ || !open()) return;
    it->followTimeline = step < 0;
    FeedBatch b;
    b.run = run;
    readTimeline(run, *it, step, /*force=*/true, &b);
    post(std::move(b));
  }

 private:
  struct RunState {
    bool loaded = false;  // history read and lastId set
    qint64 lastId = 0;
    qint64 lastStep = -1;
    bool followTimeline = true;
    qint64 timelineStep = -1;
    qint64 timelineStepsAt = 0;  // ms since epoch of the last timeline_steps read
    qint64 timelineCount = -1, timelineNewest = -1;
    qint64 metaAt = 0;
    qint64 waitsUpTo = -1;  // the newest timeline step whose pipeline wait was measured
  };

  bool open() {
    if (db_) return true;
    // Read-only: the file may be a cluster job's store that its job is writing. An empty file
    // is a run still creating it: not a problem to report, just not yet.
    if (path_.isEmpty() || QFileInfo(path_).size() == 0) return false;
    storage::OpenOptions options;
    options.read_only = true;
    Result<std::unique_ptr<storage::RunStore>> store =
        storage::RunStore::open(path_.toStdString(), options);
    if (!store) {
      report(QString::fromStdString(store.status().message()));
      return false;
    }
    db_ = std::move(*store);
    return true;
  }

  void report(const QString& message) {
    if (message == problem_) return;
    problem_ = message;
    DashboardFeed* feed = feed_;
    QMetaObject::invokeMethod(
        feed, [feed, message] { emit feed->problem(message); }, Qt::QueuedConnection);
  }

  // The largest metric row id: rows_after(x, all runs, 1) is a primary-key lookup, so an
  // exponential then binary search costs ~2 log2(ids) lookups instead of reading every row.
  qint64 findMaxId() {
    auto any_after = [this](qint64 x) {
      Result<std::vector<storage::MetricRow>> rows = db_->rows_after(x, std::nullopt, 1);
      return rows && !rows->empty();
    };
    if (!any_after(0)) return 0;
    qint64 lo = 0, hi = 1;  // any_after(lo) holds, any_after(hi) is unknown
    while (any_after(hi)) lo = hi, hi *= 2;
    while (hi - lo > 1) {
      const qint64 mid = lo + (hi - lo) / 2;
      (any_after(mid) ? lo : hi) = mid;
    }
    return hi;
  }

  void loadHistory(qint64 run, RunState& s) {
    FeedBatch b;
    b.run = run;
    Result<storage::RunInfo> info = db_->find_run(std::to_string(run));
    if (!info) return;
    b.hasMeta = true;
    b.meta = readMeta(*info);
    readPlan(*info, &b);
    layouts_[run] = info->layout;
    const qint64 latest = b.meta.latestStep;
    s.lastStep = latest;
    if (latest >= 0) {
      if (auto buckets = db_->downsample(run, "consumed samples", 0, latest, 512); buckets)
        for (const storage::Bucket& k : *buckets)
          b.samplesHistory.emplace_back(k.last_step, k.last);
      // Wall time of the past: the run's start plus the summed step times (exact only per
      // bucket); live rows carry their own wall time.
      double t = b.meta.startedAt;
      b.wallHistory.emplace_back(0, t);
      if (auto buckets = db_->downsample(run, "step time", 0, latest, 512); buckets) {
        for (const storage::Bucket& k : *buckets) {
          t += std::isfinite(k.last) ? k.last * static_cast<double>(k.count) : 0;
          b.wallHistory.emplace_back(k.last_step, t);
        }
      }
      if (b.wallHistory.size() == 1 && info->heartbeat_at)
        b.wallHistory.emplace_back(latest, *info->heartbeat_at);
      // The latest timer breakdown (latest_metrics) and its step.
      const std::string probe = std::string("rank 0 ") + kPhaseKeys[0];
      if (auto last = db_->downsample(run, probe, 0, latest, 1); last && !last->empty()) {
        b.phases.step = last->back().last_step;
        for (const auto& [key, value] : info->latest) {
          for (int p = 0; p < kPhaseCount; p++) {
            const std::string suffix = std::string(" ") + kPhaseKeys[p];
            if (key.rfind("rank ", 0) == 0 && key.size() > suffix.size() &&
                key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
              b.phases.byRank[std::atoi(key.c_str() + 5)][p] = value;
            }
          }
        }
      }
      readMemory(run, {latest, b.phases.step}, &b);
    }
    readTimeline(run, s, -1, /*force=*/true, &b);
    post(std::move(b));
  }

  void readMemory(qint64 run, std::initializer_list<qint64> steps, FeedBatch* b) {
    bool read = false;
    for (qint64 step : steps) {
      if (step < 0 || step <= b->memory.step) continue;
      Result<std::vector<storage::MemorySample>> m = db_->memory_at(run, step);
      if (m && !m->empty()) b->memory = {step, std::move(*m)}, read = true;
    }
    if (read)
      if (Result<std::vector<storage::StepMemory>> peaks = db_->memory_peaks(run); peaks)
        b->peaks = std::move(*peaks);
  }

  // The planner's estimate for the run's recorded configuration, or why there is none.
  static void readPlan(const storage::RunInfo& info, FeedBatch* b) {
    b->hasPlan = true;
    Result<RecordedRunPlan> plan = plan_recorded_run(info.config_json, info.world_size);
    if (plan)
      b->plan = std::move(*plan);
    else
      b->planProblem = QString::fromStdString(plan.status().message());
  }

  // Measures the pipeline wait of every recorded iteration not measured yet (the newest
  // kMaxWaitSteps of them when the feed starts on a long run).
  void readWaits(qint64 run, RunState& s, const std::vector<std::int64_t>& steps, FeedBatch* b) {
    const storage::Layout layout = layouts_.value(run);
    if (layout.pp <= 1) return;
    constexpr size_t kMaxWaitSteps = 500;
    const size_t from = steps.size() > kMaxWaitSteps ? steps.size() - kMaxWaitSteps : 0;
    for (size_t i = from; i < steps.size(); i++) {
      if (steps[i] <= s.waitsUpTo) continue;
      Result<std::vector<storage::TimelineEvent>> events = db_->timeline(run, steps[i]);
      if (!events) return;
      std::vector<TimedBox> boxes;
      boxes.reserve(events->size());
      for (const storage::TimelineEvent& e : *events)
        boxes.push_back({e.rank, e.stage, e.microbatch, e.kind, e.start_s, e.end_s});
      PipelineWait w = measure_pipeline_wait(layout.tp, layout.pp, layout.dp, steps[i], boxes);
      if (!w.stages.empty()) b->waits.push_back(std::move(w));
      s.waitsUpTo = steps[i];
    }
  }

  // Reads the timeline's steps and the events of `step` (-1: the newest). Unless forced,
  // only what changed since the last read is put in the batch.
  void readTimeline(qint64 run, RunState& s, qint64 step, bool force, FeedBatch* b) {
    Result<std::vector<std::int64_t>> steps = db_->timeline_steps(run);
    if (!steps) return;
    s.timelineStepsAt = nowMs();
    readWaits(run, s, *steps, b);
    const qint64 newest = steps->empty() ? -1 : steps->back();
    if (force || static_cast<qint64>(steps->size()) != s.timelineCount ||
        newest != s.timelineNewest) {
      b->hasTimelineSteps = true;
      b->timelineSteps = QVector<qint64>(steps->begin(), steps->end());
      s.timelineCount = static_cast<qint64>(steps->size());
      s.timelineNewest = newest;
    }
    if (step < 0) step = newest;
    if (step < 0 || (!force && step == s.timelineStep)) return;
    Result<std::vector<storage::TimelineEvent>> events = db_->timeline(run, step);
    if (!events) return;
    b->hasTimeline = true;
    b->timelineStep = step;
    b->timeline = std::move(*events);
    s.timelineStep = step;
  }

  static qint64 nowMs() { return QDateTime::currentMSecsSinceEpoch(); }

  void poll() {
    if (runs_.isEmpty() || !open()) return;
    qint64 maxId = -1;
    for (auto it = runs_.begin(); it != runs_.end(); ++it) {
      if (it->loaded) continue;
      if (maxId < 0) maxId = findMaxId();
      it->lastId = maxId;
      it->loaded = true;
      loadHistory(it.key(), *it);
    }
    bool more = false;
    for (auto it = runs_.begin(); it != runs_.end(); ++it) {
      const qint64 run = it.key();
      RunState& s = *it;
      FeedBatch b;
      b.run = run;
      Result<std::vector<storage::MetricRow>> rows =
          db_->rows_after(s.lastId, run, DashboardFeed::kMaxRowsPerPoll);
      if (!rows) {
        report(QString::fromStdString(rows.status().message()));
        continue;
      }
      more |= rows->size() >= DashboardFeed::kMaxRowsPerPoll / 2;
      const qint64 now = nowMs();
      if (!rows->empty()) {
        s.lastId = rows->back().id;
        qint64 newest = s.lastStep, phaseStep = -1;
        for (const storage::MetricRow& r : *rows) {
          newest = std::max<qint64>(newest, r.step);
          if (r.key.rfind("rank ", 0) == 0) phaseStep = std::max<qint64>(phaseStep, r.step);
        }
        b.rows = std::move(*rows);
        if (newest > s.lastStep) {
          s.lastStep = newest;
          readMemory(run, {phaseStep, newest}, &b);
        }
      }
      // Timeline events may land after their step's metrics: look again once a second.
      if (now - s.timelineStepsAt >= 1000)
        readTimeline(run, s, s.followTimeline ? -1 : s.timelineStep, false, &b);
      if (now - s.metaAt >= 1000) {
        s.metaAt = now;
        if (Result<storage::RunInfo> info = db_->find_run(std::to_string(run)); info) {
          b.hasMeta = true;
          b.meta = readMeta(*info);
          b.meta.latestStep = std::max<qint64>(b.meta.latestStep, s.lastStep);
        }
      }
      if (b.hasMeta || !b.rows.empty() || b.hasTimeline || b.hasTimelineSteps || !b.peaks.empty() ||
          !b.waits.empty())
        post(std::move(b));
    }
    if (more) QTimer::singleShot(0, this, [this] { poll(); });
  }

  void readRanges() {
    while (!ranges_.isEmpty() && open()) {
      const Range r = ranges_.take(ranges_.begin().key());
      if (r.epoch != epochSeen_) continue;
      for (const QString& key : r.keys) {
        ViewSpans v;
        v.first = r.first;
        v.last = r.last;
        v.buckets = r.buckets;
        Result<std::vector<storage::Bucket>> buckets =
            db_->downsample(r.run, key.toStdString(), r.first, r.last, r.buckets);
        if (!buckets) continue;
        v.spans.reserve(static_cast<qsizetype>(buckets->size()));
        for (const storage::Bucket& k : *buckets)
          v.spans.append({k.first_step, k.last_step, k.min, k.max, k.last, k.count});
        SeriesStore* store = store_;
        auto epoch = epoch_;
        QMetaObject::invokeMethod(
            store,
            [store, epoch, e = r.epoch, view = r.view, run = r.run, key,
             v = std::move(v)]() mutable {
              if (epoch->load() == e) store->setView(view, run, key, std::move(v));
            },
            Qt::QueuedConnection);
      }
    }
  }

  void post(FeedBatch b) {
    SeriesStore* store = store_;
    auto epoch = epoch_;
    QMetaObject::invokeMethod(
        store,
        [store, epoch, e = epochSeen_, b = std::move(b)] {
          if (epoch->load() == e) store->apply(b);
        },
        Qt::QueuedConnection);
  }

  DashboardFeed* feed_;
  SeriesStore* store_;
  std::shared_ptr<std::atomic<int>> epoch_;
  int epochSeen_ = 0;
  QString path_, problem_;
  std::unique_ptr<storage::RunStore> db_;
  QTimer* timer_ = nullptr;
  QHash<qint64, RunState> runs_;
  QHash<qint64, storage::Layout> layouts_;  // the recorded layout of each run shown
  QHash<QPair<int, qint64>, Range> ranges_;
};

DashboardFeed::DashboardFeed(SeriesStore* store, QObject* parent)
    : QObject(parent), store_(store), epoch_(std::make_shared<std::atomic<int>>(0)) {
  worker_ = new FeedWorker(this, store, epoch_);
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  thread_.setObjectName("dashboard feed");
  thread_.start();
  QMetaObject::invokeMethod(
      worker_, [w = worker_] { w->start(); }, Qt::QueuedConnection);
}

DashboardFeed::~DashboardFeed() {
  thread_.quit();
  thread_.wait();
}

void DashboardFeed::setDatabase(const QString& path) {
  QMetaObject::invokeMethod(
      worker_, [w = worker_, path] { w->setDatabase(path); }, Qt::QueuedConnection);
}

void DashboardFeed::showRuns(const QList<qint64>& runs) {
  const int epoch = ++*epoch_;
  store_->setRuns(runs);
  QMetaObject::invokeMethod(
      worker_, [w = worker_, runs, epoch] { w->showRuns(runs, epoch); }, Qt::QueuedConnection);
}

void DashboardFeed::requestRange(int view, qint64 run, const QStringList& keys, qint64 first,
                                 qint64 last, int buckets) {
  FeedWorker::Range r{view, run, keys, first, last, std::max(buckets, 1), epoch_->load()};
  QMetaObject::invokeMethod(
      worker_, [w = worker_, r] { w->requestRange(r); }, Qt::QueuedConnection);
}

void DashboardFeed::requestTimeline(qint64 run, qint64 step) {
  QMetaObject::invokeMethod(
      worker_, [w = worker_, run, step, e = epoch_->load()] { w->requestTimeline(run, step, e); },
      Qt::QueuedConnection);
}

}  // namespace lattice::ui
