// The Dashboard's data model (PlotJuggler style: charts read it, never own data). Per shown
// run: the live tail of every metric series (raw points, bounded), the down-sampled ranges
// that charts asked for (one per chart and series), the step -> consumed samples and
// step -> wall time anchors behind the x axis modes, the latest memory samples and timer
// breakdown, and the pipeline timeline. Lives on the UI thread; DashboardFeed fills it.
// Not a cache of whole series: a 1M-point run costs a tail and a few pixel widths of spans.
#pragma once

#include <QHash>
#include <QMap>
#include <QObject>
#include <QString>
#include <QVector>
#include <array>
#include <optional>
#include <vector>

#include "dashboard/lineage_series.h"
#include "lattice/run_estimate.h"
#include "lattice/storage/run_store.h"

namespace lattice::ui {

// A plotted sample: a raw point (count 1: min = max = last) or a down-sampled bucket.
struct Span {
  qint64 firstStep = 0, lastStep = 0;
  double min = 0, max = 0, last = 0;
  qint64 count = 1;
};

// Monotone step -> value anchors, linearly interpolated (and extrapolated with the last
// slope). Bounded: past kMaxAnchors every other anchor is dropped.
class Anchors {
 public:
  static constexpr int kMaxAnchors = 8192;
  void add(qint64 step, double value);
  bool isEmpty() const { return steps_.isEmpty(); }
  int size() const { return steps_.size(); }
  double at(double step) const;
  double stepAt(double value) const;  // the inverse (values must increase)
  void clear() {
    steps_.clear();
    values_.clear();
  }

 private:
  QVector<double> steps_, values_;
};

struct RunMeta {
  qint64 id = 0;
  QString name, status, host;
  int seqLength = 0;        // "seq-length" of the run's configuration JSON; 0 unknown
  bool onThisHost = false;  // the run's host is this machine
  bool cpu = true;          // no GPU device in the configuration
  double startedAt = 0;     // Unix seconds (created_at when it never started)
  qint64 latestStep = -1;
  int tp = 1, pp = 1, dp = 1;  // the run's layout (Megatron's rank order)
  QString error;               // a failed run's error (it may name an absent rank)
  // MoE models: "num-experts" of the configuration (0: dense) and the MoE layers
  // (ModelConfig::is_moe_layer of its "num-layers" and "moe-layer-freq").
  int numExperts = 0;
  QList<int> moeLayers;
};

// The six phases of the engine's timer breakdown, in stacking order.
inline constexpr int kPhaseCount = 6;
extern const char* const kPhaseKeys[kPhaseCount];  // "forward time", ... (after "rank R ")

struct PhaseSample {
  qint64 step = -1;
  QMap<int, std::array<double, kPhaseCount>> byRank;  // seconds per phase and iteration
};

struct MemorySnapshot {
  qint64 step = -1;
  std::vector<storage::MemorySample> ranks;
};

// The planner's estimate for the run (plan_recorded_run, read once on the feed's thread: it
// may read tokenizer files) or why there is none, the measured peaks per rank, and the
// measured pipeline wait of every recorded iteration (Note [pipeline wait]).
struct EstimateSnapshot {
  bool known = false;  // the feed has answered (with a plan or a problem)
  std::optional<RecordedRunPlan> plan;
  QString problem;                         // why there is no plan
  std::vector<storage::StepMemory> peaks;  // memory_peaks, by rank
  std::vector<PipelineWait> waits;         // by step
};

struct TimelineSnapshot {
  QVector<qint64> steps;  // steps with events, ascending
  qint64 step = -1;       // the step of `events`
  std::vector<storage::TimelineEvent> events;
};

// The live points of one series: steps ascending, at most kMaxTail (the oldest half is
// dropped beyond; `from` is then the first step kept).
struct Tail {
  static constexpr int kMaxTail = 65536;
  QVector<qint64> steps;
  QVector<double> values;
  qint64 from = 0;
};

// A down-sampled read of [first, last] for one chart view.
struct ViewSpans {
  qint64 first = 0, last = -1;
  int buckets = 0;
  QVector<Span> spans;
};

struct FeedBatch;

class SeriesStore : public QObject {
  Q_OBJECT

 public:
  explicit SeriesStore(QObject* parent = nullptr);

  void clear();
  void setRuns(const QList<qint64>& runs);  // forgets everything held before
  const QList<qint64>& runs() const { return runs_; }

  // ---- filled by the feed (UI thread) ----
  void apply(const FeedBatch& batch);
  void setView(int view, qint64 run, const QString& key, ViewSpans spans);
  // The ancestors' points of the run's keys (readLineage), read when the run is shown.
  void setLineage(qint64 run, QHash<QString, LineageCurve> curves);

  // ---- read by the charts ----
  const RunMeta* meta(qint64 run) const;
  const Tail* tail(qint64 run, const QString& key) const;
  const ViewSpans* view(int view, qint64 run, const QString& key) const;
  qint64 lastStep(qint64 run) const;  // the newest step seen, -1 when none
  const Anchors* samplesAnchors(qint64 run) const;
  const Anchors* wallAnchors(qint64 run) const;
  const PhaseSample* phases(qint64 run) const;
  const MemorySnapshot* memory(qint64 run) const;
  const TimelineSnapshot* timeline(qint64 run) const;
  const EstimateSnapshot* estimate(qint64 run) const;
  const LineageCurve* lineage(qint64 run, const QString& key) const;  // null: none
  qint64 rowsSeen() const { return rowsSeen_; }

 signals:
  // Something changed (coalesce: several per batch are possible).
  void changed();
  void timelineStepsChanged(qint64 run);

 private:
  struct RunData {
    RunMeta meta;
    QHash<QString, Tail> tails;
    QHash<QPair<int, QString>, ViewSpans> views;
    Anchors samples, wall;
    PhaseSample phases;
    MemorySnapshot memory;
    TimelineSnapshot timeline;
    EstimateSnapshot estimate;
    QHash<QString, LineageCurve> lineage;
    qint64 lastStep = -1;
  };
  QList<qint64> runs_;
  QHash<qint64, RunData> data_;
  qint64 rowsSeen_ = 0;
};

// What the feed hands to the UI thread for one run (see dashboard_feed.h).
struct FeedBatch {
  qint64 run = 0;
  bool hasMeta = false;
  RunMeta meta;
  std::vector<storage::MetricRow> rows;  // new metric rows, id order
  // History anchors read when the run was first shown (step, consumed samples / wall time).
  std::vector<std::pair<qint64, double>> samplesHistory, wallHistory;
  PhaseSample phases;  // step -1: none read
  MemorySnapshot memory;
  bool hasTimelineSteps = false;
  QVector<qint64> timelineSteps;
  bool hasTimeline = false;
  qint64 timelineStep = -1;
  std::vector<storage::TimelineEvent> timeline;
  bool hasPlan = false;  // estimate.plan / estimate.problem answer for the run
  std::optional<RecordedRunPlan> plan;
  QString planProblem;
  std::vector<storage::StepMemory> peaks;  // empty: unchanged
  std::vector<PipelineWait> waits;         // iterations measured since the last batch
};

}  // namespace lattice::ui
