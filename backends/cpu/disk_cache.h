// Compiled object code on disk, under $TC_CACHE_DIR/<kind> (default ~/.cache/tc/<kind>; TC_CACHE_DIR=
// set but empty turns it off). `kind` is the code generator: "cpu" (object files) or "cuda"
// (cubins, backends/cuda). One file per key:
//
//   "TCCPUOB1" | u64 key bytes | u64 object bytes | u64 xxh3(key + object) | key | object
//
// Writes go to a temporary file renamed into place (readers never see a partial entry; two
// writers of one entry leave one of their complete files). Reads check the magic, the lengths
// against the file size, the checksum and the stored key: anything else is removed with a log
// line on stderr and reported as a miss, so it is rebuilt.
//
// Size cap: TC_CACHE_MAX_MB (MiB of entries of all kinds under the root, fractions allowed; default
// 2048, 0 for none). Each write then removes the least recently used entries (oldest modification
// time; a read that hits touches its entry) until the rest fits, the new entry kept.
#pragma once
#include <cstdint>
#include <string>

namespace tc::backends::cpu {

std::string cache_dir(const char* kind = "cpu");  // "" when off
// The entry's path for `key` (the key's 128-bit hash), or "" when the cache is off.
std::string cache_path(const std::string& key, const char* kind = "cpu");
enum class CacheRead { Hit, Miss, Rejected };  // Rejected: an invalid entry was removed
CacheRead cache_read(const std::string& key, std::string* object, const char* kind = "cpu");
void cache_write(const std::string& key, const std::string& object, const char* kind = "cpu");
// The entry for `key` when the cache holds a valid one, else build()'s result, then written to
// the cache (an empty result is not). `read` (optional) gets what the cache said.
template <typename Build>
std::string cached(const std::string& key, const char* kind, Build&& build, CacheRead* read = nullptr) {
  std::string object;
  const CacheRead r = cache_read(key, &object, kind);
  if (read) *read = r;
  if (r == CacheRead::Hit) return object;
  object = build();
  if (!object.empty()) cache_write(key, object, kind);
  return object;
}
// The checksum stored in an entry's header, over its key and object bytes concatenated.
uint64_t cache_checksum(const std::string& key_and_object);

}  // namespace tc::backends::cpu
