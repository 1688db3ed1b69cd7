#pragma once
// One seeded generator with the same output on every platform. std::mt19937 is portable but the
// std:: distributions are not (libstdc++ and libc++ give different normals), so the distributions
// are ours too.
#include <cmath>
#include <cstdint>

namespace normlab {

// PCG32 (O'Neill, pcg-random.org, "XSH RR" variant): 64-bit state, 32-bit output.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0x853c49e6748fea9bULL, uint64_t stream = 0xda3e39cb94b95bdbULL) {
    seed_with(seed, stream);
  }
  void seed_with(uint64_t seed, uint64_t stream = 0xda3e39cb94b95bdbULL) {
    state_ = 0;
    inc_ = (stream << 1u) | 1u;
    next_u32();
    state_ += seed;
    next_u32();
  }
  uint32_t next_u32() {
    uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + inc_;
    uint32_t xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = static_cast<uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
  }
  uint64_t next_u64() { return (uint64_t(next_u32()) << 32) | next_u32(); }
  // Uniform in [0, 1) with 24 random bits: exactly representable as float.
  float uniform() { return float(next_u32() >> 8) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n) without modulo bias (Lemire's method is overkill here; rejection).
  uint32_t below(uint32_t n) {
    uint32_t threshold = (-n) % n;
    for (;;) {
      uint32_t r = next_u32();
      if (r >= threshold) return r % n;
    }
  }
  // Standard normal by Box-Muller in double precision; one of the pair is discarded so the stream
  // position depends only on how many numbers were drawn.
  float normal() {
    double u1 = (double(next_u32()) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
    double u2 = double(next_u32()) * (1.0 / 4294967296.0);          // [0, 1)
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  float normal(float mean, float stddev) { return mean + stddev * normal(); }

  // The whole state, for checkpoints (exact resume).
  uint64_t state() const { return state_; }
  uint64_t increment() const { return inc_; }
  void set_state(uint64_t state, uint64_t inc) {
    state_ = state;
    inc_ = inc;
  }

 private:
  uint64_t state_ = 0;
  uint64_t inc_ = 0;
};

}  // namespace normlab
