#include "normlab/io/paths.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "normlab/error.hpp"

namespace normlab::io {

namespace fs = std::filesystem;

void make_directories(const std::string& dir, std::string_view what) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  // libstdc++ reports "Success" when a parent is a regular file; find that component ourselves.
  for (fs::path part = fs::path(dir).lexically_normal(); !part.empty(); part = part.parent_path()) {
    std::error_code status_ec;
    const fs::file_status status = fs::status(part, status_ec);
    if (fs::exists(status) && !fs::is_directory(status)) {
      throw InputError(
          fmt::format("{}: cannot create the {}: {} is a file, not a directory", dir, what, part.string()));
    }
    if (part == part.parent_path()) break;
  }
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) {
    throw InputError(fmt::format("{}: cannot create the {}: {}", dir, what,
                                 ec ? ec.message() : std::string("the path does not name a directory")));
  }
}

void refuse_symlink(const std::string& path) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    throw InputError(
        fmt::format("{}: is a symbolic link; normlab writes run files only as regular files and never "
                    "through a link (replace the link with a copy of the file)",
                    path));
  }
}

}  // namespace normlab::io
