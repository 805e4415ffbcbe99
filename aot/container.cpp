// The package container (container.h, docs/aot.md).
#include "container.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <llvm/Support/xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "tc/aot.h"
#include "tc/error.h"

namespace tc::aot {
namespace {

constexpr char kMagic[8] = {'\x89', 'T', 'C', 'P', 'K', 'G', '\r', '\n'};
constexpr size_t kHeader = 32, kEntry = 64, kName = 40, kAlign = 64;

uint64_t checksum(const char* p, size_t n) { return llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>((const uint8_t*)p, n)); }

template <typename T>
void put(std::string& s, size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof v);
}
template <typename T>
T get(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

}  // namespace

void write_container(const std::string& path, const std::vector<Section>& sections) {
  const size_t n = sections.size();
  size_t at = kHeader + n * kEntry;
  std::string out(at, '\0');
  std::memcpy(out.data(), kMagic, 8);
  put<uint32_t>(out, 8, kFormatVersion);
  put<uint32_t>(out, 12, (uint32_t)n);
  for (size_t i = 0; i < n; i++) {
    const Section& s = sections[i];
    TC_CHECK(!s.name.empty() && s.name.size() < kName, ValueError, "package section name '%s' is too long",
             s.name.c_str());
    at = (at + kAlign - 1) / kAlign * kAlign;
    const size_t e = kHeader + i * kEntry;
    std::memcpy(out.data() + e, s.name.data(), s.name.size());
    put<uint64_t>(out, e + kName, at);
    put<uint64_t>(out, e + kName + 8, s.data.size());
    put<uint64_t>(out, e + kName + 16, checksum(s.data.data(), s.data.size()));
    out.resize(at, '\0');
    out += s.data;
    at = out.size();
  }
  put<uint64_t>(out, 16, out.size());
  const size_t table = kHeader + n * kEntry;
  std::string head = out.substr(0, 24) + out.substr(kHeader, table - kHeader);
  put<uint64_t>(out, 24, checksum(head.data(), head.size()));

  static std::atomic<int> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TC_CHECK(fd >= 0, ValueError, "tc.aot.compile: cannot write '%s': %s", tmp.c_str(), std::strerror(errno));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t w = ::write(fd, out.data() + done, out.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      TC_FAIL(ValueError, "tc.aot.compile: cannot write '%s': %s", path.c_str(), std::strerror(err));
    }
    done += (size_t)w;
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TC_FAIL(ValueError, "tc.aot.compile: cannot write '%s': %s", path.c_str(), std::strerror(err));
  }
}

std::vector<Section> read_container(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  TC_CHECK(f.good(), ValueError, "tc.aot.load: cannot open '%s': %s", path.c_str(), std::strerror(errno));
  std::string s((size_t)f.tellg(), '\0');
  f.seekg(0);
  f.read(s.data(), (std::streamsize)s.size());
  TC_CHECK(f.good() || s.empty(), ValueError, "tc.aot.load: cannot read '%s': %s", path.c_str(), std::strerror(errno));
  const char* p = path.c_str();
  TC_CHECK(s.size() >= 8 && std::memcmp(s.data(), kMagic, 8) == 0, ValueError,
           "tc.aot.load: '%s' is not a tc package (no tcpkg magic at its start)", p);
  TC_CHECK(s.size() >= kHeader, ValueError, "tc.aot.load: '%s' is truncated (%zu bytes, the header alone has %zu)", p,
           s.size(), kHeader);
  const uint32_t version = get<uint32_t>(s, 8);
  TC_CHECK(version == kFormatVersion, ValueError,
           "tc.aot.load: '%s' has package format version %u; this tc (%s) reads version %u (compile it again)", p,
           version, TC_VERSION, kFormatVersion);
  const uint64_t declared = get<uint64_t>(s, 16);
  TC_CHECK(declared == s.size(), ValueError,
           "tc.aot.load: '%s' is truncated or damaged: its header says %llu bytes, the file has %zu", p,
           (unsigned long long)declared, s.size());
  const uint32_t n = get<uint32_t>(s, 12);
  TC_CHECK(n < 4096 && kHeader + (size_t)n * kEntry <= s.size(), ValueError,
           "tc.aot.load: '%s' is corrupted (its section table does not fit the file)", p);
  const size_t table = kHeader + (size_t)n * kEntry;
  std::string head = s.substr(0, 24) + s.substr(kHeader, table - kHeader);
  TC_CHECK(checksum(head.data(), head.size()) == get<uint64_t>(s, 24), ValueError,
           "tc.aot.load: '%s' is corrupted (header checksum mismatch)", p);
  std::vector<Section> out;
  for (uint32_t i = 0; i < n; i++) {
    const size_t e = kHeader + (size_t)i * kEntry;
    Section sec;
    sec.name.assign(s.data() + e, strnlen(s.data() + e, kName));
    const uint64_t off = get<uint64_t>(s, e + kName), size = get<uint64_t>(s, e + kName + 8);
    TC_CHECK(off <= s.size() && size <= s.size() - off, ValueError,
             "tc.aot.load: '%s' is corrupted (section '%s' lies outside the file)", p, sec.name.c_str());
    TC_CHECK(checksum(s.data() + off, size) == get<uint64_t>(s, e + kName + 16), ValueError,
             "tc.aot.load: '%s' is corrupted (checksum mismatch in section '%s')", p, sec.name.c_str());
    sec.data.assign(s.data() + off, size);
    out.push_back(std::move(sec));
  }
  return out;
}

const Section* find_section(const std::vector<Section>& s, const std::string& name) {
  for (const Section& x : s)
    if (x.name == name) return &x;
  return nullptr;
}

}  // namespace tc::aot
