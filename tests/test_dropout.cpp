// Dropout masks are per token: a sequence's mask is a function of the seed, the step, the call
// site and the sequence's global index, never of the other sequences in its batch. So a batch cut
// into data-parallel shares draws the same masks as the whole batch; the encoder keys each layer's
// masks on its own index. (That a sequence's output in a training forward with dropout does not
// depend on its batch-mates is in test_encoder.cpp.)
#include <doctest/doctest.h>

#include "support.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "normlab/autograd.hpp"
#include "normlab/kernels/dropout.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/rng.hpp"

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

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
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

TEST_CASE("dropout: the encoder keys each layer's masks on its own index, as TransformerEncoder promises") {
  nn::EncoderOptions options;
  options.d_model = 8;
  options.num_heads = 2;
  options.num_layers = 2;
  options.dim_feedforward = 16;
  options.dropout = 0.3f;
  options.placement = nn::Placement::post;  // no final norm: the stack is exactly its two layers
  nn::TransformerEncoder encoder(options, 11);
  encoder.train();
  NoGradGuard no_grad;
  Rng rng(5);
  const std::vector<int64_t> offsets{0, 3, 7};
  Tensor x = Tensor::normal({7, 8}, rng);
  const uint64_t step = 4;
  const Tensor out = encoder.forward(x, offsets, nullptr, {step, 0});
  auto by_hand = [&](uint64_t second_site) {
    Tensor h = encoder.layers[0]->forward(x, offsets, kernels::dropout_key(encoder.dropout_seed, step, 0), 0);
    return encoder.layers[1]->forward(h, offsets, kernels::dropout_key(encoder.dropout_seed, step, second_site), 0);
  };
  CHECK(same_bits(out, by_hand(1)));
  CHECK(!same_bits(out, by_hand(0)));  // layer 1 with layer 0's masks is another network
}
