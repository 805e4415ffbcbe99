// Remembered dynamism on disk (remembered_dynamic.h).
#include "remembered_dynamic.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tc/cache_files.h"

namespace tc::capture {
namespace {

constexpr const char* kHeader = "tc dynamic 1 ";

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The key on one line: newlines and tabs (which a chunk name may hold) escaped.
std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\\') out += "\\\\";
    else out += c;
  }
  return out;
}

}  // namespace

std::string remembered_path(const std::string& key) {
  const std::string root = cache_root();
  if (root.empty()) return "";
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.txt", (unsigned long long)fnv1a(key));
  return root + "/dynamic/" + name;
}

DynamicDims read_remembered(const std::string& key) {
  const std::string path = remembered_path(key);
  if (path.empty()) return {};
  std::ifstream f(path);
  if (!f) return {};
  std::string first;
  std::getline(f, first);
  if (first.rfind(kHeader, 0) != 0) {
    std::fprintf(stderr, "tc: remembered dynamic dims: discarding %s (not a tc dynamic file)\n", path.c_str());
    unlink(path.c_str());
    return {};
  }
  if (first.substr(std::string(kHeader).size()) != one_line(key)) return {};  // another function's (hash collision)
  DynamicDims dims;
  for (std::string line; std::getline(f, line);) {
    const size_t tab = line.find('\t');
    char* end = nullptr;
    const long d = tab == std::string::npos ? 0 : std::strtol(line.c_str(), &end, 10);
    if (tab == std::string::npos || end != line.c_str() + tab || d < -1 || d > 63 || tab + 1 >= line.size()) {
      std::fprintf(stderr, "tc: remembered dynamic dims: discarding %s (a malformed line)\n", path.c_str());
      unlink(path.c_str());
      return {};
    }
    dims.push_back({line.substr(tab + 1), int(d)});
  }
  return dims;
}

void write_remembered(const std::string& key, const DynamicDims& dims) {
  const std::string path = remembered_path(key);
  if (path.empty() || dims.empty()) return;
  std::ostringstream s;
  s << kHeader << one_line(key) << "\n";
  for (const auto& [src, d] : dims)
    if (src.find('\n') == std::string::npos) s << d << "\t" << src << "\n";
  make_dirs(cache_root() + "/dynamic");
  write_file_atomically(path, s.str());  // an unwritable cache: the dims are learned again next run
}

}  // namespace tc::capture
