#include "train/rank_reports.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <iterator>
#include <map>
#include <span>

#include "lattice/system_metrics.h"
#include "train/host_memory_check.h"

namespace lattice {

PhaseTimes per_iteration(const PhaseTimes& now, const PhaseTimes& before, int iterations) {
  const double per = 1.0 / std::max(iterations, 1);
  PhaseTimes d;
  d.forward = (now.forward - before.forward) * per;
  d.backward = (now.backward - before.backward) * per;
  d.pipeline_wait = (now.pipeline_wait - before.pipeline_wait) * per;
  d.dp_comm = (now.dp_comm - before.dp_comm) * per;
  d.optimizer = (now.optimizer - before.optimizer) * per;
  d.tp_comm = (now.tp_comm - before.tp_comm) * per;
  d.embedding_comm = (now.embedding_comm - before.embedding_comm) * per;
  return d;
}

double traffic_bytes(const Comm* comm) {
  if (!comm) return 0.0;
  const CommStats& s = comm->stats();
  return static_cast<double>(s.all_reduce_bytes + s.reduce_scatter_bytes + s.all_gather_bytes +
                             s.broadcast_bytes + s.gather_bytes + s.send_bytes);
}

std::vector<OpTime> op_totals(const std::vector<const Profiler*>& chunks, double optimizer) {
  std::vector<OpTime> ops;
  for (int i = 0; i < static_cast<int>(Op::kCount); i++) {
    const Op op = static_cast<Op>(i);
    OpTime t{op_name(op), 0, 0};
    for (const Profiler* p : chunks) {
      t.seconds += p->seconds(op);
      t.calls += p->calls(op);
    }
    ops.push_back(t);
  }
  ops.push_back({"optimizer (norm, clip, adamw)", optimizer, 0});
  return ops;
}

void add_op_times(std::vector<OpTime>& into, const std::vector<OpTime>& now,
                  const std::vector<OpTime>& before) {
  for (size_t i = 0; i < into.size() && i < now.size() && i < before.size(); i++) {
    into[i].seconds += now[i].seconds - before[i].seconds;
    into[i].calls += now[i].calls - before[i].calls;
  }
}

std::vector<RankReport> gather_rank_reports(Comm& world, const ParallelLayout& layout,
                                            const RankSample& mine) {
  const MemoryReport& mem = mine.memory;
  const PhaseTimes& t = mine.times;
  const double record[] = {static_cast<double>(mem.weights),
                           static_cast<double>(mem.grads),
                           static_cast<double>(mem.optimizer),
                           static_cast<double>(mem.activations),
                           static_cast<double>(mem.workspace),
                           static_cast<double>(mem.comm_buffers),
                           static_cast<double>(mem.peak_rss),
                           static_cast<double>(mem.fragmentation),
                           t.forward,
                           t.backward,
                           t.pipeline_wait,
                           t.dp_comm,
                           t.optimizer,
                           t.tp_comm,
                           t.embedding_comm,
                           mine.tp_bytes,
                           mine.dp_bytes,
                           mine.pp_bytes,
                           mine.embedding_bytes};
  constexpr size_t kRecord = std::size(record), kFields = kRecord + kSystemMetricsFields,
                   kTimelineHeader = 3, kBoxFields = 5;
  std::vector<double> sent(std::begin(record), std::end(record));
  sent.resize(kFields);
  pack_system_metrics(mine.system, sent.data() + kRecord);
  // Timeline part: iteration start (steady clock, seconds), host id, box count, then
  // (kind, stage, micro-batch, start, end) per box, zero-padded to the capacity.
  const bool with_timeline = mine.timeline != nullptr;
  if (with_timeline) {
    const size_t capacity = mine.timeline_capacity;
    const std::vector<TimelineBox>& boxes = mine.timeline->boxes();
    assert(boxes.size() <= capacity);
    const size_t count = std::min(boxes.size(), capacity);
    sent.reserve(kFields + kTimelineHeader + capacity * kBoxFields);
    sent.push_back(
        std::chrono::duration<double>(mine.timeline->origin().time_since_epoch()).count());
    sent.push_back(host_id());
    sent.push_back(static_cast<double>(count));
    for (const TimelineBox& b : std::span(boxes.data(), count))
      sent.insert(sent.end(), {static_cast<double>(b.kind), static_cast<double>(b.stage),
                               static_cast<double>(b.micro_batch), b.start, b.end});
    sent.resize(kFields + kTimelineHeader + capacity * kBoxFields, 0.0);
  }
  const size_t fields = sent.size();
  std::vector<double> all(fields * world.size());
  if (world.size() == 1)
    std::copy(sent.begin(), sent.end(), all.begin());
  else if (Status s = world.gather(sent.data(), all.data(), fields, DType::kFloat64, 0); !s)
    world.abort("could not gather the ranks' reports: " + s.message(), 1);
  std::vector<RankReport> out;
  if (world.rank() != 0) return out;
  std::map<double, double> machine_origin;  // host id -> earliest iteration start
  if (with_timeline)
    for (int r = 0; r < world.size(); r++) {
      const double* h = all.data() + r * fields + kFields;
      auto [slot, fresh] = machine_origin.emplace(h[1], h[0]);
      if (!fresh) slot->second = std::min(slot->second, h[0]);
    }
  for (int r = 0; r < world.size(); r++) {
    const double* x = all.data() + r * fields;
    RankReport rep;
    const ParallelLayout::Coord c = layout.coord(r);
    rep.rank = r;
    rep.tp = c.tp;
    rep.dp = c.dp;
    rep.pp = c.pp;
    size_t* m[] = {&rep.memory.weights,     &rep.memory.grads,        &rep.memory.optimizer,
                   &rep.memory.activations, &rep.memory.workspace,    &rep.memory.comm_buffers,
                   &rep.memory.peak_rss,    &rep.memory.fragmentation};
    for (size_t i = 0; i < std::size(m); i++) *m[i] = static_cast<size_t>(x[i]);
    rep.times.forward = x[8];
    rep.times.backward = x[9];
    rep.times.pipeline_wait = x[10];
    rep.times.dp_comm = x[11];
    rep.times.optimizer = x[12];
    rep.times.tp_comm = x[13];
    rep.times.embedding_comm = x[14];
    rep.tp_bytes = x[15];
    rep.dp_bytes = x[16];
    rep.pp_bytes = x[17];
    rep.embedding_bytes = x[18];
    rep.system = unpack_system_metrics(x + kRecord);
    if (with_timeline) {
      const double* h = x + kFields;
      const double shift = h[0] - machine_origin.at(h[1]);
      const size_t count = static_cast<size_t>(h[2]);
      rep.timeline.reserve(count);
      for (size_t i = 0; i < count; i++) {
        const double* b = h + kTimelineHeader + i * kBoxFields;
        rep.timeline.push_back({static_cast<TimelineBox::Kind>(b[0]), static_cast<int>(b[1]),
                                static_cast<int>(b[2]), b[3] + shift, b[4] + shift});
      }
    }
    out.push_back(std::move(rep));
  }
  return out;
}

}  // namespace lattice
