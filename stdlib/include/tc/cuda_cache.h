// Small entries of tc's disk cache for CUDA ($TC_CACHE_DIR/<kind>/, checksummed like the cubins):
//
//   cuda::write_cache_entry("blaslt", problem_key, choice_bytes);
//   std::string b = cuda::read_cache_entry("blaslt", problem_key);  // "" when absent
//
// read_cache_entry gives "" when the entry is absent, corrupt (then removed), or TC_CACHE_DIR is
// unset; write_cache_entry replaces an entry atomically. cuBLASLt's timed algorithm choices live here.
#pragma once
#include <string>

namespace tc::cuda {

std::string read_cache_entry(const std::string& kind, const std::string& key);
void write_cache_entry(const std::string& kind, const std::string& key, const std::string& bytes);

}  // namespace tc::cuda
