// The cache root and atomic file writes shared by tc's on-disk caches (tc/cache_files.h).
#include "tc/cache_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>

namespace tc {
namespace {

std::mutex g_root_mu;
std::optional<std::string> g_root;  // set_cache_root's override of the environment

}  // namespace

std::string cache_root() {
  {
    std::lock_guard<std::mutex> lock(g_root_mu);
    if (g_root) return *g_root;
  }
  const char* e = std::getenv("TC_CACHE_DIR");
  if (e) return e;
  const char* home = std::getenv("HOME");
  if (!home || !*home) return "";
  return std::string(home) + "/.cache/tc";
}

void set_cache_root(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_root_mu);
  g_root = dir;
}

void make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); i++)
    if (i == dir.size() || dir[i] == '/') mkdir(dir.substr(0, i).c_str(), 0755);
}

bool write_file_atomically(const std::string& path, const std::string& data) {
  static std::atomic<unsigned> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return false;
  bool ok = true;
  for (size_t done = 0; ok && done < data.size();) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += (size_t)n;
  }
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;  // the caller's warning names the write's failure, not unlink's
    unlink(tmp.c_str());
    errno = err;
    return false;
  }
  return true;
}

}  // namespace tc
