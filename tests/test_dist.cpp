// The data-parallel pieces that need no MPI: the token-balanced split, the reduction's slicing and
// order, the trainer-facing reduce() on a stand-in communicator, and sync BatchNorm's kernel hook.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "normlab/dist/communicator.hpp"
#include "normlab/dist/data_parallel.hpp"
#include "normlab/dist/split.hpp"
#include "normlab/error.hpp"
#include "normlab/kernels/batch_norm.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/ops.hpp"
#include "normlab/rng.hpp"

using namespace normlab;

namespace {

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets{0};
  for (int64_t length : lengths) offsets.push_back(offsets.back() + length);
  return offsets;
}

int64_t part_tokens(const std::vector<int64_t>& offsets, const std::vector<int64_t>& boundaries, int p) {
  return offsets[size_t(boundaries[size_t(p) + 1])] - offsets[size_t(boundaries[size_t(p)])];
}

// Rank 0 of `size` ranks that all hold the same values: sum() multiplies by size.
class MirrorCommunicator final : public dist::Communicator {
 public:
  explicit MirrorCommunicator(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void sum(std::span<double> values) override {
    for (double& v : values) v *= size_;
  }
  std::vector<uint64_t> all_gather(uint64_t value) override { return std::vector<uint64_t>(size_t(size_), value); }
  Verdict agree(int code, const std::string& message) override { return {code, 0, code != 0 ? message : ""}; }
  std::string describe() const override { return "mirror"; }

 private:
  int size_;
};

}  // namespace

TEST_CASE("dist: balanced_split cuts contiguous parts with about the same number of tokens") {
  const std::vector<int64_t> offsets = offsets_of({5, 1, 1, 1, 4, 4});
  CHECK(dist::balanced_split(offsets, 2) == std::vector<int64_t>{0, 4, 6});
  CHECK(dist::balanced_split(offsets, 1) == std::vector<int64_t>{0, 6});

  Rng rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> lengths(size_t(1 + rng.below(40)));
    for (int64_t& length : lengths) length = 1 + rng.below(30);
    const std::vector<int64_t> off = offsets_of(lengths);
    const int parts = 1 + int(rng.below(6));
    const std::vector<int64_t> b = dist::balanced_split(off, parts);
    REQUIRE(b.size() == size_t(parts) + 1);
    CHECK(b.front() == 0);
    CHECK(b.back() == int64_t(lengths.size()));
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    const double target = double(off.back()) / parts;
    for (int p = 0; p < parts; ++p) {
      CHECK(b[size_t(p)] <= b[size_t(p) + 1]);
      // Every part non-empty when there are enough sequences; else within a sequence of the target.
      if (int64_t(lengths.size()) >= parts) CHECK(b[size_t(p)] < b[size_t(p) + 1]);
      if (int64_t(lengths.size()) >= 2 * parts * 30)
        CHECK(std::abs(double(part_tokens(off, b, p)) - target) <= 2.0 * double(longest));
    }
  }
}

TEST_CASE("dist: fewer sequences than ranks leaves the last ranks empty") {
  const std::vector<int64_t> offsets = offsets_of({3, 2});
  const std::vector<int64_t> b = dist::balanced_split(offsets, 4);
  CHECK(b.front() == 0);
  CHECK(b.back() == 2);
  int nonempty = 0;
  for (int p = 0; p < 4; ++p) nonempty += b[size_t(p)] < b[size_t(p) + 1];
  CHECK(nonempty == 2);
}

TEST_CASE("dist: sub_batch keeps tokens - offsets and targets of its sequences") {
  std::vector<data::Example> examples = {{{1, 2}, {3, -1}}, {{4, 5, 6}, {7, 8, -1}}, {{9}, {-1}}};
  const data::Batch batch = data::pack_batch(examples, data::TargetKind::per_token);
  const data::Batch share = dist::sub_batch(batch, 1, 3);
  CHECK(share.tokens == std::vector<int32_t>{4, 5, 6, 9});
  CHECK(share.offsets == std::vector<int64_t>{0, 3, 4});
  CHECK(share.targets == std::vector<int32_t>{7, 8, -1, -1});
  CHECK(share.num_targets == 2);
  CHECK(share.num_real_tokens == 4);
  const data::Batch empty = dist::sub_batch(batch, 3, 3);
  CHECK(empty.batch_size() == 0);
  CHECK(empty.num_targets == 0);

  std::vector<data::Example> sequences = {{{1, 2}, {0}}, {{3}, {1}}};
  const data::Batch per_sequence = data::pack_batch(sequences, data::TargetKind::per_sequence);
  const data::Batch second = dist::sub_batch(per_sequence, 1, 2);
  CHECK(second.targets == std::vector<int32_t>{1});
  CHECK(second.num_targets == 1);
}

TEST_CASE("dist: the reduction's slices tile the buffer - and the sum runs in rank order") {
  for (int64_t n : {0, 1, 5, 17, 64})
    for (int parts : {1, 2, 3, 7}) {
      int64_t expected_begin = 0;
      for (int p = 0; p < parts; ++p) {
        auto [begin, end] = dist::slice_bounds(n, parts, p);
        CHECK(begin == expected_begin);
        CHECK(end - begin >= n / parts);
        CHECK(end - begin <= n / parts + 1);
        expected_begin = end;
      }
      CHECK(expected_begin == n);
    }
  // Rank order, not any other: 1e16 + 1 - 1e16 is 0 in that order, 1 in another.
  const std::vector<double> sum = dist::sum_in_rank_order({{1e16}, {1.0}, {-1e16}});
  CHECK(sum[0] == 0.0);
}

TEST_CASE("dist: one process is rank 0 of 1 - and the launcher's process count comes from the environment") {
  CHECK(dist::world().size() == 1);
  CHECK(dist::world().rank() == 0);
  CHECK(dist::launcher_world_size() == 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  CHECK(dist::launcher_world_size() == 3);
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::setenv("PMI_SIZE", "2", 1);
  CHECK(dist::launcher_world_size() == 2);
  ::unsetenv("PMI_SIZE");
}

TEST_CASE("dist: reduce() sums gradients and counts over ranks and divides once by the global targets") {
  MirrorCommunicator two(2);
  dist::DataParallel dp(two, {});
  CHECK(dp.active());
  Tensor a = Tensor::full({3}, 0.0f).set_requires_grad();
  Tensor b = Tensor::full({2}, 0.0f).set_requires_grad();  // no gradient: this rank never reached it
  float* ga = a.grad_data();
  ga[0] = 3.0f, ga[1] = -6.0f, ga[2] = 9.0f;
  nn::NamedTensors params = {{"a", a}, {"b", b}};
  const dist::StepSums sums = dp.reduce(params, {4.5, 2, 3, 10, SIGTERM});
  CHECK(sums.loss_sum == 9.0);
  CHECK(sums.correct == 4);
  CHECK(sums.targets == 6);
  CHECK(sums.tokens == 20);
  CHECK(sums.stop_request == SIGTERM);
  CHECK(dp.agreed_stop() == SIGTERM);
  // (2 ranks * g) / (2 ranks * 3 targets) = g / 3
  CHECK(a.grad_data()[0] == doctest::Approx(1.0));
  CHECK(a.grad_data()[1] == doctest::Approx(-2.0));
  REQUIRE(b.grad_data() != nullptr);
  CHECK(b.grad_data()[0] == 0.0f);
  CHECK(dp.reduce(params, {0, 0, 1, 1, SIGINT}).stop_request == SIGINT);
  CHECK(dp.reduce(params, {0, 0, 1, 1, 0}).stop_request == 0);
  // Extra fields (the diagnostics' sums and their counts) are summed in place, each in its own
  // field, and the step's sums after them still land.
  std::vector<double> extra = {1.5, -2.0, 7.0};
  double count = 4.0;
  const dist::StepSums with_extra = dp.reduce(params, {1.0, 1, 2, 5, 0}, {extra, {&count, 1}});
  CHECK(extra == std::vector<double>{3.0, -4.0, 14.0});
  CHECK(count == 8.0);
  CHECK(with_extra.loss_sum == 2.0);
  CHECK(with_extra.targets == 4);
  CHECK(with_extra.tokens == 10);
}

TEST_CASE("dist: configs that cannot run data-parallel are refused naming the key") {
  MirrorCommunicator two(2);
  CHECK_NOTHROW(dist::DataParallel(two, {.sync_batch_norm = false, .batch_size = 1}));
  const dist::DataParallelOptions sync_one_sequence{.sync_batch_norm = true, .batch_size = 1};
  CHECK_THROWS_WITH_AS(dist::DataParallel(two, sync_one_sequence), doctest::Contains("train.batch_size"), InputError);
  dist::SingleProcess one;
  CHECK_NOTHROW(dist::DataParallel(one, sync_one_sequence));  // one process: nothing to refuse
  // One process gets the step that shares nothing; N ranks the data-parallel one.
  CHECK_FALSE(dist::make_step_reduction(one, sync_one_sequence)->active());
  CHECK(dist::make_step_reduction(one, sync_one_sequence)->batch_norm_ranks() == nullptr);
  CHECK(dist::make_step_reduction(two, {.sync_batch_norm = true, .batch_size = 2})->batch_norm_ranks() != nullptr);
  CHECK(dist::make_step_reduction(two, {.sync_batch_norm = false, .batch_size = 2})->batch_norm_ranks() == nullptr);
}

TEST_CASE("dist: the parameter hash sees a one-bit difference") {
  Tensor a = Tensor::full({4}, 0.5f);
  nn::NamedTensors params = {{"a", a}};
  const uint64_t before = dist::parameter_hash(params);
  CHECK(dist::parameter_hash(params) == before);
  a.data()[2] = std::nextafter(0.5f, 1.0f);
  CHECK(dist::parameter_hash(params) != before);
}

TEST_CASE("dist: sync BatchNorm over two identical ranks normalizes like one - with local parameter gradients") {
  // Two ranks holding the same tokens have the same global statistics as one of them, so output and
  // input gradient must match the local computation; dgamma/dbeta stay this rank's own (the
  // gradient reduction adds the ranks up); the running variance's unbiased correction sees 2N.
  const int64_t N = 6, C = 3;
  Rng rng(3);
  auto run = [&](bool sync, std::vector<float>& out, std::vector<float>& dx, std::vector<float>& dgamma,
                 std::vector<float>& running_var) {
    Rng local(3);
    Tensor x = Tensor::empty({N, C});
    for (int64_t i = 0; i < N * C; ++i) x.data()[i] = local.normal();
    x.set_requires_grad();
    nn::BatchNorm norm(C);
    MirrorCommunicator two(2);
    dist::DataParallel dp(two, {.sync_batch_norm = true, .batch_size = N});
    if (sync) norm.ranks = dp.batch_norm_ranks();
    Tensor y = norm.forward(x);
    Tensor weights = Tensor::empty({N, C});
    for (int64_t i = 0; i < N * C; ++i) weights.data()[i] = float(i % 5) - 2.0f;
    ops::sum(ops::mul(y, weights)).backward();
    out.assign(y.data(), y.data() + N * C);
    dx.assign(x.grad_data(), x.grad_data() + N * C);
    dgamma.assign(norm.weight.grad_data(), norm.weight.grad_data() + C);
    running_var.assign(norm.running_var.data(), norm.running_var.data() + C);
  };
  std::vector<float> out1, dx1, dg1, rv1, out2, dx2, dg2, rv2;
  run(false, out1, dx1, dg1, rv1);
  run(true, out2, dx2, dg2, rv2);
  for (size_t i = 0; i < out1.size(); ++i) {
    CHECK(out2[i] == doctest::Approx(out1[i]).epsilon(1e-6));
    CHECK(dx2[i] == doctest::Approx(dx1[i]).epsilon(1e-5));
  }
  for (size_t c = 0; c < dg1.size(); ++c) {
    CHECK(dg2[c] == doctest::Approx(dg1[c]).epsilon(1e-5));
    CHECK(rv2[c] != rv1[c]);  // unbiased over 2N - 1, not N - 1
  }
  (void)rng;
}

TEST_CASE("dist: the parameter hash covers every tensor, not only the first") {
  Tensor first = Tensor::full({4}, 0.5f), second = Tensor::full({3}, 0.25f);
  const nn::NamedTensors params = {{"a", first}, {"b", second}};
  const uint64_t before = dist::parameter_hash(params);
  second.data()[2] = std::nextafter(0.25f, 1.0f);
  CHECK(dist::parameter_hash(params) != before);
}
