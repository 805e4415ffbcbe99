// The on-disk object cache: atomic writes, validated reads (format in disk_cache.h).
#include "disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include <llvm/Support/xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <ctime>
#include <iterator>
#include <map>
#include <mutex>

#include "tc/cache_files.h"
#include "tc/cpu_backend.h"

namespace tc::backends::cpu {
namespace {

constexpr char kMagic[9] = "TCCPUOB1";
constexpr size_t kHeader = 32;

uint64_t checksum(const std::string& key, const std::string& object) { return cache_checksum(key + object); }


void discard(const std::string& path, const char* why, const char* kind) {
  std::fprintf(stderr, "tc: %s kernel cache: discarding %s (%s); it will be rebuilt\n", kind, path.c_str(), why);
  unlink(path.c_str());
}

// TC_CACHE_MAX_MB (MiB, fractions allowed; default 2048, 0 for no cap) in bytes; 0: no cap.
uint64_t max_bytes() {
  const char* e = std::getenv("TC_CACHE_MAX_MB");
  char* end = nullptr;
  double mb = e && *e ? std::strtod(e, &end) : 2048;
  if (e && *e && (*end || mb < 0)) mb = 2048;
  return (uint64_t)(mb * 1048576);
}

// Deletes the least recently used entries (oldest modification time: reads touch theirs) of every
// kind under the root, stdlib/cuda's `kernels/*.cubin` included (by the time they were written),
// until the entries of all kinds fit the cap; `keep` (just written) stays. Returns the bytes left.
uint64_t scan_and_prune(const std::string& root, uint64_t cap, const std::string& keep) {
  namespace fs = std::filesystem;
  struct Entry {
    fs::file_time_type time;
    uint64_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (const fs::directory_entry& kind : fs::directory_iterator(root, ec)) {
    if (!kind.is_directory(ec)) continue;
    for (const fs::directory_entry& f : fs::directory_iterator(kind.path(), ec)) {
      const fs::path ext = f.path().extension();  // entries only (eager CUDA kernels' cubins too), not temporaries
      if ((ext != ".o" && ext != ".cubin") || !f.is_regular_file(ec)) continue;
      const uint64_t size = f.file_size(ec);
      const fs::file_time_type time = f.last_write_time(ec);
      if (ec) continue;  // removed meanwhile by another process
      total += size;
      if (f.path() != keep) entries.push_back({time, size, f.path()});
    }
  }
  if (total <= cap) return total;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.time < b.time; });
  for (const Entry& e : entries) {
    if (total <= cap) break;
    if (fs::remove(e.path, ec)) total -= e.size;
  }
  return total;
}

// Keeps the cache under TC_CACHE_MAX_MB without listing it on every write: a cache of 90k entries
// took 2 s to list, and every short-lived process paid it on its first write. The size found by
// the last listing is kept in `<root>/.size` (trusted for an hour, then listed again) and in this
// process, which adds what it writes; only a total past the cap lists and prunes.
void prune(const std::string& keep, uint64_t written) {
  const uint64_t cap = max_bytes();
  const std::string root = cache_root();
  if (cap == 0 || root.empty()) return;
  static std::mutex mu;
  static std::map<std::string, uint64_t> known;  // per root: bytes, as far as this process knows
  std::lock_guard<std::mutex> lock(mu);
  const std::string stamp = root + "/.size";
  auto it = known.find(root);
  if (it == known.end()) {
    struct stat st;
    unsigned long long bytes = 0;
    if (stat(stamp.c_str(), &st) == 0 && std::time(nullptr) - st.st_mtime < 3600)
      if (FILE* f = std::fopen(stamp.c_str(), "r")) {
        if (std::fscanf(f, "%llu", &bytes) == 1) it = known.emplace(root, uint64_t(bytes)).first;
        std::fclose(f);
      }
  }
  if (it != known.end()) {
    it->second += written;
    if (it->second <= cap) return;
  }
  const uint64_t total = scan_and_prune(root, cap, keep);
  known[root] = total;
  write_file_atomically(stamp, std::to_string(total) + "\n");
}

}  // namespace

uint64_t cache_checksum(const std::string& key_and_object) { return llvm::xxh3_64bits(llvm::StringRef(key_and_object)); }

void set_cache_dir(const std::string& dir) { set_cache_root(dir); }

std::string cache_dir(const char* kind) {
  const std::string root = cache_root();
  return root.empty() ? "" : root + "/" + kind;
}

std::string cache_path(const std::string& key, const char* kind) {
  std::string dir = cache_dir(kind);
  if (dir.empty()) return "";
  llvm::XXH128_hash_t h = llvm::xxh3_128bits(llvm::ArrayRef<uint8_t>((const uint8_t*)key.data(), key.size()));
  char name[40];
  std::snprintf(name, sizeof name, "%016llx%016llx.o", (unsigned long long)h.high64, (unsigned long long)h.low64);
  return dir + "/" + name;
}

CacheRead cache_read(const std::string& key, std::string* object, const char* kind) {
  std::string path = cache_path(key, kind);
  if (path.empty()) return CacheRead::Miss;
  std::ifstream f(path, std::ios::binary);
  if (!f) return CacheRead::Miss;
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (data.size() < kHeader || data.compare(0, 8, kMagic) != 0) {
    discard(path, "bad header", kind);
    return CacheRead::Rejected;
  }
  uint64_t key_len, obj_len, sum;
  std::memcpy(&key_len, data.data() + 8, 8);
  std::memcpy(&obj_len, data.data() + 16, 8);
  std::memcpy(&sum, data.data() + 24, 8);
  if (key_len > data.size() || obj_len > data.size() || kHeader + key_len + obj_len != data.size()) {
    discard(path, "wrong length", kind);
    return CacheRead::Rejected;
  }
  std::string stored_key = data.substr(kHeader, key_len);
  std::string obj = data.substr(kHeader + key_len);
  if (checksum(stored_key, obj) != sum) {
    discard(path, "checksum mismatch", kind);
    return CacheRead::Rejected;
  }
  if (stored_key != key) {
    discard(path, "made for another version, CPU or kernel", kind);
    return CacheRead::Rejected;
  }
  *object = std::move(obj);
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // used now: pruning removes least recently used first
  return CacheRead::Hit;
}

void cache_write(const std::string& key, const std::string& object, const char* kind) {
  std::string path = cache_path(key, kind);
  if (path.empty()) return;
  make_dirs(cache_dir(kind));
  std::string data(kMagic, 8);
  uint64_t key_len = key.size(), obj_len = object.size(), sum = checksum(key, object);
  data.append((const char*)&key_len, 8);
  data.append((const char*)&obj_len, 8);
  data.append((const char*)&sum, 8);
  data += key;
  data += object;
  if (!write_file_atomically(path, data)) {
    // unwritable cache (--cache-dir, TC_CACHE_DIR): kernels are compiled on every run; said once
    static std::atomic<bool> warned{false};
    const int err = errno;
    if (!warned.exchange(true))
      std::fprintf(stderr,
                   "tc: warning: the kernel cache directory %s is not writable (%s): kernels are "
                   "compiled again on every run (give --cache-dir or TC_CACHE_DIR a writable "
                   "directory, or --no-cache)\n",
                   cache_root().c_str(), std::strerror(err));
    return;
  }
  prune(path, data.size());
}

}  // namespace tc::backends::cpu
