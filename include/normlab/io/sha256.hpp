#pragma once
// SHA-256 (FIPS 180-4), ours so that the data fingerprints a run records can be checked by anyone
// with `sha256sum FILE`. Used for content fingerprints of data files (docs/run-directory.md) and
// for the hashes of the live page's inline code in its Content-Security-Policy (docs/serve.md).
//
//   Sha256 h; h.update(bytes...); h.update(more...); h.hex()  ==  sha256_hex(bytes + more)
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "normlab/io/stop.hpp"

namespace normlab::io {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The digest of everything given so far; the object is finished afterwards (update() is refused).
  std::array<uint8_t, 32> digest();
  // The digest as 64 lowercase hex digits, as sha256sum prints it.
  std::string hex();

 private:
  void compress(const uint8_t* block);  // one 64-byte block into state_
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};  // a partial block
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

std::string sha256_hex(std::string_view bytes);

// A file's content fingerprint: its SHA-256 and size, read in chunks (a file of any size costs one
// buffer of memory). InputError "<path>: cannot read: <reason>" if it cannot be opened or read; a
// stop request on `stop` between chunks throws StopRequested.
struct FileDigest {
  std::string sha256;  // 64 hex digits
  uint64_t bytes = 0;
};
FileDigest sha256_file(const std::string& path, StopFlag stop = nullptr);

}  // namespace normlab::io
