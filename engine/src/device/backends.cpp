#include "device/backends.h"

#include "lattice/layout.h"

namespace lattice {

namespace {
const DeviceBackend* g_backend = nullptr;
}  // namespace

void register_device_backend(const DeviceBackend* backend) {
  g_backend = backend;
}

const DeviceBackend* device_backend() {
  return g_backend;
}

std::vector<std::string> refusals(const TrainOptions& o, int world_size, const Capabilities& c) {
  std::vector<std::string> e = layout_errors(o, world_size);
  for (std::string& r : trainer_layout_refusals(o)) e.push_back(std::move(r));
  for (std::string& r : o.parallel.recompute_errors()) e.push_back(std::move(r));
  for (std::string& r : capability_errors(o, c)) e.push_back(std::move(r));
  return e;
}

std::string unavailable(const DeviceBackend& backend, const TrainOptions& o, int world_size) {
  std::string why;
  for (const std::string& e : refusals(o, world_size, backend.capabilities()))
    why += (why.empty() ? "" : "; ") + e;
  return why.empty() ? backend.unavailable() : why;
}

}  // namespace lattice
