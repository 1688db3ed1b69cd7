// Dropout masks are per token: a sequence's mask is a function of the seed, the step, the call
// site and the sequence's global index, never of the other sequences in its batch. So a batch cut
// into data-parallel shares draws the same masks as the whole batch, and a sequence's output in a
// training forward does not depend on its batch-mates (with a per-token norm).
#include <doctest/doctest.h>

#include "support.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "normlab/kernels/dropout.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/rng.hpp"
#include "normlab/tensor.hpp"

using namespace normlab;

namespace {

// The dropout mask of a packed batch (lengths), whose first sequence has global index `first`.
std::vector<float> mask_of(const std::vector<int64_t>& lengths, int64_t first, int64_t C, uint64_t key) {
  std::vector<int64_t> offsets{0};
  for (int64_t len : lengths) offsets.push_back(offsets.back() + len);
  const size_t n = size_t(offsets.back() * C);
  std::vector<float> x(n, 1.0f), out(n), mask(n);
  kernels::dropout_forward(out.data(), mask.data(), x.data(), offsets.data(), int64_t(lengths.size()), C, 0.5f, key,
                           first);
  return mask;
}

std::vector<float> rows(const std::vector<float>& values, int64_t first_row, int64_t count, int64_t C) {
  return {values.begin() + first_row * C, values.begin() + (first_row + count) * C};
}


// Sequence `which` of `seqs` (each (len, d), packed) through `encoder`: its output rows and the
// gradient of a fixed weighting of them with respect to its input rows.
struct SeqResult {
  std::vector<float> out, grad;
};

SeqResult run_in_batch(nn::TransformerEncoder& encoder, const std::vector<std::vector<float>>& seqs, size_t which,
                       int64_t d, const std::vector<float>& weights, const nn::DropoutStep& dropout) {
  std::vector<float> packed;
  std::vector<int64_t> offsets{0};
  for (const auto& s : seqs) {
    packed.insert(packed.end(), s.begin(), s.end());
    offsets.push_back(offsets.back() + int64_t(s.size()) / d);
  }
  Tensor x = Tensor::from_data({offsets.back(), d}, packed);
  x.set_requires_grad();
  Tensor out = encoder.forward(x, offsets, nullptr, dropout);
  std::vector<float> g(size_t(out.numel()), 0.0f);
  std::copy(weights.begin(), weights.end(), g.begin() + offsets[which] * d);
  out.backward(Tensor::from_data(out.shape(), g));
  const std::vector<float> all = out.to_vector(), all_grad = x.grad().to_vector();
  const int64_t len = offsets[which + 1] - offsets[which];
  return {rows(all, offsets[which], len, d), rows(all_grad, offsets[which], len, d)};
}

}  // namespace

TEST_CASE("dropout: a sequence's mask does not depend on which other sequences are in the batch") {
  const int64_t C = 24;
  const uint64_t key = kernels::dropout_key(42, 3, 1);
  // Sequence 2 (length 6) with other batch-mates before and after it, or alone.
  const std::vector<float> in_batch = mask_of({5, 1, 6, 9}, 0, C, key);
  const std::vector<float> other_mates = mask_of({2, 11, 6}, 0, C, key);
  const std::vector<float> alone = mask_of({6}, 2, C, key);
  CHECK(rows(in_batch, 6, 6, C) == alone);
  CHECK(rows(other_mates, 13, 6, C) == alone);
  // The global index matters (sequence 3 draws another mask), and so does the key.
  CHECK(mask_of({6}, 3, C, key) != alone);
  CHECK(mask_of({6}, 2, C, kernels::dropout_key(42, 4, 1)) != alone);

  // Cut into contiguous shares, as data-parallel ranks hold them: the same bits as the whole batch.
  const std::vector<int64_t> lengths = {5, 1, 6, 9, 3, 7};
  const std::vector<float> whole = mask_of(lengths, 0, C, key);
  std::vector<float> shares = mask_of({5, 1, 6}, 0, C, key);
  for (const std::vector<float>& part : {mask_of({9}, 3, C, key), mask_of({3, 7}, 4, C, key)})
    shares.insert(shares.end(), part.begin(), part.end());
  CHECK(shares == whole);
}

TEST_CASE("dropout: in a training forward a sequence's output does not depend on its batch-mates - eval is the identity") {
  const int64_t d = 16;
  Rng rng(5);
  auto random_seq = [&](int64_t len) { return Tensor::normal({len, d}, rng).to_vector(); };
  const std::vector<float> target = random_seq(6);
  const std::vector<std::vector<float>> batch{random_seq(11), target, random_seq(2), random_seq(17)};
  const std::vector<std::vector<float>> other_batch{random_seq(3), target, random_seq(9)};
  const std::vector<float> weights = Tensor::normal({6, d}, rng).to_vector();

  for (nn::Placement placement : {nn::Placement::post, nn::Placement::pre}) {
    CAPTURE(int(placement));
    nn::EncoderOptions opts;
    opts.d_model = d;
    opts.num_heads = 4;
    opts.num_layers = 2;
    opts.dim_feedforward = 32;
    opts.dropout = 0.3f;
    opts.norm = nn::NormKind::layernorm;
    opts.placement = placement;
    nn::TransformerEncoder encoder(opts, 11);
    // The target is sequence 1 of the global batch in each case.
    const SeqResult batched = run_in_batch(encoder, batch, 1, d, weights, {7, 0});
    const SeqResult mates = run_in_batch(encoder, other_batch, 1, d, weights, {7, 0});
    const SeqResult alone = run_in_batch(encoder, {target}, 0, d, weights, {7, 1});
    CHECK(normlab::test::relative_max_error(batched.out, alone.out, 1e-12) < 1e-5);
    CHECK(normlab::test::relative_max_error(batched.grad, alone.grad, 1e-12) < 1e-5);
    CHECK(normlab::test::relative_max_error(mates.out, alone.out, 1e-12) < 1e-5);
    CHECK(normlab::test::relative_max_error(mates.grad, alone.grad, 1e-12) < 1e-5);
    // Another global index or another step: other masks, another output.
    CHECK(normlab::test::relative_max_error(run_in_batch(encoder, {target}, 0, d, weights, {7, 0}).out, alone.out, 1e-12) > 1e-2);
    CHECK(normlab::test::relative_max_error(run_in_batch(encoder, {target}, 0, d, weights, {8, 1}).out, alone.out, 1e-12) > 1e-2);

    // Eval mode: no dropout, the same output as the same weights with dropout = 0.
    opts.dropout = 0.0f;
    nn::TransformerEncoder no_dropout(opts, 11);
    encoder.eval();
    CHECK(run_in_batch(encoder, batch, 1, d, weights, {7, 0}).out ==
          run_in_batch(no_dropout, batch, 1, d, weights, {7, 0}).out);
  }
}
