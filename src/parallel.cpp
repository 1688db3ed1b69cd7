#include "normlab/parallel.hpp"

#include <omp.h>

#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace normlab {
void set_num_threads(int n) { omp_set_num_threads(n < 1 ? 1 : n); }
int num_threads() { return omp_get_max_threads(); }

void restart_with_openmp_spin(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("GOMP_SPINCOUNT", kOpenMPSpinCount, 0) != 0) return;
  ::execv("/proc/self/exe", argv);
  ::unsetenv("GOMP_SPINCOUNT");  // execv failed: this process keeps libgomp's default, and says so
}

std::string openmp_wait_setting() {
  std::string setting;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    if (const char* value = std::getenv(name)) setting += (setting.empty() ? "" : ", ") + std::string(name) + "=" + value;
  }
  if (setting.empty()) return "libgomp's default spin";
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const bool ours = std::getenv("OMP_WAIT_POLICY") == nullptr && spin != nullptr && std::strcmp(spin, kOpenMPSpinCount) == 0;
  return setting + (ours ? ", normlab's default" : "");
}
}  // namespace normlab
