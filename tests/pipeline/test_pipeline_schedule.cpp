// Pipeline schedules as specifications: every micro-batch's forward and backward appear once
// per chunk in a causal order, 1F1B warms up pp - rank - 1 micro-batches, the interleaved
// order is Megatron's, and no combination of stages, chunks and micro-batches deadlocks under
// the pipeline executor's rules (PipelineExecutor, Note [pipeline streams]) — checked by
// simulating every rank's streams at once — while the two mistakes that note rules out do.
#include <QtTest/QtTest>

#include <array>
#include <map>

#include "pipeline/executor.h"
#include "pipeline/schedule.h"

using lattice::pipeline_schedule;
using lattice::PipelineAction;

namespace {

// A rank's streams (Note [pipeline streams]): compute, and one per channel. Each runs its
// operations in issue order; a channel's messages to one peer match the peer's receives from
// it in issue order on the same channel (NCCL's point-to-point semantics: no tags).
enum Stream { kCompute, kActivations, kGradients, kActivationsWrap, kGradientsWrap, kStreams };
const char* const kStreamNames[kStreams] = {"compute", "activations", "gradients",
                                            "activations-wrap", "gradients-wrap"};

// The stream each of PipelineExecutor's four channels is on. The default is PipelineExecutor's; the
// others are the mistakes the note says would deadlock, to show the simulation finds them.
struct Routing {
  Stream activations = kActivations, gradients = kGradients;
  Stream activations_wrap = kActivationsWrap, gradients_wrap = kGradientsWrap;
};
constexpr Routing kGradientsOnActivations{kActivations, kActivations, kActivationsWrap,
                                          kActivationsWrap};
constexpr Routing kWrapOnActivations{kActivations, kGradients, kActivations, kGradients};

// One queued operation. A message is named by the virtual stage that produced it: activation
// s goes from stage s to s + 1, gradient s (stage s's input gradient) from s to s - 1.
struct Op {
  enum Kind { kRun, kWait, kSend, kReceive };
  Kind kind;
  bool backward;    // kRun: a backward pass; kSend, kReceive: a gradient (else an activation)
  int stage;        // kRun: the virtual stage run; kSend, kReceive: the message's stage
  int micro_batch;  // of the pass or the message
  int peer;         // kSend, kReceive: the other rank
  Stream stream;    // kWait: the stream waited for, until its first `until` operations are done
  size_t until;
};

// The device's event: a stream's first `until` operations (until 0: no record yet, complete).
struct Event {
  Stream stream = kCompute;
  size_t until = 0;
};

// One rank's queues as PipelineExecutor builds them (train, evaluate, acquire, forward_one,
// backward_one, join in pipeline/executor.cpp): the host only queues, the streams run the work.
class RankQueues {
 public:
  RankQueues(int stages, int rank, int chunks, const Routing& routing)
      : stages_(stages), rank_(rank), chunks_(chunks), routing_(routing) {}

  // PipelineExecutor::train: each chunk's slots as the trainers size them (chunk_peaks),
  // handed out and returned as acquire does.
  QString train(int micro_batches) {
    const std::vector<int> pool = lattice::chunk_peaks(stages_, rank_, chunks_, micro_batches);
    output_sent_.assign(chunks_, {});
    input_grad_sent_.assign(chunks_, {});
    std::vector<std::vector<int>> free_slots(chunks_),
        in_flight(chunks_, std::vector<int>(micro_batches, -1));
    for (int c = 0; c < chunks_; c++) {
      output_sent_[c].resize(pool[c]);
      input_grad_sent_[c].resize(pool[c]);
      for (int s = pool[c] - 1; s >= 0; s--) free_slots[c].push_back(s);
    }
    for (const PipelineAction& a : pipeline_schedule(stages_, rank_, chunks_, micro_batches)) {
      const int c = a.chunk, mb = a.micro_batch;
      if (a.kind == PipelineAction::kForward) {
        if (free_slots[c].empty())
          return QString("rank %1: more micro-batches in flight than slots (%2)")
              .arg(rank_)
              .arg(pool[c]);
        in_flight[c][mb] = free_slots[c].back();
        free_slots[c].pop_back();
        forward_one(c, mb, in_flight[c][mb]);
        continue;
      }
      if (in_flight[c][mb] < 0)
        return QString("rank %1: backward of chunk %2 micro-batch %3 before its forward")
            .arg(rank_)
            .arg(c)
            .arg(mb);
      backward_one(c, mb, in_flight[c][mb]);
      free_slots[c].push_back(in_flight[c][mb]);
      in_flight[c][mb] = -1;
    }
    join();
    return "";
  }

  // PipelineExecutor::evaluate: forwards only, micro-batch by micro-batch, each chunk in slot 0.
  void evaluate(int micro_batches) {
    output_sent_.assign(chunks_, std::vector<Event>(1));
    for (int mb = 0; mb < micro_batches; mb++)
      for (int c = 0; c < chunks_; c++) forward_one(c, mb, 0);
    join();
  }

  const std::vector<Op>& stream(int s) const { return streams_[s]; }

 private:
  bool first_virtual(int c) const { return c == 0 && rank_ == 0; }
  bool last_virtual(int c) const { return c == chunks_ - 1 && rank_ == stages_ - 1; }
  int stage_of(int c) const { return c * stages_ + rank_; }
  // pipeline/executor.h's input_channel, output_channel, output_grad_channel, input_grad_channel.
  Stream input_channel(int c) const {
    return rank_ == 0 && c > 0 ? routing_.activations_wrap : routing_.activations;
  }
  Stream output_channel() const {
    return rank_ == stages_ - 1 ? routing_.activations_wrap : routing_.activations;
  }
  Stream output_grad_channel() const {
    return rank_ == stages_ - 1 ? routing_.gradients_wrap : routing_.gradients;
  }
  Stream input_grad_channel() const {
    return rank_ == 0 ? routing_.gradients_wrap : routing_.gradients;
  }

  Event record(Stream s) const { return {s, streams_[s].size()}; }
  void wait(Stream waiter, Event e) {
    if (e.until > 0) streams_[waiter].push_back({Op::kWait, false, 0, 0, 0, e.stream, e.until});
  }
  void follow(Stream waiter, Stream s) { wait(waiter, record(s)); }
  void run(bool backward, int c, int mb) {
    streams_[kCompute].push_back({Op::kRun, backward, stage_of(c), mb, 0, kCompute, 0});
  }
  void message(Op::Kind kind, Stream on, bool gradient, int stage, int mb, int peer) {
    streams_[on].push_back({kind, gradient, stage, mb, peer, kCompute, 0});
  }

  void forward_one(int c, int mb, int s) {
    const int prev = (rank_ + stages_ - 1) % stages_, next = (rank_ + 1) % stages_;
    wait(kCompute, output_sent_[c][s]);  // the slot's output from its previous micro-batch
    if (!first_virtual(c)) {
      const Stream in = input_channel(c);
      follow(in, kCompute);
      message(Op::kReceive, in, false, stage_of(c) - 1, mb, prev);
      follow(kCompute, in);
    }
    run(false, c, mb);
    if (last_virtual(c)) return;
    const Stream out = output_channel();
    follow(out, kCompute);
    message(Op::kSend, out, false, stage_of(c), mb, next);
    output_sent_[c][s] = record(out);
  }

  void backward_one(int c, int mb, int s) {
    const int prev = (rank_ + stages_ - 1) % stages_, next = (rank_ + 1) % stages_;
    if (!last_virtual(c)) {
      const Stream in = output_grad_channel();
      follow(in, kCompute);
      message(Op::kReceive, in, true, stage_of(c) + 1, mb, next);
      follow(kCompute, in);
    }
    wait(kCompute, input_grad_sent_[c][s]);  // the slot's input_grad from its previous use
    run(true, c, mb);
    if (first_virtual(c)) return;
    const Stream out = input_grad_channel();
    follow(out, kCompute);
    message(Op::kSend, out, true, stage_of(c), mb, prev);
    input_grad_sent_[c][s] = record(out);
  }

  void join() {
    for (Stream s : {kActivations, kGradients, kActivationsWrap, kGradientsWrap})
      follow(kCompute, s);
  }

  int stages_, rank_, chunks_;
  Routing routing_;
  std::array<std::vector<Op>, kStreams> streams_;
  std::vector<std::vector<Event>> output_sent_, input_grad_sent_;  // [chunk][slot]
};

QString describe(const Op& op, const RankQueues& rank) {
  const QString msg = QString("%1 s%2 m%3")
                          .arg(op.backward ? "gradient" : "activation")
                          .arg(op.stage)
                          .arg(op.micro_batch);
  switch (op.kind) {
    case Op::kRun:
      return QString("%1 s%2 m%3").arg(op.backward ? "B" : "F").arg(op.stage).arg(op.micro_batch);
    case Op::kSend:
      return QString("send %1 to rank %2").arg(msg).arg(op.peer);
    case Op::kReceive:
      return QString("receive %1 from rank %2").arg(msg).arg(op.peer);
    case Op::kWait:
      return QString("wait for %1 (%2)")
          .arg(kStreamNames[op.stream])
          .arg(describe(rank.stream(op.stream)[op.until - 1], rank));
  }
  return "";
}

// Runs every rank's streams as far as they can go: a run completes when reached, a wait once
// its stream has done `until` operations, a send together with the receive it matches, once
// both are at the head of their streams (rendezvous). Returns "" or what is stuck where; a
// send that meets the receive of another message (ranks disagreeing on the order of a
// channel's messages: mixed-up data, not a hang) stops it at once.
QString run_streams(const std::vector<RankQueues>& ranks) {
  const int stages = static_cast<int>(ranks.size());
  std::vector<std::array<size_t, kStreams>> done(stages);
  for (auto& d : done) d.fill(0);
  auto head = [&](int r, int s) -> const Op* {
    const std::vector<Op>& ops = ranks[r].stream(s);
    return done[r][s] < ops.size() ? &ops[done[r][s]] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < stages; r++)
      for (int s = 0; s < kStreams; s++)
        for (const Op* op = head(r, s); op; op = head(r, s)) {
          if (op->kind == Op::kWait && done[r][op->stream] < op->until) break;
          if (op->kind == Op::kReceive) break;  // completes with its send
          if (op->kind == Op::kSend) {
            const Op* peer = head(op->peer, s);
            if (!peer || peer->kind != Op::kReceive || peer->peer != r) break;
            if (peer->backward != op->backward || peer->stage != op->stage ||
                peer->micro_batch != op->micro_batch)
              return QString("rank %1's %2 stream: %3 meets rank %4's %5")
                  .arg(r)
                  .arg(kStreamNames[s])
                  .arg(describe(*op, ranks[r]))
                  .arg(op->peer)
                  .arg(describe(*peer, ranks[op->peer]));
            done[op->peer][s]++;
          }
          done[r][s]++;
          progress = true;
        }
  }
  QStringList stuck;
  for (int r = 0; r < stages; r++) {
    QStringList streams;
    for (int s = 0; s < kStreams; s++) {
      const Op* op = head(r, s);
      if (!op) continue;
      QString line = QString("%1 at %2").arg(kStreamNames[s]).arg(describe(*op, ranks[r]));
      if (op->kind == Op::kSend || op->kind == Op::kReceive) {
        const Op* peer = head(op->peer, s);
        line += QString(" (rank %1's %2 %3)")
                    .arg(op->peer)
                    .arg(kStreamNames[s])
                    .arg(peer ? "at " + describe(*peer, ranks[op->peer]) : QString("is done"));
      }
      streams << line;
    }
    if (!streams.isEmpty()) stuck << QString("rank %1: %2").arg(r).arg(streams.join("; "));
  }
  return stuck.isEmpty() ? "" : "deadlock:\n  " + stuck.join("\n  ");
}

// Every rank of a pipeline of `stages` runs one training iteration (or, with evaluate, one
// validation pass) as PipelineExecutor queues it, channels on the streams `routing` names. Stricter
// than the CPU executor's rule (sends from copies that never block, matched by tag): each of
// its dependencies (a pass waits for the message it reads, which waits for the pass that wrote
// it) is one here too, so a layout that finishes here finishes there: one simulation for both.
QString simulate(int stages, int chunks, int micro_batches, const Routing& routing = {},
                 bool evaluate = false) {
  std::vector<RankQueues> ranks;
  for (int r = 0; r < stages; r++) {
    ranks.emplace_back(stages, r, chunks, routing);
    if (evaluate) {
      ranks.back().evaluate(micro_batches);
    } else if (QString why = ranks.back().train(micro_batches); !why.isEmpty()) {
      return why;
    }
  }
  return run_streams(ranks);
}

// Whether some rank's schedule runs a forward after a backward (1F1B's steady phase).
bool forward_after_backward(int stages, int chunks, int micro_batches) {
  for (int r = 0; r < stages; r++) {
    bool backward = false;
    for (const PipelineAction& a : pipeline_schedule(stages, r, chunks, micro_batches)) {
      if (a.kind == PipelineAction::kForward && backward) return true;
      backward = backward || a.kind == PipelineAction::kBackward;
    }
  }
  return false;
}

}  // namespace

class PipelineSchedule : public QObject {
  Q_OBJECT
 private slots:
  void no_pipeline_is_gradient_accumulation() {
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(1, 0, 1, 3))),
             QString("F0.0 B0.0 F0.1 B0.1 F0.2 B0.2"));
  }

  void one_f_one_b_warms_up_by_stage() {
    // 4 stages, 6 micro-batches: rank 0 runs 3 forwards first, the last rank none.
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(4, 0, 1, 6))),
             QString("F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 B0.3 B0.4 B0.5"));
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(4, 3, 1, 6))),
             QString("F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3 F0.4 B0.4 F0.5 B0.5"));
    // Fewer micro-batches than stages: all forwards, then all backwards.
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(4, 0, 1, 2))),
             QString("F0.0 F0.1 B0.0 B0.1"));
  }

  void interleaved_order_is_megatrons() {
    // pp 2, 2 chunks, 4 micro-batches, rank 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards in
    // groups of pp micro-batches per chunk; backwards run the chunks in reverse.
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(2, 0, 2, 4))),
             QString("F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 "
                     "B0.2 B0.3"));
  }

  void every_pass_once_forward_first() {
    for (int stages : {1, 2, 3, 4})
      for (int chunks : {1, 2, 3})
        for (int m : {1, 2, 4, 6, 8, 12}) {
          if (stages == 1 && chunks > 1) continue;
          if (chunks > 1 && m % stages != 0) continue;
          for (int r = 0; r < stages; r++) {
            std::map<std::pair<int, int>, int> seen;  // (chunk, mb) -> 1 after F, 2 after B
            for (const PipelineAction& a : pipeline_schedule(stages, r, chunks, m)) {
              int& state = seen[{a.chunk, a.micro_batch}];
              QVERIFY2(state == (a.kind == PipelineAction::kForward ? 0 : 1),
                       qPrintable(QString("pp %1 chunks %2 m %3 rank %4: chunk %5 mb %6 out of "
                                          "order")
                                      .arg(stages)
                                      .arg(chunks)
                                      .arg(m)
                                      .arg(r)
                                      .arg(a.chunk)
                                      .arg(a.micro_batch)));
              state++;
            }
            QCOMPARE(static_cast<int>(seen.size()), chunks * m);
            for (const auto& [key, state] : seen) QCOMPARE(state, 2);
          }
        }
  }

  // PipelineExecutor's streams finish on every layout, training and validation: rendezvous sends,
  // each channel in issue order, a slot rewritten only after its previous sends.
  void no_schedule_deadlocks() {
    for (int stages : {2, 3, 4, 8})
      for (int chunks : {1, 2, 4})
        for (int m : {1, 2, 3, 4, 8, 16}) {
          if (chunks > 1 && m % stages != 0) continue;
          for (bool evaluate : {false, true}) {
            const QString why = simulate(stages, chunks, m, Routing{}, evaluate);
            QVERIFY2(why.isEmpty(), qPrintable(QString("pp %1 chunks %2 m %3 %4: %5")
                                                   .arg(stages)
                                                   .arg(chunks)
                                                   .arg(m)
                                                   .arg(evaluate ? "validation" : "training")
                                                   .arg(why)));
          }
        }
  }

  // Forward and backward on one channel: "send an activation, then receive a gradient" on two
  // neighbours waits both ways (Megatron groups such pairs instead) — on every layout whose
  // schedule runs forwards after backwards. The others (one micro-batch; interleaving with
  // M = pp, where everything warms up) send all activations before the first gradient.
  void forward_and_backward_on_one_channel_deadlock() {
    const QString why = simulate(4, 1, 8, kGradientsOnActivations);
    QVERIFY2(why.contains("rank 3: compute at wait for activations (receive activation s2 m1 "
                          "from rank 2); activations at send gradient s3 m0 to rank 2 (rank "
                          "2's activations at send activation s2 m1 to rank 3)"),
             qPrintable(why));
    for (int stages : {2, 3, 4, 8})
      for (int chunks : {1, 2, 4})
        for (int m : {1, 2, 3, 4, 8, 16}) {
          if (chunks > 1 && m % stages != 0) continue;
          const QString found = simulate(stages, chunks, m, kGradientsOnActivations);
          QVERIFY2(found.startsWith("deadlock") == forward_after_backward(stages, chunks, m),
                   qPrintable(QString("pp %1 chunks %2 m %3: %4")
                                  .arg(stages)
                                  .arg(chunks)
                                  .arg(m)
                                  .arg(found.isEmpty() ? "finished" : found)));
        }
  }

  // The wrap-around on the activation (and gradient) channel: the last stage's sends to the
  // first close the chain of "receive from r - 1, send to r + 1" into a ring, and once every
  // rank has a send queued before its next receive, no send's receive is ever reached.
  void wrap_around_on_the_activation_channel_deadlocks() {
    const QString why = simulate(4, 2, 8, kWrapOnActivations);
    for (int r = 0; r < 4; r++)
      QVERIFY2(why.contains(QString("rank %1's activations at send activation s%2 m%3 to rank %4")
                                .arg((r + 1) % 4)
                                .arg((r + 1) % 4)
                                .arg(3 - (r + 1) % 4)
                                .arg((r + 2) % 4)),
               qPrintable(why));
    for (int stages : {2, 3, 4, 8})
      for (int chunks : {1, 2, 4})
        for (int m : {1, 2, 3, 4, 8, 16}) {
          if (chunks > 1 && m % stages != 0) continue;
          const QString found = simulate(stages, chunks, m, kWrapOnActivations);
          QVERIFY2(found.startsWith("deadlock") == (chunks > 1),
                   qPrintable(QString("pp %1 chunks %2 m %3: %4")
                                  .arg(stages)
                                  .arg(chunks)
                                  .arg(m)
                                  .arg(found.isEmpty() ? "finished" : found)));
        }
  }

  // chunk_peaks is each chunk's high-water mark of live micro-batches in the schedule itself.
  void chunk_peaks_are_each_chunks_most_in_flight() {
    for (int stages : {1, 2, 3, 4, 8})
      for (int chunks : {1, 2, 3, 4})
        for (int m : {1, 2, 3, 4, 8, 12, 16, 24}) {
          if (chunks > 1 && (m % stages != 0 || stages == 1)) continue;
          for (int r = 0; r < stages; r++) {
            std::vector<int> live(chunks, 0), peak(chunks, 0);
            for (const PipelineAction& a : pipeline_schedule(stages, r, chunks, m)) {
              live[a.chunk] += a.kind == PipelineAction::kForward ? 1 : -1;
              peak[a.chunk] = std::max(peak[a.chunk], live[a.chunk]);
            }
            QVERIFY2(
                lattice::chunk_peaks(stages, r, chunks, m) == peak,
                qPrintable(
                    QString("pp %1 rank %2 chunks %3 m %4").arg(stages).arg(r).arg(chunks).arg(m)));
          }
        }
  }

  void one_f_one_b_bounds_micro_batches_in_flight() {
    // The first stage holds at most pp micro-batches' activations (ARCHITECTURE.md memory).
    for (int stages : {2, 4})
      for (int r = 0; r < stages; r++) {
        int live = 0, peak = 0;
        for (const PipelineAction& a : pipeline_schedule(stages, r, 1, 16)) {
          live += a.kind == PipelineAction::kForward ? 1 : -1;
          peak = std::max(peak, live);
        }
        QCOMPARE(peak, stages - r);
      }
  }
};

QTEST_GUILESS_MAIN(PipelineSchedule)
#include "test_pipeline_schedule.moc"
