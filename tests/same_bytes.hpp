// Byte equality for bit-identity checks, defined for empty buffers too.
#pragma once

#include <cstddef>
#include <cstring>

namespace normlab::test {

// The same n bytes at a and b. memcmp's pointers must not be null even for n = 0, and an empty
// vector's data() (or an empty tensor's) may be.
inline bool same_bytes(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

}  // namespace normlab::test
