// The CPU device (engine/src/device/cpu_device.h): memory counted by category, current and
// peak; an allocation the address space cannot hold fails with the CPU engine's sentence and
// changes nothing; streams and events as Note [CPU stream order] says: an event on the compute
// stream is complete when recorded, an event on a side stream stands for exactly the requests
// queued before it, requests retire in queue order, a copy on a side stream comes after its
// requests, the first error stays; marks are monotonic. The side-stream case also runs as two
// MPI ranks with real messages (the test reruns itself under mpirun: --side-stream-worker).
#include <QtTest/QtTest>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/mpi_worker.h"
#include "common/process.h"
#include "device/cpu_device.h"
#include "lattice/cpu_isa.h"
#include "lattice/kernels.h"

using lattice::CategoryUsage;
using lattice::CpuDevice;
using lattice::Event;
using lattice::MemoryCategory;
using lattice::Status;
using lattice::Stream;

namespace {

// A request the test completes by hand: test() says whether it is done; wait() completes it,
// as a real request blocks until then, after running `on_wait` (a receive filling its buffer).
struct Manual {
  bool done = false;
  int waits = 0;
  Status status;
  std::function<void()> on_wait;
};

class ManualRequest final : public lattice::CommRequest {
 public:
  explicit ManualRequest(Manual& m) : m_(m) {}
  Status wait() override {
    if (!m_.done && m_.on_wait) m_.on_wait();
    m_.waits++;
    m_.done = true;
    return m_.status;
  }
  bool test() override { return m_.done; }

 private:
  Manual& m_;
};

std::unique_ptr<lattice::CommRequest> manual(Manual& m) {
  return std::make_unique<ManualRequest>(m);
}

Stream& side_stream(CpuDevice& device, const std::string& name) {
  lattice::Result<Stream*> s = device.new_stream(name);
  if (!s) qFatal("new_stream: %s", s.status().message().c_str());
  return **s;
}

size_t address_space_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// ---- two ranks (--side-stream-worker)
// -------------------------------------------------------------

// Rank 0 queues two sends of 4 MiB (above any eager limit: a send completes only once its
// receive is posted) on a side stream with an event between them; rank 1 receives the first,
// then waits for rank 0's word before it posts the second receive. Waiting on the event must
// complete the first send and leave the second in flight: a device that waited for the whole
// stream would wait for a receive that is never posted, and the comm timeout ends the job.
std::string side_stream_checks(lattice::Comm& world, CpuDevice& device, lattice::Comm& comm) {
  Stream& side = side_stream(device, "pipeline activations");
  const size_t n = size_t{1} << 20;  // floats: 4 MiB
  std::vector<float> first(n, 1.0f), second(n, 2.0f);
  const int go = 1;
  if (world.rank() == 0) {
    lattice::RequestQueue& queue = *side.queue();
    queue.push(comm.isend(first.data(), n, lattice::DType::kFloat32, 1, 0));
    const Event after_first = device.record(side);
    queue.push(comm.isend(second.data(), n, lattice::DType::kFloat32, 1, 0));
    const Event after_second = device.record(side);
    if (after_first.seq != 1 || after_second.seq != 2)
      return "events recorded after 1 and 2 sends have seq " + std::to_string(after_first.seq) +
             " and " + std::to_string(after_second.seq);
    // A send waiting for the compute that wrote its buffer: nothing to complete.
    device.wait(side, device.record(device.compute()));
    if (queue.pending() != 2)
      return "waiting for a compute event completed " + std::to_string(2 - queue.pending()) +
             " side-stream requests; expected none";
    device.wait(device.compute(), after_first);
    if (queue.completed() != 1 || queue.pending() != 1)
      return "after waiting for the event recorded after the first send, " +
             std::to_string(queue.completed()) + " sends completed and " +
             std::to_string(queue.pending()) + " pending; expected 1 and 1";
    if (!device.completed(after_first) || device.completed(after_second))
      return "completed(): first send's event " + std::to_string(device.completed(after_first)) +
             ", second's " + std::to_string(device.completed(after_second)) + "; expected 1, 0";
    if (Status s = world.send(&go, 1, lattice::DType::kInt32, 1, 1); !s) return s.message();
    if (Status s = device.synchronize(side); !s) return "synchronize: " + s.message();
    if (!device.completed(after_second) || queue.pending() != 0)
      return "synchronize left " + std::to_string(queue.pending()) + " sends pending";
    return "";
  }
  std::vector<float> got(n, 0.0f);
  if (Status s = comm.recv(got.data(), n, lattice::DType::kFloat32, 0, 0); !s) return s.message();
  if (got != first) return "the first message arrived changed";
  int word = 0;
  if (Status s = world.recv(&word, 1, lattice::DType::kInt32, 0, 1); !s) return s.message();
  // The second receive on a side stream of this rank; a copy queued there after it must
  // see the received data.
  Stream& in = side_stream(device, "pipeline activations in");
  std::fill(got.begin(), got.end(), 0.0f);
  in.queue()->push(comm.irecv(got.data(), n, lattice::DType::kFloat32, 0, 0));
  std::vector<float> copied(n, 0.0f);
  device.copy(copied.data(), got.data(), n * sizeof(float), lattice::CopyKind::kDeviceToDevice, in);
  if (copied != second) return "a copy queued after a receive did not see the received data";
  return device.synchronize(in).message();
}

int run_side_stream_worker() {
  lattice::Result<std::unique_ptr<lattice::Comm>> world = lattice::make_world_comm();
  if (!world) {
    std::fprintf(stderr, "side-stream worker: %s\n", world.status().message().c_str());
    return 1;
  }
  lattice::set_comm_timeout(30, "test_cpu_device's 30 s timeout");
  std::string error;
  {
    CpuDevice device;
    lattice::Result<std::unique_ptr<lattice::Comm>> comm = device.make_comm(**world);
    if (!comm) return lattice::testing::end_worker(*world, "make_comm: " + comm.status().message());
    error = side_stream_checks(**world, device, **comm);
    // A failed check may leave requests in flight that the peer will never match: end the job
    // with the message instead of waiting for them.
    if (!error.empty()) (*world)->abort(error, 1);
    // The checks synchronised every side stream: the communicator may go before the device.
  }
  return lattice::testing::end_worker(*world, error);
}

}  // namespace

class CpuDeviceTest : public QObject {
  Q_OBJECT
 private slots:
  void memory_is_counted_by_category_now_and_at_peak() {
    CpuDevice device;
    void* weights = device.allocate(1000, MemoryCategory::kWeights);
    void* a = device.allocate(300, MemoryCategory::kActivations);
    void* b = device.allocate(500, MemoryCategory::kActivations);
    void* empty = device.allocate(0, MemoryCategory::kWorkspace);
    QVERIFY(weights && a && b && empty);
    for (void* p : {weights, a, b, empty})
      QVERIFY2(reinterpret_cast<uintptr_t>(p) % CpuDevice::kAlignment == 0, "a block unaligned");
    device.free(a);
    auto check = [&](MemoryCategory c, size_t current, size_t peak) {
      const CategoryUsage u = device.usage(c);
      QVERIFY2(u.current == current && u.peak == peak,
               qPrintable(QString("%1: current %2, peak %3; expected %4, %5")
                              .arg(lattice::memory_category_name(c))
                              .arg(u.current)
                              .arg(u.peak)
                              .arg(current)
                              .arg(peak)));
    };
    check(MemoryCategory::kWeights, 1000, 1000);  // exact bytes: no size classes
    check(MemoryCategory::kActivations, 500, 800);
    check(MemoryCategory::kWorkspace, 0, 0);
    check(MemoryCategory::kGrads, 0, 0);
    const lattice::MemoryReport r = device.memory();
    QCOMPARE(r.weights, size_t{1000});
    QCOMPARE(r.activations, size_t{500});
    QCOMPARE(r.accounted(), size_t{1500});
    QVERIFY2(r.peak_rss > 0, "peak RSS missing from the memory report");
    device.free(weights);
    device.free(b);
    device.free(empty);
    device.free(nullptr);
    check(MemoryCategory::kWeights, 0, 1000);
    check(MemoryCategory::kActivations, 0, 800);
  }

  void an_allocation_the_address_space_cannot_hold_fails_in_the_engines_words() {
#if defined(__SANITIZE_ADDRESS__)
    QSKIP("AddressSanitizer reserves terabytes of address space: no RLIMIT_AS test");
#endif
    CpuDevice device;
    void* kept = device.allocate(1000, MemoryCategory::kWeights);
    QVERIFY(kept);
    // As test_memory_limits: the address space limited, so nothing is touched.
    rlimit old{};
    QCOMPARE(getrlimit(RLIMIT_AS, &old), 0);
    const rlim_t limit = address_space_bytes() + (rlim_t{256} << 20);
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < limit) QSKIP("RLIMIT_AS already lower");
    const size_t ask = size_t{1} << 30;
    const rlimit lowered{limit, old.rlim_max};
    QCOMPARE(setrlimit(RLIMIT_AS, &lowered), 0);
    void* block = device.allocate(ask, MemoryCategory::kWeights);
    QCOMPARE(setrlimit(RLIMIT_AS, &old), 0);
    QVERIFY2(block == nullptr, "1 GiB allocated with 256 MiB of address space to spare");
    const CategoryUsage u = device.usage(MemoryCategory::kWeights);
    QCOMPARE(u.current, size_t{1000});
    QCOMPARE(u.peak, size_t{1000});
    const Status s = device.out_of_memory(MemoryCategory::kWeights, ask);
    QVERIFY(!s.is_ok());
    QCOMPARE(QString::fromStdString(s.message()),
             QString("out of memory: 1073741824 bytes (1.00 GiB) of weights could not be "
                     "allocated"));
    void* after = device.allocate(4096, MemoryCategory::kWeights);  // the device goes on
    QVERIFY(after);
    device.free(after);
    device.free(kept);
  }

  // GCC 12's aligned nothrow operator new rounds the size up to the alignment first and wraps:
  // it returns a block for SIZE_MAX - 10 bytes.
  void a_size_no_machine_has_fails_instead_of_wrapping() {
    CpuDevice device;
    for (size_t bytes : {SIZE_MAX, SIZE_MAX - 10, SIZE_MAX / 2 + 1}) {
      void* block = device.allocate(bytes, MemoryCategory::kActivations);
      QVERIFY2(block == nullptr, qPrintable(QString("allocate(%1) returned a block").arg(bytes)));
    }
    QCOMPARE(device.usage(MemoryCategory::kActivations).peak, size_t{0});
  }

  void an_event_on_the_compute_stream_is_complete_when_recorded() {
    CpuDevice device;
    const Event e = device.record(device.compute());
    QCOMPARE(e.stream, &device.compute());
    QVERIFY(device.completed(e));
    device.wait(device.compute(), e);
    QVERIFY(device.completed(Event{}));  // no stream: nothing to wait for
    QVERIFY(device.synchronize(device.compute()).is_ok());
  }

  void a_side_stream_event_stands_for_exactly_the_requests_queued_before_it() {
    CpuDevice device;
    Stream& side = side_stream(device, "data-parallel");
    Manual first, second;
    side.queue()->push(manual(first));
    const Event e = device.record(side);
    side.queue()->push(manual(second));
    QVERIFY(!device.completed(e));
    device.wait(device.compute(), e);
    QCOMPARE(first.waits, 1);
    QVERIFY2(second.waits == 0 && !second.done,
             "the request queued after the event was waited for");
    QVERIFY(device.completed(e));
    QVERIFY(!device.completed(device.record(side)));
    QVERIFY(device.synchronize(side).is_ok());
    QCOMPARE(second.waits, 1);
  }

  void a_compute_event_costs_a_side_stream_nothing() {
    CpuDevice device;
    Stream& side = side_stream(device, "pipeline gradients");
    Manual pending;
    side.queue()->push(manual(pending));
    device.wait(side, device.record(device.compute()));
    QVERIFY2(pending.waits == 0, "a side stream waiting for compute completed its own requests");
    QCOMPARE(side.queue()->pending(), size_t{1});
    QVERIFY(device.synchronize(side).is_ok());
  }

  void requests_retire_in_queue_order() {
    CpuDevice device;
    Stream& side = side_stream(device, "pipeline activations");
    Manual first, second;
    side.queue()->push(manual(first));
    side.queue()->push(manual(second));
    const Event both = device.record(side);
    second.done = true;  // MPI finished the later one first
    device.progress();
    QVERIFY(!device.completed(both));
    QCOMPARE(side.queue()->completed(), uint64_t{0});
    first.done = true;
    device.progress();
    QCOMPARE(side.queue()->completed(), uint64_t{2});
    QVERIFY(device.completed(both));
  }

  void a_copy_on_a_side_stream_comes_after_its_requests() {
    CpuDevice device;
    Stream& side = side_stream(device, "pipeline activations");
    std::vector<float> received(4, 0.0f), copied(4, -1.0f);
    Manual receive;
    receive.on_wait = [&] { std::fill(received.begin(), received.end(), 7.0f); };
    side.queue()->push(manual(receive));
    device.copy(copied.data(), received.data(), 4 * sizeof(float), lattice::CopyKind::kDeviceToHost,
                side);
    QCOMPARE(copied, std::vector<float>(4, 7.0f));
    device.zero(copied.data(), 4 * sizeof(float), device.compute());
    QCOMPARE(copied, std::vector<float>(4, 0.0f));
  }

  void the_first_error_stays() {
    CpuDevice device;
    Stream& side = side_stream(device, "pipeline activations");
    std::unique_ptr<lattice::Comm> local = lattice::make_local_comm();
    float x = 0;
    side.queue()->push(local->isend(&x, 1, lattice::DType::kFloat32, 1, 0));  // no rank 1
    const Status first = device.synchronize(side);
    QVERIFY2(!first.is_ok(), "a failed send on a side stream left the device without an error");
    QVERIFY2(first.message().find("isend") != std::string::npos, first.message().c_str());
    Manual failing;
    failing.done = true;
    failing.status = Status::internal("a later failure");
    side.queue()->push(manual(failing));
    QCOMPARE(device.synchronize(side).message(), first.message());
    QCOMPARE(device.error().message(), first.message());
    QCOMPARE(device.synchronize(device.compute()).message(), first.message());
  }

  void marks_are_monotonic() {
    CpuDevice device;
    std::vector<lattice::Mark> marks;
    for (int i = 0; i < 50; i++) marks.push_back(device.mark(device.compute()));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    marks.push_back(device.mark(device.compute()));
    for (size_t i = 1; i < marks.size(); i++)
      QVERIFY2(device.seconds(marks[i - 1], marks[i]) >= 0,
               qPrintable(QString("mark %1 reads before mark %2").arg(i).arg(i - 1)));
    const double slept = device.seconds(marks[49], marks[50]);
    QVERIFY2(slept >= 0.005 && slept < 5,
             qPrintable(QString("a 5 ms sleep measured %1 s").arg(slept)));
    QCOMPARE(device.seconds(marks[50], marks[49]), -slept);
  }

  void a_device_communicator_is_its_own_and_named_as_its_group() {
    CpuDevice device;
    std::unique_ptr<lattice::Comm> group = lattice::make_local_comm();
    group->set_name("tensor-parallel");
    lattice::Result<std::unique_ptr<lattice::Comm>> comm = device.make_comm(*group);
    QVERIFY2(comm.is_ok(), comm.status().message().c_str());
    QVERIFY((*comm).get() != group.get());
    QCOMPARE((*comm)->name(), std::string("tensor-parallel"));
    QCOMPARE((*comm)->size(), 1);
  }

  void threads_description_and_peak() {
    const int before = lattice::kernels::num_threads();
    CpuDevice device(lattice::CpuDeviceOptions{1});
    QCOMPARE(lattice::kernels::num_threads(), 1);
    QCOMPARE(QString::fromStdString(device.describe()),
             QString("1 thread per rank, kernels ") +
                 lattice::kernels::cpu_isa_label(lattice::kernels::cpu_isa()));
    QCOMPARE(device.capabilities().device, std::string("cpu"));
    QVERIFY(device.peak_flops(lattice::DType::kFloat32) > 0);
    QCOMPARE(device.peak_flops(lattice::DType::kInt32), 0.0);
    lattice::kernels::set_num_threads(before);
  }

#ifdef LATTICE_MPIEXEC
  void a_side_stream_event_completes_only_earlier_sends_between_two_ranks() {
    static const QString self =
        QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
    const lattice::testing::Run run =
        lattice::testing::run_mpi(2, self, {"--side-stream-worker"}, {}, 120000);
    QVERIFY2(run.exit_code == 0, qPrintable(run.err + run.out));
  }
#endif
};

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--side-stream-worker") return run_side_stream_worker();
  CpuDeviceTest test;
  return QTest::qExec(&test, argc, argv);
}

#include "test_cpu_device.moc"
