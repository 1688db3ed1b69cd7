#pragma once
// Thread control. All parallel loops use OpenMP with a static schedule, so the split of work over
// threads (and therefore every floating-point reduction order) depends only on the thread count.
namespace normlab {
void set_num_threads(int n);  // n >= 1
int num_threads();
}  // namespace normlab
