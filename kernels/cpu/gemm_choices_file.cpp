// The fp32 GEMM choices file (Note [GEMM choices file], README.md).
#include "gemm_choices_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "lattice/cpu_isa.h"
#include "lattice/kernels.h"

#ifdef LATTICE_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

extern "C" {
char* openblas_get_config(void);
}

namespace lattice::kernels::cpu {
namespace {

constexpr const char* kHeaderPrefix = "# lattice fp32 GEMM choices for ";
constexpr const char* kColumns =
    "# threads\top\tM\tN\tK\taccumulate\tway\topenblas_gflops\tonednn_gflops\t"
    "openblas_split_gflops\tonednn_split_gflops";

// The value of /proc/cpuinfo's first line whose key (before the blanks and the colon) is
// `key`; empty where there is none.
std::string cpuinfo_value(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name != key) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return {};
}

// The model name with x86's family and model numbers: a VM may name Zen 4 and Zen 5 both
// "AMD EPYC", and one machine's choices are not the other's.
std::string cpu_model_name() {
  std::string model = cpuinfo_value("model name");
  if (model.empty()) model = "unknown CPU";
  const std::string family = cpuinfo_value("cpu family"), number = cpuinfo_value("model");
  if (!family.empty() && !number.empty()) model += " (family " + family + " model " + number + ")";
  return model;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// "mkdir -p" of the file's folder.
bool make_parents(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

bool parse_row(const std::string& line, GemmChoice& c) {
  std::istringstream in(line);
  std::string op, way;
  int accumulate = -1;
  if (!(in >> c.threads >> op >> c.M >> c.N >> c.K >> accumulate >> way >> c.openblas_gflops >>
        c.onednn_gflops >> c.openblas_split_gflops >> c.onednn_split_gflops))
    return false;
  std::string rest;
  if (in >> rest) return false;
  if (op.size() != 2 || (op[0] != 'N' && op[0] != 'T') || (op[1] != 'N' && op[1] != 'T'))
    return false;
  if (c.threads < 1 || c.M < 1 || c.N < 1 || c.K < 1 || (accumulate != 0 && accumulate != 1))
    return false;
  // A row names the way chosen, never auto.
  if (!cpu_gemm_from_name(way, c.library) || c.library == CpuGemm::automatic) return false;
  c.trans_a = op[0] == 'T', c.trans_b = op[1] == 'T';
  c.accumulate = accumulate == 1;
  c.remembered = true;
  return true;
}

}  // namespace

std::string gemm_machine_signature() {
  std::string s = cpu_model_name() + "; kernels " + cpu_isa_label(cpu_isa()) + "; OpenBLAS " +
                  blas_core_name() + " (" + openblas_get_config() + ")";
#ifdef LATTICE_HAVE_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  // The ISA oneDNN's kernels use (ONEDNN_MAX_CPU_ISA can cap it), as dnnl_cpu_isa_t's bits.
  char isa[24];
  std::snprintf(isa, sizeof isa, "0x%x", static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
  s += "; oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
       std::to_string(v->patch) + " (ISA " + isa + ")";
#endif
  // Format 2's rows name a way and four rates (one library's rows before: such a file is not
  // read, its shapes are timed again).
  s += "; format 2";
  return s;
}

std::string gemm_choices_path(const std::string& dir) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a(gemm_machine_signature())));
  return dir + "/gemm-choices/" + hex + ".tsv";
}

LockedChoicesFile::LockedChoicesFile(const std::string& path) : path_(path) {
  if (!make_parents(path)) {
    problem_ = system_error("cannot create the folder of", path);
    return;
  }
  const std::string lock = path + ".lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) {
    problem_ = system_error("cannot open", lock);
    return;
  }
  while (::flock(lock_fd_, LOCK_EX) != 0)
    if (errno != EINTR) {
      problem_ = system_error("cannot lock", lock);
      return;
    }
  std::ifstream file(path, std::ios::binary);
  if (!file) return;  // a new file
  std::ostringstream text;
  text << file.rdbuf();
  const std::string all = text.str();
  ends_mid_line_ = !all.empty() && all.back() != '\n';  // a writer that died mid-row
  std::istringstream in(all);
  const std::string header = kHeaderPrefix + gemm_machine_signature();
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    number++;
    if (number == 1) {
      if (line != header) {
        problem_ = path + " was written for another machine or program (its first line is \"" +
                   line + "\")";
        return;
      }
      has_header_ = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    GemmChoice c{};
    if (parse_row(line, c))
      rows_.push_back(c);
    else
      skipped_.push_back(path + " line " + std::to_string(number) + " (\"" + line + "\")");
  }
}

LockedChoicesFile::~LockedChoicesFile() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

bool LockedChoicesFile::append(const GemmChoice& c) {
  std::ofstream out(path_, std::ios::app);
  if (ends_mid_line_) out << "\n";
  if (!has_header_) out << kHeaderPrefix << gemm_machine_signature() << "\n" << kColumns << "\n";
  char row[200];
  std::snprintf(row, sizeof row, "%d\t%c%c\t%d\t%d\t%d\t%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\n",
                c.threads, c.trans_a ? 'T' : 'N', c.trans_b ? 'T' : 'N', c.M, c.N, c.K,
                c.accumulate ? 1 : 0, cpu_gemm_name(c.library), c.openblas_gflops, c.onednn_gflops,
                c.openblas_split_gflops, c.onednn_split_gflops);
  out << row;
  out.flush();
  if (!out) {
    problem_ = system_error("cannot write", path_);
    return false;
  }
  has_header_ = true, ends_mid_line_ = false;
  return true;
}

}  // namespace lattice::kernels::cpu
