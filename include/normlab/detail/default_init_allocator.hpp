#pragma once
// An allocator that leaves elements default-initialized, i.e. uninitialized for float, when a
// vector is created or grown by size alone; std::vector(n, 0.0f) still fills. Tensor storage uses
// it because every op overwrites its output, so zero-filling it first would be wasted work.
//
// Its blocks start on a 64-byte cache line (operator new's aligned form), not at malloc's 16
// bytes: a 16-float vector load is then never split across two lines, and when threads share a
// matrix by column slices of 16 floats (one attention head of hd = 16, one GEMM micro-tile
// column), no cache line is written by two threads at once.
#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace normlab::detail {

template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  static constexpr std::align_val_t kAlignment{64};

  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), kAlignment));
  }
  void deallocate(T* p, std::size_t n) noexcept { ::operator delete(p, n * sizeof(T), kAlignment); }
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

}  // namespace normlab::detail
