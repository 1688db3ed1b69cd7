#pragma once
// An allocator that leaves elements default-initialized, i.e. uninitialized for float, when a
// vector is created or grown by size alone; std::vector(n, 0.0f) still fills. Tensor storage uses
// it because every op overwrites its output, so zero-filling it first would be wasted work.
//
// Its blocks start on a 64-byte cache line (operator new's aligned form), not at malloc's 16
// bytes: a 16-float vector load is then never split across two lines, and when threads share a
// matrix by column slices of 16 floats (one attention head of hd = 16, one GEMM micro-tile
// column), no cache line is written by two threads at once.
//
// Large blocks go through a cache keyed by their exact size (src/tensor.cpp): a freed block is
// handed to the next request of the same size. The training step allocates the same shapes every
// step, and every op splits a (tokens, features) matrix over the threads by rows in the same way,
// so a block of a given size comes back with each of its cache lines in the cache of the core
// that will write that line again. Through malloc, a block is carved from whatever freed memory
// fits, and about half of its lines then sit in the other core's cache: each write to one first
// fetches the line from there (on this VM 0.5 us a line, round trip).
#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace normlab::detail {

// Blocks of at least this many bytes are cached by size (smaller ones gain nothing: malloc's own
// per-thread caches serve them).
inline constexpr std::size_t kCachedBlockBytes = std::size_t{1} << 14;
// A 64-byte-aligned block of `bytes` bytes from the cache, or a new one; and back (src/tensor.cpp).
void* allocate_cached_block(std::size_t bytes);
void release_cached_block(void* p, std::size_t bytes) noexcept;

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
    if (n * sizeof(T) >= kCachedBlockBytes) return static_cast<T*>(allocate_cached_block(n * sizeof(T)));
    return static_cast<T*>(::operator new(n * sizeof(T), kAlignment));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) >= kCachedBlockBytes) return release_cached_block(p, n * sizeof(T));
    ::operator delete(p, n * sizeof(T), kAlignment);
  }
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
