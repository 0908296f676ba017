// A CPU device seen through another Device, for tests that watch or change one part of what the
// engine sees: every call goes to an inner CpuDevice, and a subclass overrides the part it
// watches (capabilities(), progress(), op_lists()). Non-goal: a device of its own.
#pragma once

#include <memory>
#include <string>

#include "device/cpu_device.h"
#include "device/ops.h"

namespace lattice::testing {

class ForwardingDevice : public Device {
 public:
  ForwardingDevice() = default;

  const Capabilities& capabilities() const override { return inner_.capabilities(); }
  std::string describe() const override { return inner_.describe(); }
  std::string blas_name() const override { return inner_.blas_name(); }
  double peak_flops(DType compute) const override { return inner_.peak_flops(compute); }
  void* allocate(size_t bytes, MemoryCategory category) override {
    return inner_.allocate(bytes, category);
  }
  void free(void* block) override { inner_.free(block); }
  Status out_of_memory(MemoryCategory category, size_t bytes) const override {
    return inner_.out_of_memory(category, bytes);
  }
  CategoryUsage usage(MemoryCategory category) const override { return inner_.usage(category); }
  MemoryReport memory() const override { return inner_.memory(); }
  Stream& compute() override { return inner_.compute(); }
  Result<Stream*> new_stream(const std::string& name) override { return inner_.new_stream(name); }
  Event record(Stream& stream) override { return inner_.record(stream); }
  bool completed(const Event& event) override { return inner_.completed(event); }
  void wait(Stream& waiter, const Event& event) override { inner_.wait(waiter, event); }
  Status synchronize(Stream& stream) override { return inner_.synchronize(stream); }
  void progress() override { inner_.progress(); }
  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream& stream) override {
    inner_.copy(dst, src, bytes, kind, stream);
  }
  void zero(void* dst, size_t bytes, Stream& stream) override { inner_.zero(dst, bytes, stream); }
  Mark mark(Stream& stream) override { return inner_.mark(stream); }
  double seconds(const Mark& from, const Mark& to) override { return inner_.seconds(from, to); }
  void reset_marks() override { inner_.reset_marks(); }
  Result<std::unique_ptr<Comm>> make_comm(Comm& group) override { return inner_.make_comm(group); }
  Status error() const override { return inner_.error(); }
  void record_error(const Status& status) override { inner_.record_error(status); }

 protected:
  OpLists op_lists() override {
    return {inner_.ops<float>(), inner_.ops<double>(), inner_.ops<bf16>(), inner_.ops<fp16>()};
  }
  CpuDevice& inner() { return inner_; }

 private:
  CpuDevice inner_;
};

}  // namespace lattice::testing
