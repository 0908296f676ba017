// Thread control shared by OpenMP loops and OpenBLAS (the OpenMP build of OpenBLAS runs
// single-threaded when called inside one of our parallel regions).
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "gemm.h"
#include "lattice/kernels.h"

extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_corename(void);
}

namespace lattice::kernels {

void set_num_threads(int threads) {
  if (threads < 1) threads = omp_get_num_procs();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int num_threads() {
  return omp_get_max_threads();
}

const char* blas_core_name() {
  return openblas_get_corename();
}

void apply_process_settings(char** argv) {
  struct Setting {
    const char* name;
    std::optional<std::string> before;  // the value to restore if the exec fails
  };
  std::vector<Setting> changed;
  auto set = [&](const char* name, const std::string& value) {
    const char* before = std::getenv(name);
    changed.push_back({name, before ? std::optional<std::string>(before) : std::nullopt});
    return setenv(name, value.c_str(), 1) == 0;
  };
  // The program's own path, not /proc/self/exe: the kernel names a process after the file it
  // executes, and ps, top, pgrep -x and tests must go on seeing "lattice", not "exe".
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0 || n >= static_cast<ssize_t>(sizeof path) - 1) return;
  path[n] = '\0';
  bool ok = true;
  // Note [OpenMP waiting]: a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is left alone.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
    ok = set("GOMP_SPINCOUNT", kOpenMpSpinCount);
  // Note [glibc's thread cache]: added to the user's tunables unless they set the count.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string user = tunables ? tunables : "";
  if (ok && user.find("glibc.malloc.tcache_count") == std::string::npos)
    ok = set("GLIBC_TUNABLES", user.empty() ? kGlibcTunables : user + ":" + kGlibcTunables);
  if (changed.empty()) return;
  if (ok) execv(path, argv);
  // The exec failed (a rebuilt or deleted binary): run on as the runtimes started, and say
  // nothing.
  for (const Setting& s : changed) {
    if (s.before) {
      setenv(s.name, s.before->c_str(), 1);
    } else {
      unsetenv(s.name);
    }
  }
}

}  // namespace lattice::kernels
