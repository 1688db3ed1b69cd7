#include "normlab/parallel.hpp"

#include <omp.h>

namespace normlab {
void set_num_threads(int n) { omp_set_num_threads(n < 1 ? 1 : n); }
int num_threads() { return omp_get_max_threads(); }
}  // namespace normlab
