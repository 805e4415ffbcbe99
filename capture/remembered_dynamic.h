// Remembered dynamism (torch's automatic-dynamic profile): the dims that turned dynamic in a
// function's recompiles are written to the cache directory, and the next run of the same code
// compiles them dynamic at its first call, skipping the static compile and the recompile.
//
//   auto dims = read_remembered(key);        // [] when the cache is off or holds nothing
//   write_remembered(key, cc->dynamic);      // after learn_dynamic added to them
//
// The file is <tc::cache_root()>/dynamic/<64-bit FNV-1a of key>.txt (default root ~/.cache/tc;
// tcrun --cache-dir sets it, --no-cache empties it, which turns this off):
//   tc dynamic 1 <key>          first line: the format and the full key (a hash collision reads as a miss)
//   <dim>\t<source>             one learned dim (0-based; -1: a number argument itself)
// A file that does not read so is removed with a line on stderr and ignored.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tc::capture {

using DynamicDims = std::vector<std::pair<std::string, int>>;  // (source description, dim)

// The key a function's remembered dims are stored under: its code (the proto's content key),
// its compile configuration, and for resume functions the pc they continue at.
DynamicDims read_remembered(const std::string& key);
void write_remembered(const std::string& key, const DynamicDims& dims);
// The file for `key`, or "" when the cache is off.
std::string remembered_path(const std::string& key);

}  // namespace tc::capture
