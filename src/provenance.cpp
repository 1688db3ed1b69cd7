#include "normlab/provenance.hpp"

#include <fstream>

#include "normlab/kernels/dispatch.hpp"

namespace normlab {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name;
  }
  return "unknown CPU";
}

std::string kernels_in_use() { return kernels::active_isa_name(); }

}  // namespace normlab
