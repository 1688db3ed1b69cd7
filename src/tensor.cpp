#include "normlab/tensor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <mutex>
#include <new>
#include <vector>
#include <limits>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define NORMLAB_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define NORMLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define NORMLAB_POISON(p, n) ((void)(p), (void)(n))
#define NORMLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace normlab {

namespace detail {
namespace {

constexpr std::align_val_t kStorageAlignment{64};

// Size classes: multiples of 64 bytes up to 1 KiB (16 classes), then 8 classes per power of two
// (each 1/8 of it apart) up to kStorageCacheBlockBytes.
constexpr size_t kSmallClasses = 16;
constexpr size_t kNumClasses = kSmallClasses + 8 * 12;  // (1 KiB, 4 MiB]: 12 powers of two
// A request takes the smallest kept block of its class or of the next ones up to this many classes
// above (up to about twice its size): a batch's token count moves its activations' sizes from step
// to step, and blocks of one exact class would leave the last step's blocks unused.
constexpr size_t kClassesAbove = 8;

size_t class_of(size_t bytes) {  // the smallest class holding `bytes`
  if (bytes <= 1024) return std::max<size_t>(1, (bytes + 63) / 64) - 1;
  const int e = std::bit_width(bytes - 1) - 1;  // 2^e < bytes <= 2^(e + 1), e >= 10
  const size_t step = size_t{1} << (e - 3);
  const size_t eighths = (bytes - (size_t{1} << e) + step - 1) / step;  // 1..8
  return kSmallClasses + size_t(e - 10) * 8 + eighths - 1;
}
size_t class_bytes(size_t index) {
  if (index < kSmallClasses) return (index + 1) * 64;
  const size_t k = index - kSmallClasses, e = 10 + k / 8;
  return (size_t{1} << e) + (k % 8 + 1) * (size_t{1} << (e - 3));
}

// Each block starts with one cache line holding its class (or, above the classes, its size): a
// block may serve a smaller request than its own size, and its deallocation must find its class.
constexpr size_t kHeader = 64;
constexpr size_t kUncached = size_t(-1);

// The freed blocks of each class, last freed on top. Leaked on purpose: tensors freed during static
// destruction still find it; the process's end returns the blocks.
struct StorageCache {
  std::mutex mutex;
  std::array<std::vector<char*>, kNumClasses> free;
  size_t cached_bytes = 0;
};
StorageCache& storage_cache() {
  static StorageCache* cache = new StorageCache;
  return *cache;
}

char* new_block(size_t payload_bytes, size_t index) {
  char* base = static_cast<char*>(::operator new(kHeader + payload_bytes, kStorageAlignment));
  reinterpret_cast<size_t*>(base)[0] = index;
  reinterpret_cast<size_t*>(base)[1] = payload_bytes;
  return base;
}

}  // namespace

void* storage_allocate(size_t bytes) {
  if (bytes > kStorageCacheBlockBytes) return new_block(bytes, kUncached) + kHeader;
  const size_t first = class_of(bytes);
  StorageCache& cache = storage_cache();
  {
    std::lock_guard lock(cache.mutex);
    for (size_t c = first; c < std::min(kNumClasses, first + kClassesAbove + 1); c++) {
      std::vector<char*>& blocks = cache.free[c];
      if (blocks.empty()) continue;
      char* base = blocks.back();
      blocks.pop_back();
      cache.cached_bytes -= class_bytes(c);
      NORMLAB_UNPOISON(base + kHeader, class_bytes(c));
      return base + kHeader;
    }
  }
  return new_block(class_bytes(first), first) + kHeader;
}

void storage_deallocate(void* block, size_t) noexcept {
  if (block == nullptr) return;
  char* base = static_cast<char*>(block) - kHeader;
  const size_t index = reinterpret_cast<const size_t*>(base)[0];
  const size_t payload = reinterpret_cast<const size_t*>(base)[1];
  if (index != kUncached) {
    StorageCache& cache = storage_cache();
    std::lock_guard lock(cache.mutex);
    if (cache.cached_bytes + payload <= kStorageCacheBytes) {
      try {
        cache.free[index].push_back(base);
        cache.cached_bytes += payload;
        NORMLAB_POISON(base + kHeader, payload);
        return;
      } catch (const std::bad_alloc&) {  // no room for the pointer: give the block back instead
      }
    }
  }
  ::operator delete(base, kHeader + payload, kStorageAlignment);
}

size_t storage_cached_bytes() {
  StorageCache& cache = storage_cache();
  std::lock_guard lock(cache.mutex);
  return cache.cached_bytes;
}

}  // namespace detail

namespace {
// 2^34 floats = 64 GiB: far beyond this project's models; refusing it turns a typo into an error
// instead of a bad_alloc or an OOM kill.
constexpr int64_t kMaxElements = int64_t(1) << 34;

// Below this many floats a zero-fill stays on the calling thread.
constexpr int64_t kParallelFillFloats = int64_t{1} << 15;

// n floats of storage, zero-filled when asked: by all the threads for a large buffer (the
// backward pass creates a gradient buffer for every activation, and a serial fill of each would
// leave the other threads waiting), and each thread fills the part it will likely work on.
std::shared_ptr<Storage> make_storage(size_t n, bool zero) {
  auto storage = std::make_shared<Storage>(n);  // default-initialized: not filled
  if (!zero) return storage;
  float* data = storage->data();
  const auto count = static_cast<int64_t>(n);
  if (count < kParallelFillFloats) {
    std::fill(data, data + count, 0.0f);
    return storage;
  }
  const int64_t threads = parallel_parts();
  run_parts(threads, [&](int64_t t) {
    const int64_t begin = count * t / threads, end = count * (t + 1) / threads;
    std::fill(data + begin, data + end, 0.0f);
  });
  return storage;
}

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, bool zero) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->storage = make_storage(static_cast<size_t>(shape_numel(shape)), zero);
  return impl;
}
}  // namespace

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw UsageError(fmt::format("negative dimension in shape {}", shape_str(shape)));
    if (d != 0 && n > kMaxElements / d) throw UsageError(fmt::format("shape {} is too large", shape_str(shape)));
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Tensor Tensor::empty(const Shape& shape) { return Tensor(make_impl(shape, /*zero=*/false)); }
Tensor Tensor::zeros(const Shape& shape) { return Tensor(make_impl(shape, /*zero=*/true)); }
Tensor Tensor::ones(const Shape& shape) { return full(shape, 1.0f); }

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  std::fill(t.impl_->storage->begin(), t.impl_->storage->end(), value);
  return t;
}

Tensor Tensor::from_data(const Shape& shape, std::vector<float> data) {
  if (static_cast<int64_t>(data.size()) != shape_numel(shape))
    throw UsageError(fmt::format("from_data: {} values do not fill shape {}", data.size(), shape_str(shape)));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->storage = std::make_shared<Storage>(data.begin(), data.end());
  return Tensor(impl);
}

Tensor Tensor::scalar(float value) { return full({}, value); }

Tensor Tensor::normal(const Shape& shape, Rng& rng, float mean, float stddev) {
  Tensor t = empty(shape);
  for (float& v : *t.impl_->storage) v = rng.normal(mean, stddev);
  return t;
}

Tensor Tensor::uniform(const Shape& shape, Rng& rng, float lo, float hi) {
  Tensor t = empty(shape);
  for (float& v : *t.impl_->storage) v = rng.uniform(lo, hi);
  return t;
}

const Shape& Tensor::shape() const {
  if (!impl_) throw UsageError("use of an undefined tensor");
  return impl_->shape;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  int64_t i = d < 0 ? d + n : d;
  if (i < 0 || i >= n) throw UsageError(fmt::format("dimension {} out of range for shape {}", d, shape_str(shape())));
  return shape()[static_cast<size_t>(i)];
}

float* Tensor::data() {
  if (!impl_) throw UsageError("use of an undefined tensor");
  return impl_->storage->data() + impl_->offset;
}
const float* Tensor::data() const {
  if (!impl_) throw UsageError("use of an undefined tensor");
  return impl_->storage->data() + impl_->offset;
}

std::vector<float> Tensor::to_vector() const { return std::vector<float>(data(), data() + numel()); }

float Tensor::item() const {
  if (numel() != 1) throw UsageError(fmt::format("item() needs one element, shape is {}", shape_str(shape())));
  return data()[0];
}

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool on) {
  if (!impl_) throw UsageError("use of an undefined tensor");
  if (impl_->grad_fn) throw UsageError("set_requires_grad is only for leaf tensors (parameters, inputs)");
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::has_grad() const { return impl_ && impl_->grad != nullptr; }

float* Tensor::grad_data() {
  if (!impl_) throw UsageError("use of an undefined tensor");
  if (!impl_->grad) impl_->grad = make_storage(static_cast<size_t>(numel()), /*zero=*/true);
  return impl_->grad->data();
}

float* Tensor::grad_data_to_overwrite(bool& existed) {
  if (!impl_) throw UsageError("use of an undefined tensor");
  existed = impl_->grad != nullptr;
  if (!existed) impl_->grad = make_storage(static_cast<size_t>(numel()), /*zero=*/false);
  return impl_->grad->data();
}

const float* Tensor::grad_data() const { return has_grad() ? impl_->grad->data() : nullptr; }

Tensor Tensor::grad() const {
  Tensor g = zeros(shape());
  if (has_grad()) std::copy(impl_->grad->begin(), impl_->grad->end(), g.data());
  return g;
}

void Tensor::zero_grad() {
  if (impl_) impl_->grad.reset();
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl_ ? impl_->grad_fn : none;
}

void Tensor::backward() { run_backward(*this, nullptr); }

void Tensor::backward(const Tensor& grad_output) {
  if (grad_output.shape() != shape())
    throw UsageError(fmt::format("backward: gradient shape {} does not match tensor shape {}",
                                 shape_str(grad_output.shape()), shape_str(shape())));
  run_backward(*this, grad_output.data());
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  return Tensor(impl);
}

Tensor Tensor::clone() const { return from_data(shape(), to_vector()); }

}  // namespace normlab
