// SeriesStore: folds feed batches into bounded tails, anchors and snapshots.
#include "dashboard/series_store.h"

#include <algorithm>
#include <cstring>

namespace lattice::ui {

const char* const kPhaseKeys[kPhaseCount] = {
    "forward time",        "backward time",           "pipeline wait time",
    "embedding comm time", "data-parallel comm time", "optimizer time"};

namespace {

// "rank R <phase>" -> (R, phase index); false for any other key.
bool parsePhaseKey(const std::string& key, int* rank, int* phase) {
  if (key.rfind("rank ", 0) != 0) return false;
  std::size_t i = 5, r = 0;
  if (i >= key.size() || key[i] < '0' || key[i] > '9') return false;
  while (i < key.size() && key[i] >= '0' && key[i] <= '9') r = r * 10 + (key[i++] - '0');
  if (i >= key.size() || key[i] != ' ') return false;
  const char* rest = key.c_str() + i + 1;
  for (int p = 0; p < kPhaseCount; p++) {
    if (std::strcmp(rest, kPhaseKeys[p]) == 0) {
      *rank = static_cast<int>(r);
      *phase = p;
      return true;
    }
  }
  return false;
}

}  // namespace

void Anchors::add(qint64 step, double value) {
  if (!steps_.isEmpty() && step <= steps_.back()) return;
  steps_ << static_cast<double>(step);
  values_ << value;
  if (steps_.size() > kMaxAnchors) {
    QVector<double> s, v;
    s.reserve(kMaxAnchors / 2 + 1);
    v.reserve(kMaxAnchors / 2 + 1);
    for (int i = 0; i < steps_.size(); i += 2) s << steps_[i], v << values_[i];
    if (s.back() != steps_.back()) s << steps_.back(), v << values_.back();
    steps_.swap(s);
    values_.swap(v);
  }
}

namespace {
// Piecewise-linear y(x) through (xs, ys), xs ascending; extrapolated with the end slopes.
double interpolate(const QVector<double>& xs, const QVector<double>& ys, double x) {
  if (xs.isEmpty()) return x;
  if (xs.size() == 1) return ys[0];
  auto it = std::upper_bound(xs.begin(), xs.end(), x);
  qsizetype i = std::clamp<qsizetype>(it - xs.begin(), 1, xs.size() - 1);
  const double x0 = xs[i - 1], x1 = xs[i];
  const double t = x1 == x0 ? 0 : (x - x0) / (x1 - x0);
  return ys[i - 1] + t * (ys[i] - ys[i - 1]);
}
}  // namespace

double Anchors::at(double step) const {
  return interpolate(steps_, values_, step);
}
double Anchors::stepAt(double value) const {
  return interpolate(values_, steps_, value);
}

SeriesStore::SeriesStore(QObject* parent) : QObject(parent) {}

void SeriesStore::clear() {
  runs_.clear();
  data_.clear();
  rowsSeen_ = 0;
  emit changed();
}

void SeriesStore::setLineage(qint64 run, QHash<QString, LineageCurve> curves) {
  auto it = data_.find(run);
  if (it == data_.end()) return;
  it->lineage = std::move(curves);
  emit changed();
}

const LineageCurve* SeriesStore::lineage(qint64 run, const QString& key) const {
  auto it = data_.find(run);
  if (it == data_.end()) return nullptr;
  auto curve = it->lineage.find(key);
  return curve == it->lineage.end() ? nullptr : &*curve;
}

void SeriesStore::setRuns(const QList<qint64>& runs) {
  // A fresh start even for runs shown before: the database may have changed under the ids.
  runs_ = runs;
  data_.clear();
  rowsSeen_ = 0;
  for (qint64 r : runs) data_[r].meta.id = r;
  emit changed();
}

void SeriesStore::apply(const FeedBatch& b) {
  auto found = data_.find(b.run);
  if (found == data_.end()) return;  // a batch for a run no longer shown
  RunData& d = *found;
  if (b.hasMeta) d.meta = b.meta;
  for (const auto& [step, value] : b.samplesHistory) d.samples.add(step, value);
  for (const auto& [step, value] : b.wallHistory) d.wall.add(step, value);
  qint64 wallStep = -1;
  for (const storage::MetricRow& row : b.rows) {
    rowsSeen_++;
    d.lastStep = std::max<qint64>(d.lastStep, row.step);
    if (row.step > wallStep) {
      d.wall.add(row.step, row.wall_time);
      wallStep = row.step;
    }
    int rank = 0, phase = 0;
    if (parsePhaseKey(row.key, &rank, &phase)) {
      if (row.step != d.phases.step && row.step > d.phases.step) {
        d.phases.step = row.step;
        d.phases.byRank.clear();
      }
      if (row.step == d.phases.step) d.phases.byRank[rank][phase] = row.value;
      continue;
    }
    if (row.key == "consumed samples") d.samples.add(row.step, row.value);
    Tail& t = d.tails[QString::fromStdString(row.key)];
    if (!t.steps.isEmpty() && row.step <= t.steps.back()) {
      if (row.step == t.steps.back()) t.values.back() = row.value;  // a repeated step
      continue;
    }
    t.steps << row.step;
    t.values << row.value;
    if (t.steps.size() > Tail::kMaxTail) {
      const int drop = Tail::kMaxTail / 2;
      t.steps.remove(0, drop);
      t.values.remove(0, drop);
      t.from = t.steps.front();
    }
  }
  if (b.phases.step >= 0 && b.phases.step >= d.phases.step) d.phases = b.phases;
  if (b.memory.step >= 0 && b.memory.step >= d.memory.step) d.memory = b.memory;
  if (b.hasTimelineSteps && b.timelineSteps != d.timeline.steps) {
    d.timeline.steps = b.timelineSteps;
    emit timelineStepsChanged(b.run);
  }
  if (b.hasTimeline) {
    d.timeline.step = b.timelineStep;
    d.timeline.events = b.timeline;
  }
  if (b.hasPlan) {
    d.estimate.known = true;
    d.estimate.plan = b.plan;
    d.estimate.problem = b.planProblem;
  }
  if (!b.peaks.empty()) d.estimate.peaks = b.peaks;
  for (const PipelineWait& w : b.waits) {
    std::vector<PipelineWait>& all = d.estimate.waits;
    auto at = std::lower_bound(all.begin(), all.end(), w.step,
                               [](const PipelineWait& x, qint64 step) { return x.step < step; });
    if (at != all.end() && at->step == w.step)
      *at = w;
    else
      all.insert(at, w);
  }
  if (b.hasMeta) d.lastStep = std::max(d.lastStep, d.meta.latestStep);
  emit changed();
}

void SeriesStore::setView(int view, qint64 run, const QString& key, ViewSpans spans) {
  auto found = data_.find(run);
  if (found == data_.end()) return;
  found->views[{view, key}] = std::move(spans);
  emit changed();
}

const RunMeta* SeriesStore::meta(qint64 run) const {
  auto it = data_.find(run);
  return it == data_.end() ? nullptr : &it->meta;
}

const Tail* SeriesStore::tail(qint64 run, const QString& key) const {
  auto it = data_.find(run);
  if (it == data_.end()) return nullptr;
  auto t = it->tails.find(key);
  return t == it->tails.end() ? nullptr : &*t;
}

const ViewSpans* SeriesStore::view(int view, qint64 run, const QString& key) const {
  auto it = data_.find(run);
  if (it == data_.end()) return nullptr;
  auto v = it->views.find({view, key});
  return v == it->views.end() ? nullptr : &*v;
}

qint64 SeriesStore::lastStep(qint64 run) const {
  auto it = data_.find(run);
  return it == data_.end() ? -1 : it->lastStep;
}

const Anchors* SeriesStore::samplesAnchors(qint64 run) const {
  auto it = data_.find(run);
  return it == data_.end() ? nullptr : &it->samples;
}

const Anchors* SeriesStore::wallAnchors(qint64 run) const {
  auto it = data_.find(run);
  return it == data_.end() ? nullptr : &it->wall;
}

const PhaseSample* SeriesStore::phases(qint64 run) const {
  auto it = data_.find(run);
  return it == data_.end() ? nullptr : &it->phases;
}

const MemorySnapshot* SeriesStore::memory(qint64 run) const {
  auto it = data_.find(run);
  return it == data_.end() ? nullptr : &it->memory;
}

const EstimateSnapshot* SeriesStore::estimate(qint64 run) const {
  auto it = data_.find(run);
  return it == data_.end() ? nullptr : &it->estimate;
}

const TimelineSnapshot* SeriesStore::timeline(qint64 run) const {
  auto it = data_.find(run);
  return it == data_.end() ? nullptr : &it->timeline;
}

}  // namespace lattice::ui
