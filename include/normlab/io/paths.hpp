#pragma once
// Directories and files normlab writes into: created with a message that says what is in the way,
// and never written through a symbolic link into some other file.
#include <string>
#include <string_view>

namespace normlab::io {

// Creates `dir` and its parents. InputError "<dir>: cannot create the <what>: <reason>", where the
// reason names the path component that is a file rather than a directory, or the system's error.
void make_directories(const std::string& dir, std::string_view what);

// InputError "<path>: is a symbolic link; ..." if `path` is a link (dangling or not). Writers of a
// run directory call it on every file they update in place or replace.
void refuse_symlink(const std::string& path);

}  // namespace normlab::io
