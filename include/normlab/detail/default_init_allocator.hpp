#pragma once
// An allocator that leaves elements default-initialized, i.e. uninitialized for float, when a
// vector is created or grown by size alone; std::vector(n, 0.0f) still fills. Tensor storage uses
// it because every op overwrites its output, so zero-filling it first would be wasted work.
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
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
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
