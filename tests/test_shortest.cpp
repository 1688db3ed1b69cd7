// normlab::shortest, the one helper behind the records' numbers and the optimizers' scalar math:
// the double a float's shortest decimal form names.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "normlab/shortest.hpp"

using normlab::shortest;

namespace {

float float_of_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// The decimal fmt prints for a float, read as a double: what the records and the config show.
double printed(float value) {
  const std::string text = fmt::format("{}", value);
  double result = std::numeric_limits<double>::quiet_NaN();
  std::from_chars(text.data(), text.data() + text.size(), result);
  return result;
}

}  // namespace

TEST_CASE("shortest: the double of the float's shortest decimal - fmt's below 2^25, the exact integer above") {
  CHECK(shortest(0.001f) == 0.001);
  CHECK(shortest(0.9f) == 0.9);
  CHECK(shortest(0.999f) == 0.999);
  CHECK(shortest(1e-8f) == 1e-8);
  CHECK(shortest(-2.5f) == -2.5);
  CHECK(shortest(0.0f) == 0.0);
  CHECK(std::signbit(shortest(-0.0f)));
  CHECK(shortest(std::numeric_limits<float>::infinity()) == std::numeric_limits<double>::infinity());
  CHECK(std::isnan(shortest(std::numeric_limits<float>::quiet_NaN())));
  CHECK(shortest(0.001f) != double(0.001f));  // not the float widened
  // A diverging run's loss: the float's own integer, as metrics.jsonl has always shown it.
  CHECK(shortest(33742552.0f) == 33742552.0);
  CHECK(fmt::format("{}", 33742552.0f) == "33742550");
  CHECK(shortest(3e38f) == 3e38);  // where the exponent form is the shorter, the shortest digits again

  // Every optimizer input is at most 10 (config ranges): there shortest is exactly the decimal fmt prints.
  int64_t checked = 0, mismatched = 0, not_round_trip = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 40503) {  // ~106k floats, every exponent
    const float value = float_of_bits(uint32_t(bits));
    if (!std::isfinite(value)) continue;
    const double decimal = shortest(value);
    if (float(decimal) != value) ++not_round_trip;
    if (std::fabs(value) >= 33554432.0f) continue;  // 2^25
    ++checked;
    const double expected = printed(value);
    if (std::memcmp(&decimal, &expected, sizeof(double)) != 0) ++mismatched;  // bit for bit: -0.0 too
  }
  CHECK(checked > 50000);
  CHECK(mismatched == 0);
  CHECK(not_round_trip == 0);
}
