// The GPU memory bookkeeping, on the CPU: the CachingAllocator driven by a fake backend (it
// hands out addresses and counts calls; no device exists here) and the local-rank -> device
// mapping that NcclComm uses. The same allocator runs over cudaMalloc on a GPU.
#include <QtTest/QtTest>

#include <map>
#include <thread>

#include "device/caching_allocator.h"
#include "device/local_rank.h"

using lattice::AllocatorStats;
using lattice::CachingAllocator;
using lattice::MemoryCategory;

namespace {

// Hands out distinct fake addresses from a counter, up to `capacity` bytes at once.
struct FakeDevice {
  size_t capacity = size_t{1} << 40, held = 0;
  uintptr_t next = 0x1000;
  int allocations = 0, releases = 0;
  std::map<void*, size_t> live;
};

class FakeBackend final : public lattice::DeviceMemoryBackend {
 public:
  explicit FakeBackend(FakeDevice& device) : device_(device) {}
  void* allocate(size_t bytes) override {
    if (device_.held + bytes > device_.capacity) return nullptr;
    void* ptr = reinterpret_cast<void*>(device_.next);
    device_.next += bytes + 256;
    device_.held += bytes;
    device_.allocations++;
    device_.live[ptr] = bytes;
    return ptr;
  }
  void release(void* ptr, size_t bytes) override {
    QCOMPARE(device_.live.at(ptr), bytes);  // released with the size it was allocated with
    device_.live.erase(ptr);
    device_.held -= bytes;
    device_.releases++;
  }

 private:
  FakeDevice& device_;
};

std::unique_ptr<lattice::DeviceMemoryBackend> fake(FakeDevice& device) {
  return std::make_unique<FakeBackend>(device);
}

}  // namespace

class DeviceMemory : public QObject {
  Q_OBJECT
 private slots:
  void size_classes_round_up_by_at_most_a_quarter() {
    QCOMPARE(CachingAllocator::size_class(1), size_t{512});
    QCOMPARE(CachingAllocator::size_class(513), size_t{1024});
    QCOMPARE(CachingAllocator::size_class(size_t{1} << 20), size_t{1} << 20);
    QCOMPARE(CachingAllocator::size_class((size_t{1} << 20) + 1), (size_t{5} << 20) / 4);
    QCOMPARE(CachingAllocator::size_class(size_t{3} << 30), size_t{3} << 30);
    for (size_t bytes = 1; bytes < (size_t{1} << 34); bytes = bytes * 3 + 7) {
      const size_t c = CachingAllocator::size_class(bytes);
      QVERIFY2(c >= bytes && (c - bytes <= 511 || c - bytes <= bytes / 4),
               qPrintable(QString("size_class(%1) = %2").arg(bytes).arg(c)));
    }
  }

  void freed_blocks_are_reused_without_the_backend() {
    FakeDevice device;
    CachingAllocator allocator(fake(device));
    void* a = allocator.allocate(1000, MemoryCategory::kActivations);
    allocator.free(a);
    void* b = allocator.allocate(900, MemoryCategory::kActivations);  // same 1024-byte class
    QCOMPARE(b, a);
    QCOMPARE(device.allocations, 1);
    const AllocatorStats s = allocator.stats();
    QCOMPARE(s.cache_hits, uint64_t{1});
    QCOMPARE(s.allocations, uint64_t{2});
    void* c = allocator.allocate(5000, MemoryCategory::kActivations);  // another class
    QVERIFY(c != a);
    QCOMPARE(device.allocations, 2);
  }

  void categories_track_current_and_peak_bytes() {
    FakeDevice device;
    CachingAllocator allocator(fake(device));
    void* w = allocator.allocate(4096, MemoryCategory::kWeights);
    void* g = allocator.allocate(4096, MemoryCategory::kGrads);
    void* a1 = allocator.allocate(10000, MemoryCategory::kActivations);
    void* a2 = allocator.allocate(20000, MemoryCategory::kActivations);
    allocator.free(a1);
    AllocatorStats s = allocator.stats();
    QCOMPARE(s.of(MemoryCategory::kWeights).current, size_t{4096});
    QCOMPARE(s.of(MemoryCategory::kGrads).current, size_t{4096});
    QCOMPARE(s.of(MemoryCategory::kActivations).current, size_t{20000});
    QCOMPARE(s.of(MemoryCategory::kActivations).peak, size_t{30000});
    QCOMPARE(s.of(MemoryCategory::kOptimizer).peak, size_t{0});
    QCOMPARE(s.in_use, size_t{4096 + 4096 + 20000});
    QCOMPARE(s.peak_in_use, size_t{4096 + 4096 + 30000});
    allocator.free(w), allocator.free(g), allocator.free(a2);
    s = allocator.stats();
    QCOMPARE(s.in_use, size_t{0});
    QCOMPARE(s.of(MemoryCategory::kActivations).peak, size_t{30000});
    QCOMPARE(QString(lattice::memory_category_name(MemoryCategory::kOptimizer)),
             QString("optimizer state"));
  }

  void stats_fill_the_memory_report_categories() {
    FakeDevice device;
    CachingAllocator allocator(fake(device));
    allocator.allocate(1000, MemoryCategory::kWeights);
    allocator.allocate(2000, MemoryCategory::kGrads);
    allocator.allocate(3000, MemoryCategory::kOptimizer);
    allocator.allocate(4000, MemoryCategory::kActivations);
    allocator.allocate(5000, MemoryCategory::kWorkspace);
    allocator.allocate(6000, MemoryCategory::kCommBuffers);
    const lattice::MemoryReport r = lattice::memory_report_of(allocator.stats());
    QCOMPARE(r.weights, size_t{1000});
    QCOMPARE(r.grads, size_t{2000});
    QCOMPARE(r.optimizer, size_t{3000});
    QCOMPARE(r.activations, size_t{4000});
    QCOMPARE(r.workspace, size_t{5000});
    QCOMPARE(r.comm_buffers, size_t{6000});
    QCOMPARE(r.accounted(), size_t{21000});
    QCOMPARE(r.peak_rss, allocator.stats().peak_reserved);  // rounded to size classes
    QCOMPARE(r.fragmentation, allocator.stats().fragmentation());  // into the run store
  }

  void fragmentation_is_reserved_minus_in_use() {
    FakeDevice device;
    CachingAllocator allocator(fake(device));
    void* a = allocator.allocate(1000, MemoryCategory::kWorkspace);  // class 1024
    AllocatorStats s = allocator.stats();
    QCOMPARE(s.reserved, size_t{1024});
    QCOMPARE(s.fragmentation(), size_t{24});  // rounding
    allocator.free(a);
    s = allocator.stats();
    QCOMPARE(s.reserved, size_t{1024});  // cached, still held
    QCOMPARE(s.fragmentation(), size_t{1024});
    allocator.empty_cache();
    s = allocator.stats();
    QCOMPARE(s.reserved, size_t{0});
    QCOMPARE(s.peak_reserved, size_t{1024});
    QCOMPARE(device.releases, 1);
    QCOMPARE(device.held, size_t{0});
  }

  void out_of_memory_empties_the_cache_and_retries() {
    FakeDevice device;
    device.capacity = 3u << 20;  // 3 MiB
    CachingAllocator allocator(fake(device));
    void* a = allocator.allocate(size_t{1} << 20, MemoryCategory::kActivations);
    void* b = allocator.allocate(size_t{1} << 20, MemoryCategory::kActivations);
    allocator.free(a);
    allocator.free(b);  // 2 MiB cached in the 1 MiB class
    void* big = allocator.allocate(size_t{2} << 20, MemoryCategory::kWeights);
    QVERIFY2(big, "the cached 1 MiB blocks should have been released to make room");
    QCOMPARE(allocator.stats().cache_flushes, uint64_t{1});
    QCOMPARE(allocator.stats().reserved, size_t{2} << 20);
    QVERIFY2(!allocator.allocate(size_t{2} << 20, MemoryCategory::kWeights),
             "a request beyond the device must fail with nullptr, not throw");
    allocator.free(nullptr);  // ignored
  }

  void destructor_returns_every_block() {
    FakeDevice device;
    {
      CachingAllocator allocator(fake(device));
      allocator.free(allocator.allocate(100, MemoryCategory::kCommBuffers));
      allocator.allocate(1 << 22, MemoryCategory::kOptimizer);  // still live at the end
    }
    QCOMPARE(device.held, size_t{0});
    QCOMPARE(device.releases, device.allocations);
  }

  void concurrent_use_keeps_the_books_balanced() {
    FakeDevice device;
    CachingAllocator allocator(fake(device));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
      threads.emplace_back([&allocator, t] {
        for (int i = 0; i < 2000; i++) {
          void* p = allocator.allocate(512 * (1 + (i + t) % 7), MemoryCategory::kActivations);
          allocator.free(p);
        }
      });
    }
    for (auto& thread : threads) thread.join();
    const AllocatorStats s = allocator.stats();
    QCOMPARE(s.in_use, size_t{0});
    QCOMPARE(s.allocations, uint64_t{8000});
    QVERIFY2(s.backend_allocations <= 4 * 7, "blocks should be recycled across threads");
  }

  void local_rank_comes_from_the_launcher() {
    auto env = [](std::map<std::string, std::string> vars) {
      return [vars = std::move(vars)](const char* name) -> const char* {
        const auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      };
    };
    QCOMPARE(lattice::local_rank_from_environment(env({})), -1);
    QCOMPARE(lattice::local_rank_from_environment(env({{"SLURM_LOCALID", "3"}})), 3);
    QCOMPARE(lattice::local_rank_from_environment(
                 env({{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"SLURM_LOCALID", "3"}})),
             1);  // Open MPI's own variable wins under srun + mpirun
    QCOMPARE(lattice::local_rank_from_environment(env({{"MPI_LOCALRANKID", "2"}})), 2);
    QCOMPARE(lattice::local_rank_from_environment(env({{"SLURM_LOCALID", "x1"}})), -1);
    QCOMPARE(lattice::device_for_local_rank(-1, 8), 0);
    QCOMPARE(lattice::device_for_local_rank(5, 8), 5);
    QCOMPARE(lattice::device_for_local_rank(9, 8), 1);
  }
};

QTEST_GUILESS_MAIN(DeviceMemory)
#include "test_device_memory.moc"
