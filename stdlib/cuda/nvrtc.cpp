// Kernel compilation: NVRTC (dlopen'ed libnvrtc.so.13) turns one generated CUDA C++ program per
// op signature into an sm_XX cubin; modules are cached in memory per (device, signature) and
// cubins optionally on disk under TC_CACHE_DIR (key: hash of source, options, NVRTC version and
// arch; written atomically through a rename; a file that fails validation is rebuilt).
#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "cuda/runtime.h"
#include "tc/cuda.h"
#include "tc/cuda_cache.h"

namespace tc::cuda {
namespace {

constexpr int kCodegenVersion = 1;

struct Nvrtc {
  nvrtcResult (*Version)(int*, int*);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  const char* (*GetErrorString)(nvrtcResult);
  bool ok = false;
  std::string why;
  int major = 0, minor = 0;
};

Nvrtc& nv() {
  static Nvrtc* n = [] {
    auto* n = new Nvrtc{};
    std::vector<std::string> cands;
    for (const char* env : {"TC_CUDA_PATH", "CUDA_PATH", "CUDA_HOME"})
      if (const char* e = std::getenv(env)) cands.push_back(std::string(e) + "/lib64/libnvrtc.so.13");
    cands.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
    cands.push_back("libnvrtc.so.13");
    cands.push_back("/usr/local/cuda/lib64/libnvrtc.so");
    cands.push_back("libnvrtc.so");
    void* h = nullptr;
    std::string errs;
    for (auto& c : cands) {
      h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) break;
      const char* e = dlerror();
      if (errs.empty() && e) errs = e;
    }
    if (!h) {
      n->why = "cannot load NVRTC (libnvrtc.so.13): " + errs;
      return n;
    }
    bool all = true;
    auto get = [&](const char* name, auto& fp) {
      void* p = dlsym(h, name);
      if (!p) all = false;
      fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(p);
    };
    get("nvrtcVersion", n->Version);
    get("nvrtcCreateProgram", n->CreateProgram);
    get("nvrtcCompileProgram", n->CompileProgram);
    get("nvrtcGetProgramLogSize", n->GetProgramLogSize);
    get("nvrtcGetProgramLog", n->GetProgramLog);
    get("nvrtcGetCUBINSize", n->GetCUBINSize);
    get("nvrtcGetCUBIN", n->GetCUBIN);
    get("nvrtcDestroyProgram", n->DestroyProgram);
    get("nvrtcGetErrorString", n->GetErrorString);
    if (!all) {
      n->why = "NVRTC lacks entry points";
      return n;
    }
    n->Version(&n->major, &n->minor);
    n->ok = true;
    return n;
  }();
  return *n;
}

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char b[17];
  snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

std::string cache_dir(const std::string& kind = "kernels") {
  const char* e = std::getenv("TC_CACHE_DIR");
  if (!e || !*e) return "";
  return std::string(e) + "/" + kind;
}

// The file of `key` in a cache directory: two 64-bit hashes of it.
std::string cache_path(const std::string& dir, const std::string& key, const char* suffix) {
  return dir + "/" + hex(fnv1a(key, 1469598103934665603ull)) + hex(fnv1a(key, 0x9E3779B97F4A7C15ull)) + suffix;
}

// File: "TCCUBIN1" | u64 size | u64 checksum | cubin bytes.
bool read_cached(const std::string& path, std::string* cubin) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  bool ok = data.size() >= 24 && data.compare(0, 8, "TCCUBIN1") == 0;
  if (ok) {
    uint64_t size, sum;
    std::memcpy(&size, data.data() + 8, 8);
    std::memcpy(&sum, data.data() + 16, 8);
    ok = size == data.size() - 24 && fnv1a(data.substr(24), 1469598103934665603ull) == sum;
    if (ok) *cubin = data.substr(24);
  }
  if (!ok) {  // corrupt: rebuild
    std::fprintf(stderr, "tc: cuda eager kernel cache: discarding %s (bad header, length or checksum); it will be rebuilt\n",
                 path.c_str());
    unlink(path.c_str());
  }
  return ok;
}

void write_cached(const std::string& dir, const std::string& path, const std::string& cubin) {
  std::string cmd_dir = dir;
  // mkdir -p
  for (size_t i = 1; i <= cmd_dir.size(); i++)
    if (i == cmd_dir.size() || cmd_dir[i] == '/') {
      std::string p = cmd_dir.substr(0, i);
      mkdir(p.c_str(), 0755);
    }
  std::string tmp = path + ".tmp" + std::to_string(getpid()) + "_" + std::to_string(rand());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) {  // unwritable cache (--cache-dir, TC_CACHE_DIR): said once, as the CPU cache says it
      static std::atomic<bool> warned{false};
      const int err = errno;
      if (!warned.exchange(true))
        std::fprintf(stderr,
                     "tc: warning: the CUDA kernel cache directory %s is not writable (%s): kernels "
                     "are compiled again on every run (give --cache-dir or TC_CACHE_DIR a writable "
                     "directory, or --no-cache)\n",
                     dir.c_str(), std::strerror(err));
      return;
    }
    uint64_t size = cubin.size(), sum = fnv1a(cubin, 1469598103934665603ull);
    f.write("TCCUBIN1", 8);
    f.write(reinterpret_cast<const char*>(&size), 8);
    f.write(reinterpret_cast<const char*>(&sum), 8);
    f.write(cubin.data(), (std::streamsize)cubin.size());
    if (!f) {
      unlink(tmp.c_str());
      return;
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) unlink(tmp.c_str());
}

std::vector<std::string> options(int arch) {
  return {"--gpu-architecture=sm_" + std::to_string(arch), "--std=c++17", "-default-device"};
}

struct ModuleCache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<CUfunction>> fns;  // "<device>|<key>"
};
ModuleCache& mcache() {
  static auto* c = new ModuleCache;
  return *c;
}

std::atomic<int64_t> g_programs{0};

}  // namespace

int64_t programs_compiled() { return g_programs.load(); }

bool nvrtc_available(std::string* why) {
  Nvrtc& n = nv();
  if (!n.ok && why) *why = n.why;
  return n.ok;
}

std::string nvrtc_version() {
  Nvrtc& n = nv();
  return std::to_string(n.major) + "." + std::to_string(n.minor);
}

std::string compile_cubin(const std::string& source, int arch) {
  Nvrtc& n = nv();
  TC_CHECK(n.ok, DeviceError, "CUDA kernels cannot be compiled: %s", n.why.c_str());
  std::vector<std::string> opts = options(arch);
  std::string key_text = source + "\n//";
  for (auto& o : opts) key_text += o + " ";
  key_text += "nvrtc " + nvrtc_version() + " codegen " + std::to_string(kCodegenVersion);
  std::string dir = cache_dir(), path;
  if (!dir.empty()) {
    path = cache_path(dir, key_text, ".cubin");
    std::string cubin;
    if (read_cached(path, &cubin)) return cubin;
  }
  nvrtcProgram prog;
  nvrtcResult r = n.CreateProgram(&prog, source.c_str(), "tc_kernels.cu", 0, nullptr, nullptr);
  TC_CHECK(r == NVRTC_SUCCESS, CompileError, "nvrtcCreateProgram failed: %s", n.GetErrorString(r));
  std::vector<const char*> copts;
  for (auto& o : opts) copts.push_back(o.c_str());
  // NVRTC before 12.6.2 could change the thread's locale: keep ours.
  std::string saved = setlocale(LC_ALL, nullptr) ? setlocale(LC_ALL, nullptr) : "C";
  r = n.CompileProgram(prog, (int)copts.size(), copts.data());
  setlocale(LC_ALL, saved.c_str());
  if (r != NVRTC_SUCCESS) {
    size_t ls = 0;
    n.GetProgramLogSize(prog, &ls);
    std::string log(ls, '\0');
    if (ls) n.GetProgramLog(prog, log.data());
    n.DestroyProgram(&prog);
    // Include the numbered source around errors for the developer.
    TC_FAIL(CompileError, "NVRTC failed to compile a generated CUDA kernel (%s):\n%s\n--- source ---\n%s",
            n.GetErrorString(r), log.c_str(), source.size() > 20000 ? source.substr(0, 20000).c_str() : source.c_str());
  }
  size_t cs = 0;
  n.GetCUBINSize(prog, &cs);
  std::string cubin(cs, '\0');
  n.GetCUBIN(prog, cubin.data());
  n.DestroyProgram(&prog);
  TC_CHECK(cs > 0, CompileError, "NVRTC produced no cubin for sm_%d", arch);
  if (!dir.empty()) write_cached(dir, path, cubin);
  return cubin;
}

// An entry holds its key, a NUL, then the bytes: a file whose key differs is not the entry.
std::string read_cache_entry(const std::string& kind, const std::string& key) {
  const std::string dir = cache_dir(kind);
  std::string data;
  if (dir.empty() || !read_cached(cache_path(dir, key, ".entry"), &data)) return "";
  if (data.size() <= key.size() || data.compare(0, key.size(), key) != 0 || data[key.size()] != '\0') return "";
  return data.substr(key.size() + 1);
}

void write_cache_entry(const std::string& kind, const std::string& key, const std::string& bytes) {
  const std::string dir = cache_dir(kind);
  if (!dir.empty()) write_cached(dir, cache_path(dir, key, ".entry"), key + '\0' + bytes);
}

std::vector<CUfunction> kernels(int device, const std::string& key, const std::function<std::string()>& source,
                                const std::vector<std::string>& names) {
  ModuleCache& c = mcache();
  std::string k = std::to_string(device) + "|" + key;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.fns.find(k);
    if (it != c.fns.end()) return it->second;
  }
  DeviceState& ds = dev(device);
  std::string src = source();
  std::string cubin = compile_cubin(src, ds.cc_major * 10 + ds.cc_minor);
  g_programs++;
  if (compile_only()) {
    std::vector<CUfunction> none(names.size(), nullptr);
    std::lock_guard<std::mutex> lock(c.mu);
    c.fns[k] = none;
    return none;
  }
  CUmodule mod;
  check(drv().ModuleLoadData(&mod, cubin.data()), "loading a compiled kernel module");
  std::vector<CUfunction> fns;
  for (auto& n : names) {
    CUfunction f;
    check(drv().ModuleGetFunction(&f, mod, n.c_str()), "finding a kernel in its module");
    fns.push_back(f);
  }
  std::lock_guard<std::mutex> lock(c.mu);
  c.fns[k] = fns;
  return fns;
}

}  // namespace tc::cuda
