// The cache directory every on-disk cache of tc lives under, and the two file operations they share.
//
//   std::string root = tc::cache_root();      // "" when caching is off
//   tc::make_dirs(root + "/cpu");
//   if (!tc::write_file_atomically(root + "/cpu/x.o", bytes)) ...  // errno says why
//
// The root: set_cache_root's (tcrun --cache-dir; "" from --no-cache turns caching off), else
// $TC_CACHE_DIR (set but empty: off), else ~/.cache/tc. (stdlib/cuda's cubin cache still reads
// $TC_CACHE_DIR alone.)
#pragma once
#include <string>

namespace tc {

std::string cache_root();
void set_cache_root(const std::string& dir);
// Creates every missing level of `dir` (errors are left to the write that follows).
void make_dirs(const std::string& dir);
// Writes `data` to a temporary file beside `path` and renames it over `path`, so that readers see
// the old file or the whole new one; false (errno set, nothing left behind) when it could not.
bool write_file_atomically(const std::string& path, const std::string& data);

}  // namespace tc
