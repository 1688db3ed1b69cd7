#pragma once
// Tensor: an N-d array of float32, contiguous and row-major, with shared storage (reshape makes a
// view, not a copy), an optional gradient buffer, and a link to the autograd node that made it.
//
// The autograd idea itself lives in autograd.hpp; ops.hpp wires kernels into it.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "normlab/detail/default_init_allocator.hpp"

namespace normlab {

class Rng;
struct Node;

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);    // product of dims; 1 for a scalar (empty shape)
std::string shape_str(const Shape& shape);  // "[4, 100, 512]"

namespace detail {
// Tensor storage's memory (tensor.cpp): 64-byte aligned blocks of size classes (1/8 of a power of
// two apart), a freed block kept for the next request of its class or of a class up to 8 below
// (about half its size), the most recently freed first. A step allocates the activations and
// gradients of the step before, of similar sizes, so each comes back in a block still in cache,
// without malloc's search, splitting and merging (about 4% of the demo step in a profile). What is
// kept is bounded (kStorageCacheBytes); larger blocks go back to the system when freed.
inline constexpr std::size_t kStorageCacheBytes = std::size_t{64} << 20;  // kept in all, at most
inline constexpr std::size_t kStorageCacheBlockBytes = std::size_t{4} << 20;  // larger blocks are not kept
void* storage_allocate(std::size_t bytes);
void storage_deallocate(void* block, std::size_t bytes) noexcept;
std::size_t storage_cached_bytes();  // held for reuse now (for tests)

template <typename T>
struct StorageAllocator : DefaultInitAllocator<T> {
  template <typename U>
  struct rebind {
    using other = StorageAllocator<U>;
  };
  StorageAllocator() = default;
  template <typename U>
  StorageAllocator(const StorageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(storage_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { storage_deallocate(p, n * sizeof(T)); }
};
}  // namespace detail

// Float storage whose size-only constructor leaves the values uninitialized (Tensor::empty).
using Storage = std::vector<float, detail::StorageAllocator<float>>;

struct TensorImpl {
  Shape shape;
  std::shared_ptr<Storage> storage;  // shared by views (reshape)
  int64_t offset = 0;                // first element of this tensor inside storage
  std::shared_ptr<Storage> grad;     // allocated when the first gradient arrives
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // the op that produced this tensor; null for leaves
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. All data is float32; sizes are checked (negative dims, overflow).
  static Tensor empty(const Shape& shape);  // contents uninitialized: the caller writes every element
  static Tensor zeros(const Shape& shape);
  static Tensor ones(const Shape& shape);
  static Tensor full(const Shape& shape, float value);
  static Tensor from_data(const Shape& shape, std::vector<float> data);
  static Tensor scalar(float value);
  static Tensor normal(const Shape& shape, Rng& rng, float mean = 0.0f, float stddev = 1.0f);
  static Tensor uniform(const Shape& shape, Rng& rng, float lo, float hi);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end, like PyTorch
  int64_t numel() const { return shape_numel(shape()); }

  float* data();
  const float* data() const;
  std::vector<float> to_vector() const;
  float item() const;  // the value of a one-element tensor

  // Autograd state.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);  // only on leaves
  bool has_grad() const;
  float* grad_data();  // allocates a zero gradient if there is none yet
  // For a backward kernel that stores every element of the gradient: the buffer, with `existed`
  // telling whether a gradient was there (add to it). If not, the buffer is new and NOT
  // zero-filled, and the caller must overwrite all of it (kernels/grad_out.hpp says why).
  float* grad_data_to_overwrite(bool& existed);
  const float* grad_data() const;  // null if there is no gradient
  Tensor grad() const;             // a copy of the gradient as a tensor (zeros if none)
  void zero_grad();                // drop the gradient buffer
  const std::shared_ptr<Node>& grad_fn() const;

  // Backward from this tensor: it must hold a single element (a loss) unless a gradient of the
  // same shape is given. See autograd.hpp.
  void backward();
  void backward(const Tensor& grad_output);

  Tensor detach() const;  // same storage, no graph
  Tensor clone() const;   // new storage, no graph

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace normlab
