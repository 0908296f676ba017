// The communicator's contract (comm.h): LocalComm's world of one in-process, and, where MPI
// is built in, that one failing rank ends a whole mpirun job (message, exit code, no process
// left behind). Every collective under MPI is checked by comm_worker (tests/parallel/CMakeLists.txt).
#include <QtTest/QtTest>

#include <sys/wait.h>
#include <unistd.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QRandomGenerator>
#include <QThread>

#include <csignal>
#include <cstdlib>
#include <vector>

#include "common/process.h"
#include "device/cpu_device.h"
#include "lattice/comm.h"

using lattice::Comm;
using lattice::DType;
using lattice::ReduceOp;

namespace {

// A stream that claims a cudaStream_t, which a CPU communicator must refuse.
class FakeCudaStream final : public lattice::Stream {
 public:
  FakeCudaStream() : Stream("compute (CUDA)") {}
  void* native() const override { return const_cast<FakeCudaStream*>(this); }
};

// Process ids whose command line contains marker, as pgrep -f finds them (read from /proc so
// that no procps is needed).
QStringList processes_with(const QString& marker) {
  QStringList pids;
  const QString self = QString::number(QCoreApplication::applicationPid());
  for (const QString& pid : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    if (pid.toInt() <= 0 || pid == self) continue;
    QFile cmdline("/proc/" + pid + "/cmdline");
    if (!cmdline.open(QIODevice::ReadOnly)) continue;
    if (QString::fromUtf8(cmdline.readAll().replace('\0', ' ')).contains(marker)) pids << pid;
  }
  return pids;
}

#ifdef LATTICE_MPIEXEC
// processes_with(marker) after giving the launcher up to 3 s to reap its children. Leftovers
// are killed so that one failure does not leak into the next test.
QStringList processes_left(const QString& marker) {
  QStringList pids;
  for (int attempt = 0; attempt < 30; attempt++) {
    pids = processes_with(marker);
    if (pids.isEmpty()) return pids;
    QThread::msleep(100);
  }
  for (const QString& pid : pids) ::kill(pid.toInt(), SIGKILL);
  return pids;
}

QString unique_marker(const char* what) {
  return QString("lattice-comm-%1-%2-%3")
      .arg(what)
      .arg(QCoreApplication::applicationPid())
      .arg(QRandomGenerator::global()->generate());
}
#endif

}  // namespace

class CommTest : public QObject {
  Q_OBJECT
 private slots:
  void local_comm_is_a_world_of_one() {
    auto comm = lattice::make_local_comm();
    QCOMPARE(comm->rank(), 0);
    QCOMPARE(comm->size(), 1);
    QCOMPARE(comm->node_local_size(), 1);
    std::vector<float> data = {1.5f, -2.0f, 3.0f};
    QVERIFY(comm->all_reduce(data.data(), 3, DType::kFloat32, ReduceOp::kSum));
    QVERIFY(comm->all_reduce(data.data(), 3, DType::kFloat32, ReduceOp::kMax));
    QVERIFY(comm->broadcast(data.data(), 3, DType::kFloat32, 0));
    QVERIFY(comm->barrier());
    QCOMPARE(data, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  }

  void local_collectives_copy_the_one_block() {
    auto comm = lattice::make_local_comm();
    const std::vector<int64_t> send = {7, 8, 9, 10};
    std::vector<int64_t> recv(4, -1);
    QVERIFY(comm->reduce_scatter(send.data(), recv.data(), {4}, DType::kInt64));
    QCOMPARE(recv, send);
    recv.assign(4, -1);
    QVERIFY(comm->all_gather(send.data(), recv.data(), {4}, DType::kInt64));
    QCOMPARE(recv, send);
    QVERIFY(comm->all_gather(recv.data(), recv.data(), {4}, DType::kInt64));  // in place
    QCOMPARE(recv, send);
    recv.assign(4, -1);
    QVERIFY(comm->gather(send.data(), recv.data(), 4, DType::kInt64, 0));
    QCOMPARE(recv, send);
  }

  // bf16 and fp16 buffers (the device's activations) are every Comm's types: over one rank a
  // sum leaves the values, the copies keep every bit (a signalling NaN too) and the stats
  // count 2 bytes an element.
  void local_comm_takes_16_bit_floats() {
    auto comm = lattice::make_local_comm();
    const std::vector<lattice::bf16> values = {lattice::to_bf16(1.5f), lattice::bf16{0x7f81},
                                               lattice::to_bf16(-3.0f)};
    std::vector<lattice::bf16> data = values, recv(3, lattice::bf16{0});
    auto bits = [](const std::vector<lattice::bf16>& v) {
      std::vector<uint16_t> out;
      for (lattice::bf16 x : v) out.push_back(x.bits);
      return out;
    };
    QVERIFY(comm->all_reduce(data.data(), 3, DType::kBFloat16, ReduceOp::kSum));
    QCOMPARE(bits(data), bits(values));
    QVERIFY(comm->all_gather(data.data(), recv.data(), {3}, DType::kBFloat16));
    QCOMPARE(bits(recv), bits(values));
    std::vector<lattice::fp16> half = {lattice::to_fp16(0.5f), lattice::fp16{0x7c01}},
                               half_recv(2, lattice::fp16{0});
    QVERIFY(comm->reduce_scatter(half.data(), half_recv.data(), {2}, DType::kFloat16));
    QCOMPARE(half_recv[0].bits, half[0].bits);
    QCOMPARE(half_recv[1].bits, uint16_t{0x7c01});
    QCOMPARE(comm->stats().all_reduce_bytes, uint64_t{6});
    QCOMPARE(comm->stats().all_gather_bytes, uint64_t{6});
    QCOMPARE(comm->stats().reduce_scatter_bytes, uint64_t{4});
  }

  // A world of one sends its one block to itself; mismatched counts are refused.
  void local_all_to_all_copies() {
    auto comm = lattice::make_local_comm();
    const std::vector<lattice::bf16> values = {lattice::to_bf16(2.5f), lattice::bf16{0x7f81}};
    std::vector<lattice::bf16> recv(2, lattice::bf16{0});
    QVERIFY(comm->all_to_all(values.data(), {2}, recv.data(), {2}, DType::kBFloat16));
    QCOMPARE(recv[0].bits, values[0].bits);
    QCOMPARE(recv[1].bits, uint16_t{0x7f81});
    QCOMPARE(comm->stats().all_to_all_bytes, uint64_t{4});
    QVERIFY(!comm->all_to_all(values.data(), {2}, recv.data(), {1}, DType::kBFloat16));
    QVERIFY(!comm->all_to_all(values.data(), {1, 1}, recv.data(), {2}, DType::kBFloat16));
  }

  void local_async_calls_are_complete_when_made() {
    auto comm = lattice::make_local_comm();
    std::vector<double> data = {1, 2}, out(2, 0);
    auto a = comm->all_reduce_async(data.data(), 2, DType::kFloat64, ReduceOp::kSum);
    auto b = comm->reduce_scatter_async(data.data(), out.data(), {2}, DType::kFloat64);
    auto c = comm->all_gather_async(data.data(), out.data(), {2}, DType::kFloat64);
    QVERIFY(a->test() && b->test() && c->test());
    QVERIFY(a->wait() && b->wait() && c->wait());
    QCOMPARE(out, data);
  }

  // The stream-ordered calls (comm.h) over one rank, on a CPU device's compute and side
  // streams: done when the call returns, nothing queued; a sum leaves the values, the
  // gathers and scatters copy the one block (in place too), point-to-point has no peer, a CUDA
  // stream is refused, and the stats count them as the blocking calls.
  void local_stream_calls_copy_or_refuse() {
    auto comm = lattice::make_local_comm();
    lattice::CpuDevice device;
    lattice::Result<lattice::Stream*> side = device.new_stream("data-parallel");
    QVERIFY(side);
    for (lattice::Stream* s : {&device.compute(), *side}) {
      comm->reset_stats();
      std::vector<double> data = {1.5, -2.0, 3.0}, recv(3, -1.0);
      QVERIFY(comm->all_reduce(data.data(), 3, DType::kFloat64, ReduceOp::kSum, *s));
      QCOMPARE(data, (std::vector<double>{1.5, -2.0, 3.0}));
      QVERIFY(comm->all_gather(data.data(), recv.data(), 3, DType::kFloat64, *s));
      QCOMPARE(recv, data);
      recv.assign(3, -1.0);
      QVERIFY(comm->reduce_scatter(data.data(), recv.data(), 3, DType::kFloat64, *s));
      QCOMPARE(recv, data);
      QVERIFY(comm->reduce_scatter(recv.data(), recv.data(), 3, DType::kFloat64, *s));
      QCOMPARE(recv, data);
      float x = 0;
      const lattice::Status sent = comm->send(&x, 1, DType::kFloat32, 1, *s);
      QVERIFY2(!sent && sent.message().find("mpirun") != std::string::npos, sent.message().c_str());
      QVERIFY(!comm->recv(&x, 1, DType::kFloat32, 0, *s));
      QCOMPARE(comm->stats().all_reduce_bytes, uint64_t{24});
      QCOMPARE(comm->stats().all_gather_bytes, uint64_t{24});
      QCOMPARE(comm->stats().reduce_scatter_bytes, uint64_t{48});
      if (lattice::RequestQueue* queue = s->queue()) QCOMPARE(queue->queued(), uint64_t{0});
    }
    FakeCudaStream cuda;
    float x = 0;
    const lattice::Status refused = comm->all_reduce(&x, 1, DType::kFloat32, ReduceOp::kSum, cuda);
    QVERIFY2(!refused && refused.message().find("compute (CUDA)") != std::string::npos,
             refused.message().c_str());
    QVERIFY(!comm->all_gather(&x, &x, 1, DType::kFloat32, cuda));
    QVERIFY(!comm->reduce_scatter(&x, &x, 1, DType::kFloat32, cuda));
  }

  void local_arguments_beyond_one_rank_are_errors() {
    auto comm = lattice::make_local_comm();
    float x = 0;
    const lattice::Status sent = comm->send(&x, 1, DType::kFloat32, 1, 4);
    QVERIFY(!sent);
    QVERIFY2(sent.message().find("rank 1") != std::string::npos &&
                 sent.message().find("mpirun") != std::string::npos,
             sent.message().c_str());
    QVERIFY(!comm->recv(&x, 1, DType::kFloat32, 0, 0));
    auto s = comm->isend(&x, 1, DType::kFloat32, 1, 0);
    auto r = comm->irecv(&x, 1, DType::kFloat32, 1, 0);
    QVERIFY(s->test() && r->test());
    QVERIFY(!s->wait() && !r->wait());
    QVERIFY(!comm->broadcast(&x, 1, DType::kFloat32, 1));
    QVERIFY(!comm->gather(&x, &x, 1, DType::kFloat32, 2));
    QVERIFY(!comm->reduce_scatter(&x, &x, {1, 1}, DType::kFloat32));
    QVERIFY(!comm->all_gather(&x, &x, {}, DType::kFloat32));
  }

  void local_split_and_stats() {
    auto comm = lattice::make_local_comm();
    auto part = comm->split(3, 9);
    QVERIFY(part);
    QCOMPARE(part.value()->size(), 1);
    QCOMPARE(part.value()->rank(), 0);
    QVERIFY(!comm->split(-1, 0));
    comm->reset_stats();
    std::vector<float> data(10);
    QVERIFY(comm->all_reduce(data.data(), 10, DType::kFloat32, ReduceOp::kSum));
    QVERIFY(comm->all_gather(data.data(), data.data(), {10}, DType::kFloat32));
    QCOMPARE(comm->stats().all_reduce_bytes, uint64_t{40});
    QCOMPARE(comm->stats().all_gather_bytes, uint64_t{40});
    QCOMPARE(comm->stats().calls, uint64_t{2});
    comm->reset_stats();
    QCOMPARE(comm->stats().calls, uint64_t{0});
  }

  // abort() ends the process: run it in a child and read what it leaves.
  void local_abort_prints_and_exits_with_the_code() {
    int pipe_fds[2];
    QVERIFY(::pipe(pipe_fds) == 0);
    const pid_t child = ::fork();
    QVERIFY(child >= 0);
    if (child == 0) {
      ::dup2(pipe_fds[1], STDERR_FILENO);
      lattice::make_local_comm()->abort("out of memory", 7);
    }
    ::close(pipe_fds[1]);
    QByteArray err;
    char buffer[256];
    for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) err.append(buffer, n);
    ::close(pipe_fds[0]);
    int status = 0;
    QCOMPARE(::waitpid(child, &status, 0), child);
    QVERIFY(WIFEXITED(status));
    QCOMPARE(WEXITSTATUS(status), 7);
    QCOMPARE(err, QByteArray("lattice: rank 0: out of memory\n"));
  }

  // The leak check below must see a live process, or "nothing left behind" proves nothing.
  void leak_check_sees_a_running_process() {
    const QString marker = QString("lattice-comm-probe-%1").arg(QCoreApplication::applicationPid());
    QProcess probe;
    // The shell's builtin read waits on the open stdin pipe: no child process that could show
    // the marker between its fork and its exec, and no exec: sh keeps the marker.
    probe.start("/bin/sh", {"-c", "read line", marker});
    QVERIFY(probe.waitForStarted(5000));
    const QString pid = QString::number(probe.processId());
    const QStringList found = processes_with(marker);
    probe.kill();
    probe.waitForFinished(5000);
    QCOMPARE(found, QStringList{pid});
  }

  void standalone_process_gets_a_world_of_one() {
    if (lattice::launched_by_mpi_launcher()) QSKIP("this test itself runs under an MPI launcher");
    auto world = lattice::make_world_comm();
    QVERIFY2(world, world.status().message().c_str());
    QCOMPARE(world.value()->size(), 1);
    lattice::finalize_comm();
  }

  void launched_by_mpirun_without_mpi_says_how_to_get_it() {
#ifdef LATTICE_MPIEXEC
    QSKIP("this build has MPI");
#else
    qputenv("OMPI_COMM_WORLD_SIZE", "2");
    const bool launched = lattice::launched_by_mpi_launcher();
    auto world = lattice::make_world_comm();
    qunsetenv("OMPI_COMM_WORLD_SIZE");
    QVERIFY(launched);
    QVERIFY(!world);
    const std::string& message = world.status().message();
    QVERIFY2(message.find("installers/install-deps.sh") != std::string::npos &&
                 message.find("-DLATTICE_WITH_MPI=ON") != std::string::npos,
             message.c_str());
#endif
  }

  void abort_on_one_rank_ends_the_whole_job() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    const QString marker = unique_marker("abort");
    const lattice::testing::Run job =
        lattice::testing::run_mpi(2, LATTICE_COMM_WORKER, {"abort", marker}, {}, 30000);
    const QStringList left = processes_left(marker);
    QVERIFY2(!job.timed_out, "mpirun still running after 30 s: rank 0 hangs in all_reduce");
    QVERIFY2(job.exit_code != 0, qPrintable(job.err));
    QVERIFY2(job.err.contains("lattice: rank 1: disk full"), qPrintable(job.err));
    QVERIFY2(left.isEmpty(), qPrintable("left behind: " + left.join(' ')));
#endif
  }

  void killed_rank_ends_the_whole_job() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    const QString marker = unique_marker("sigkill");
    const lattice::testing::Run job =
        lattice::testing::run_mpi(2, LATTICE_COMM_WORKER, {"sigkill", marker}, {}, 30000);
    const QStringList left = processes_left(marker);
    QVERIFY2(!job.timed_out, "mpirun still running after 30 s: rank 0 hangs in all_reduce");
    QVERIFY2(job.exit_code != 0, qPrintable(job.err));
    // Lattice's own words, from rank 0's wait. Open MPI's report of the signal ("signal 9")
    // comes only when mpirun sees the death before rank 0's abort, which a loaded machine
    // reorders, so the test does not ask for it.
    QVERIFY2(job.err.contains("lattice: rank 0: rank 1 (pid ") &&
                 job.err.contains(") has ended (killed, crashed") &&
                 job.err.contains("while rank 0 waited") &&
                 job.err.contains("in the world all-reduce (group: world [0,1])"),
             qPrintable(job.err));
    QVERIFY2(left.isEmpty(), qPrintable("left behind: " + left.join(' ')));
#endif
  }

  // Rank 1 stops (SIGSTOP) and never arrives in the all_reduce ranks 0 and 2 wait in: with a
  // 2 s timeout rank 0 ends the job within a few seconds, names rank 1 (not rank 2, which
  // arrived), the operation and its group, and says that rank 1 is stopped.
  void stopped_rank_ends_the_job_naming_it_and_the_collective() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    const QString marker = unique_marker("sigstop");
    QElapsedTimer clock;
    clock.start();
    const lattice::testing::Run job =
        lattice::testing::run_mpi(3, LATTICE_COMM_WORKER, {"sigstop", marker}, {}, 30000);
    const qint64 ms = clock.elapsed();
    const QStringList left = processes_left(marker);
    QVERIFY2(!job.timed_out, "mpirun still running after 30 s: ranks 0 and 2 wait for ever");
    QVERIFY2(job.exit_code != 0, qPrintable(job.err));
    QVERIFY2(job.err.contains("lattice: rank 0: rank 0 waited 2 s (a 2 s test timeout) in the "
                              "world all-reduce of the hang test for rank 1 (its group: world "
                              "[0,1,2]); rank 1 did not arrive and did not answer: it is stopped "
                              "(SIGSTOP or a debugger; pid "),
             qPrintable(job.err));
    QVERIFY2(ms < 20000, qPrintable(QString("the job took %1 ms").arg(ms)));
    QVERIFY2(left.isEmpty(), qPrintable("left behind: " + left.join(' ')));
#endif
  }

  // The same for an all-reduce queued on a CPU device's side stream (Note [CPU stream order]):
  // queueing returns at once, and rank 0's wait for the stream's event is the watched wait that
  // names rank 1 and the data-parallel all-reduce.
  void stopped_rank_ends_a_side_stream_wait_naming_it() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    const QString marker = unique_marker("sigstop-stream");
    QElapsedTimer clock;
    clock.start();
    const lattice::testing::Run job =
        lattice::testing::run_mpi(3, LATTICE_COMM_WORKER, {"sigstop-stream", marker}, {}, 30000);
    const qint64 ms = clock.elapsed();
    const QStringList left = processes_left(marker);
    QVERIFY2(!job.timed_out, "mpirun still running after 30 s: ranks 0 and 2 wait for ever");
    QVERIFY2(job.exit_code != 0, qPrintable(job.err));
    QVERIFY2(job.err.contains("lattice: rank 0: rank 0 waited 2 s (a 2 s test timeout) in the "
                              "data-parallel all-reduce of the hang test for rank 1 (its group: "
                              "data-parallel [0,1,2]); rank 1 did not arrive and did not answer: "
                              "it is stopped (SIGSTOP or a debugger; pid "),
             qPrintable(job.err));
    QVERIFY2(ms < 20000, qPrintable(QString("the job took %1 ms").arg(ms)));
    QVERIFY2(left.isEmpty(), qPrintable("left behind: " + left.join(' ')));
#endif
  }

  // The same for a point-to-point message: rank 0 waits in a recv from the stopped rank 1.
  void stopped_peer_ends_a_recv_naming_it() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    const QString marker = unique_marker("sigstop-recv");
    const lattice::testing::Run job =
        lattice::testing::run_mpi(3, LATTICE_COMM_WORKER, {"sigstop-recv", marker}, {}, 30000);
    const QStringList left = processes_left(marker);
    QVERIFY2(!job.timed_out, "mpirun still running after 30 s: rank 0 waits in recv for ever");
    QVERIFY2(job.exit_code != 0, qPrintable(job.err));
    QVERIFY2(job.err.contains("lattice: rank 0: rank 0 waited 2 s (a 2 s test timeout) in the "
                              "world recv from rank 1 of the hang test for rank 1"),
             qPrintable(job.err));
    QVERIFY2(job.err.contains("rank 1 did not arrive and did not answer: it is stopped"),
             qPrintable(job.err));
    QVERIFY2(left.isEmpty(), qPrintable("left behind: " + left.join(' ')));
#endif
  }
};

QTEST_GUILESS_MAIN(CommTest)
#include "test_comm.moc"
