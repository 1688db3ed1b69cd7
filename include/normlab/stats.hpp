#pragma once
// Small statistics shared by the benchmarks and the comparison report.
#include <vector>

namespace normlab {

// The median of the finite values (NaN and infinities are skipped: a diverged run's loss, say);
// the mean of the two middle ones for an even count; NaN when no value is finite.
double median(std::vector<double> values);

}  // namespace normlab
