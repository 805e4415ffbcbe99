// The CPU backend's on-disk kernel cache, across processes (this test runs itself as children,
// each a fresh process with an empty in-memory cache): a warm start compiles nothing; truncated,
// bit-flipped, mis-sized and other-version entries are discarded and rebuilt; two processes
// writing the same entry at once leave a valid cache; TC_CACHE_DIR= turns it off.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cpu/disk_cache.h"
#include "cpu/plan_format.h"
#include "cpu_kernel_builder.h"
#include "tc/cpu_backend.h"

extern char** environ;

namespace tc::backends::cpu::test {
namespace {

namespace fs = std::filesystem;

// Two kernels: y = exp(x) * 3 + x over n, and s = sum(x).
std::vector<lower::Kernel> child_kernels() {
  KernelBuilder a;
  a.buffer(DType::Float32, false);
  a.buffer(DType::Float32, true);
  Val n = a.pre(a.size(0));
  a.k.outer = {n};
  Val i = a.outer(0), x = a.load(0, i, Ty::F32), e = a.math(ScalarOp::exp, Ty::F32, x);
  Val y = a.math(ScalarOp::add, Ty::F32, a.math(ScalarOp::mul, Ty::F32, e, a.cf(3)), x);
  a.code({i, x, e, y - 1, y}, {{1, i, y}});
  KernelBuilder b;
  b.buffer(DType::Float32, false);
  b.buffer(DType::Float32, true);
  Val m = b.pre(b.size(0));
  Val j = b.loop_var(0), v = b.load(0, j, Ty::F32), s = b.acc(0, Ty::F32);
  b.loop({m}, {j, v}, {{ReduceOp::Sum, v, lower::kNoVal, s}});
  b.code({}, {{1, b.ci(0), s}});
  return {a.k, b.k};
}

// The child: compiles and runs the two kernels, prints "compiled=C disk=D rejected=R ok=1".
TEST(CpuDiskCacheChild, Run) {
  if (!getenv("TC_TEST_CPU_CACHE_CHILD")) GTEST_SKIP() << "run by CpuDiskCache tests only";
  std::vector<CompiledKernel> k = compile_all(child_kernels());
  std::vector<float> x = {0, 1, -2, 0.5f}, y(4);
  float s = 0;
  int64_t n = 4;
  void* b1[] = {x.data(), y.data()};
  void* b2[] = {x.data(), &s};
  launch(k[0], b1, &n);
  launch(k[1], b2, &n);
  bool ok = s == -0.5f;
  for (int i = 0; i < 4; i++) ok = ok && std::abs(y[i] - (std::exp(x[i]) * 3 + x[i])) < 1e-5f;
  Stats st = stats();
  std::printf("compiled=%lld disk=%lld rejected=%lld ok=%d\n", (long long)st.kernels_compiled,
              (long long)st.disk_hits, (long long)st.disk_rejected, (int)ok);
}

struct ChildResult {
  int compiled = -1, disk = -1, rejected = -1, ok = 0;
  std::string stderr_text;
};

pid_t spawn_child(const std::string& cache_dir, const std::string& out_path, const std::string& err_path) {
  std::string env_dir = "TC_CACHE_DIR=" + cache_dir;
  std::vector<std::string> env_s = {env_dir, "TC_TEST_CPU_CACHE_CHILD=1"};
  for (char** e = environ; *e; e++)
    if (std::strncmp(*e, "TC_CACHE_DIR=", 13) && std::strncmp(*e, "TC_TEST_CPU", 11)) env_s.push_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe");
  std::string filter = "--gtest_filter=CpuDiskCacheChild.Run";
  char* argv[] = {self.data(), filter.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, self.c_str(), &fa, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

ChildResult finish(pid_t pid, const std::string& out_path, const std::string& err_path) {
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(out_path) << slurp(err_path);
  ChildResult r;
  std::string out = slurp(out_path);
  size_t at = out.find("compiled=");
  EXPECT_NE(at, std::string::npos) << out;
  if (at != std::string::npos)
    std::sscanf(out.c_str() + at, "compiled=%d disk=%d rejected=%d ok=%d", &r.compiled, &r.disk, &r.rejected, &r.ok);
  r.stderr_text = slurp(err_path);
  return r;
}

class CpuDiskCache : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tc_cpu_cache_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  ChildResult child() {
    pid_t p = spawn_child(dir_, dir_ + "/out", dir_ + "/err");
    return finish(p, dir_ + "/out", dir_ + "/err");
  }
  std::vector<fs::path> entries() {
    std::vector<fs::path> v;
    if (fs::exists(dir_ + "/cpu"))
      for (auto& e : fs::directory_iterator(dir_ + "/cpu")) v.push_back(e.path());
    return v;
  }
  std::string dir_;
};

TEST_F(CpuDiskCache, WarmStartCompilesNothing) {
  ChildResult cold = child();
  EXPECT_EQ(cold.ok, 1);
  EXPECT_EQ(cold.compiled, 2);
  EXPECT_EQ(cold.disk, 0);
  ASSERT_EQ(entries().size(), 1u);  // one module, one entry
  ChildResult warm = child();
  EXPECT_EQ(warm.ok, 1);
  EXPECT_EQ(warm.compiled, 0);
  EXPECT_EQ(warm.disk, 2);
}

// Each kind of damage is noticed, logged, removed and rebuilt (and the rebuilt entry is good).
TEST_F(CpuDiskCache, DamagedEntriesAreRebuiltNeverTrusted) {
  ASSERT_EQ(child().compiled, 2);
  ASSERT_EQ(entries().size(), 1u);
  fs::path entry = entries()[0];
  const std::string good = slurp(entry);
  uint64_t key_len;
  std::memcpy(&key_len, good.data() + 8, 8);
  auto damaged = [&](const char* what, std::string bytes) {
    SCOPED_TRACE(what);
    std::ofstream(entry, std::ios::binary | std::ios::trunc) << bytes;
    ChildResult r = child();
    EXPECT_EQ(r.ok, 1);
    EXPECT_EQ(r.compiled, 2);
    EXPECT_EQ(r.rejected, 1);
    EXPECT_NE(r.stderr_text.find("discarding"), std::string::npos) << r.stderr_text;
    ChildResult again = child();
    EXPECT_EQ(again.compiled, 0);
    EXPECT_EQ(again.disk, 2);
  };
  damaged("truncated", good.substr(0, good.size() / 2));
  damaged("header only", good.substr(0, 20));
  std::string flipped = good;
  flipped[good.size() - 100] ^= 0x10;  // inside the object code
  damaged("bit flip in the object", flipped);
  std::string longer = good;
  longer[16] ^= 1;  // object length field
  damaged("wrong length field", longer);
  // Another LLVM version wrote this file (consistent checksum, different key).
  std::string other = good;
  size_t v = other.find("llvm ", 32);
  ASSERT_NE(v, std::string::npos);
  other[v + 5] = other[v + 5] == '9' ? '8' : '9';
  uint64_t sum = cache_checksum(other.substr(32));
  std::memcpy(other.data() + 24, &sum, 8);
  damaged("other version", other);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  damaged("bad magic", bad_magic);
}

// Two processes compile and write the same entry at the same time: both run correctly and the
// cache holds one valid entry (no temporary files left).
TEST_F(CpuDiskCache, ConcurrentWritersLeaveAValidEntry) {
  for (int round = 0; round < 3; round++) {
    fs::remove_all(dir_ + "/cpu");
    pid_t a = spawn_child(dir_, dir_ + "/out_a", dir_ + "/err_a");
    pid_t b = spawn_child(dir_, dir_ + "/out_b", dir_ + "/err_b");
    ChildResult ra = finish(a, dir_ + "/out_a", dir_ + "/err_a"), rb = finish(b, dir_ + "/out_b", dir_ + "/err_b");
    EXPECT_EQ(ra.ok, 1);
    EXPECT_EQ(rb.ok, 1);
    EXPECT_EQ(ra.rejected + rb.rejected, 0);
    ASSERT_EQ(entries().size(), 1u) << "temporary files left behind";
    ChildResult warm = child();
    EXPECT_EQ(warm.compiled, 0);
    EXPECT_EQ(warm.disk, 2);
    EXPECT_EQ(warm.rejected, 0);
  }
}

// The plan cache's binary form gives back the graph it stored; an entry that ends early or has
// bytes left over is a ValueError (plan_cache.cpp discards it with a log line and lowers again).
TEST(CpuPlanFormat, RoundTripsAndRejectsTruncatedEntries) {
  Tensor constant = Tensor::empty({2}, DType::Float32);
  static_cast<float*>(constant.data_ptr())[0] = -1;
  static_cast<float*>(constant.data_ptr())[1] = 1.5f;
  lower::LoweredGraph g;
  g.kernels = child_kernels();
  g.kernels[0].name = "k0_exp_mul_add";
  g.kernels[0].source_nodes = {3, 4};
  g.kernels[0].source_lines = {12, 13};
  g.buffers = {{lower::Buffer::Kind::Input, DType::Float32, lower::SymInt::sym(0), 0, -1},
               {lower::Buffer::Kind::Temp, DType::Float32, lower::SymInt::sym(0) * lower::SymInt::of(4) + lower::SymInt::of(2), -1, 64},
               {lower::Buffer::Kind::Output, DType::Float32, lower::SymInt::of(1), 0, -1}};
  g.symbols = {{0, 0}};
  lower::Step launch;
  launch.launch = {0, {0, 1}, {lower::SymInt::sym(0)}};
  lower::Step ext;
  ext.kind = lower::Step::Kind::Extern;
  ext.ext.op = Op::sum;
  ext.ext.inputs = {{1, lower::SymInt::of(0), {lower::SymInt::sym(0)}, {lower::SymInt::of(1)}}};
  ext.ext.constants = {Value(), Value(true), Value(int64_t(-3)), Value(0.1), Value(IntList{1, -2}),
                       Value(FloatList{2.5, -0.0}), Value(std::string("mean")), Value(DType::Float16),
                       Value(constant)};
  ext.ext.output = {2, lower::SymInt::of(0), {}, {}};
  ext.ext.arg_kinds = {lower::Extern::kTensorArg, lower::Extern::kConstArg};
  ext.ext.node = 7;
  g.steps = {launch, ext};
  g.outputs = {ext.ext.output};
  g.arena_bytes_static = 128;
  g.num_fused_nodes = 2;
  g.perf_hints = {"line 3: sum runs on its eager kernel"};

  const std::string bytes = encode_plan(g);
  const lower::LoweredGraph d = decode_plan(bytes);
  ASSERT_EQ(d.kernels.size(), 2u);
  for (size_t i = 0; i < 2; i++) {
    EXPECT_TRUE(d.kernels[i].same_structure(g.kernels[i]));
    EXPECT_EQ(d.kernels[i].name, g.kernels[i].name);
    EXPECT_EQ(d.kernels[i].source_lines, g.kernels[i].source_lines);
  }
  ASSERT_EQ(d.buffers.size(), 3u);
  EXPECT_EQ(d.buffers[1].numel, g.buffers[1].numel);
  EXPECT_EQ(d.buffers[1].offset, 64);
  EXPECT_EQ(d.buffers[2].kind, lower::Buffer::Kind::Output);
  ASSERT_EQ(d.steps.size(), 2u);
  EXPECT_EQ(d.steps[0].launch.buffers, (std::vector<int>{0, 1}));
  EXPECT_EQ(d.steps[0].launch.sizes, launch.launch.sizes);
  const lower::Extern& e = d.steps[1].ext;
  EXPECT_EQ(e.op, Op::sum);
  EXPECT_EQ(e.inputs[0].sizes, ext.ext.inputs[0].sizes);
  ASSERT_EQ(e.constants.size(), ext.ext.constants.size());
  EXPECT_TRUE(e.constants[0].is_none());
  EXPECT_EQ(e.constants[2].to_int(), -3);
  EXPECT_EQ(e.constants[3].to_double(), 0.1);
  EXPECT_EQ(e.constants[5].floats(), (FloatList{2.5, -0.0}));
  EXPECT_EQ(e.constants[6].str(), "mean");
  EXPECT_EQ(e.constants[7].dtype(), DType::Float16);
  EXPECT_EQ(e.constants[8].tensor().sizes(), (Shape{2}));
  EXPECT_EQ(static_cast<const float*>(e.constants[8].tensor().data_ptr())[1], 1.5f);
  EXPECT_EQ(e.arg_kinds, ext.ext.arg_kinds);
  EXPECT_EQ(e.node, 7);
  EXPECT_EQ(d.arena_bytes_static, 128);
  EXPECT_EQ(d.num_fused_nodes, 2);
  EXPECT_EQ(d.perf_hints, g.perf_hints);
  EXPECT_EQ(encode_plan(d), bytes);

  for (size_t n : {size_t(0), size_t(3), bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(decode_plan(bytes.substr(0, n)), Error) << n << " of " << bytes.size() << " bytes";
  EXPECT_THROW(decode_plan(bytes + "x"), Error);
}

// The size cap's tests: a fresh cache root of their own under a cap of 1 MiB, entries of 400 KiB.
class CpuDiskCachePrune : public CpuDiskCache {
 protected:
  void SetUp() override {
    CpuDiskCache::SetUp();
    setenv("TC_CACHE_DIR", dir_.c_str(), 1);
    setenv("TC_CACHE_MAX_MB", "1", 1);
  }
  void TearDown() override {
    unsetenv("TC_CACHE_MAX_MB");
    unsetenv("TC_CACHE_DIR");
    CpuDiskCache::TearDown();
  }
  const std::string big = std::string(400 * 1024, 'x');
};

// TC_CACHE_MAX_MB: a write past the cap removes the least recently used entries of every kind
// (oldest modification time; a read touches its entry), never the one just written.
TEST_F(CpuDiskCachePrune, WritesPastTheCapRemoveLeastRecentlyUsedEntries) {
  auto age = [](const std::string& path, int seconds) {  // mtime `seconds` ago (timestamps are coarse)
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= seconds;
    t[1] = t[0];
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), t, 0), 0);
  };
  cache_write("a", big, "cpu");
  age(cache_path("a", "cpu"), 3600);
  cache_write("b", big, "cpu-plan");  // another kind, same root: counts toward the same cap
  age(cache_path("b", "cpu-plan"), 1800);
  EXPECT_TRUE(fs::exists(cache_path("a", "cpu")));
  EXPECT_TRUE(fs::exists(cache_path("b", "cpu-plan")));
  std::string obj;
  ASSERT_EQ(cache_read("a", &obj, "cpu"), CacheRead::Hit);  // a is now the most recently used
  cache_write("c", big, "cpu");  // 1.2 MiB > 1 MiB: b, the least recently used, goes
  EXPECT_TRUE(fs::exists(cache_path("a", "cpu")));
  EXPECT_FALSE(fs::exists(cache_path("b", "cpu-plan")));
  EXPECT_TRUE(fs::exists(cache_path("c", "cpu")));
  setenv("TC_CACHE_MAX_MB", "0.1", 1);  // smaller than any entry: only the newest stays
  cache_write("d", big, "cpu");
  EXPECT_FALSE(fs::exists(cache_path("a", "cpu")));
  EXPECT_FALSE(fs::exists(cache_path("c", "cpu")));
  ASSERT_EQ(cache_read("d", &obj, "cpu"), CacheRead::Hit);
  EXPECT_EQ(obj, big);
  setenv("TC_CACHE_MAX_MB", "0", 1);  // no cap
  cache_write("e", big, "cpu");
  cache_write("f", big, "cpu");
  EXPECT_TRUE(fs::exists(cache_path("d", "cpu")));
  EXPECT_TRUE(fs::exists(cache_path("f", "cpu")));
}

// A write does not list the cache while the size recorded by the last listing (<root>/.size, an
// hour old at most) plus what this process wrote fits the cap: entries that other processes added
// meanwhile stay until a total past the cap lists it again (listing 90k entries took 2 s a process).
TEST_F(CpuDiskCachePrune, WritesTrustTheRecordedSizeUntilItPassesTheCap) {
  std::FILE* f = std::fopen((dir_ + "/.size").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("0\n", f);
  std::fclose(f);
  fs::create_directories(dir_ + "/cpu");
  for (const char* k : {"x1", "x2", "x3"}) {  // 1.2 MiB that another process wrote, unrecorded
    std::ofstream(cache_path(k, "cpu"), std::ios::binary) << big;
  }
  fs::create_directories(dir_ + "/kernels");  // the eager CUDA kernels' cubins count and go too
  std::ofstream(dir_ + "/kernels/k.cubin", std::ios::binary) << big;
  cache_write("a", big, "cpu");  // recorded 0 + 400 KiB fits: nothing listed, nothing removed
  for (const char* k : {"x1", "x2", "x3", "a"}) EXPECT_TRUE(fs::exists(cache_path(k, "cpu"))) << k;
  cache_write("b", big, "cpu");
  cache_write("c", big, "cpu");  // 1.2 MiB recorded: listed, the oldest go until 1 MiB fits
  int left = 0;
  for (const char* k : {"x1", "x2", "x3", "a", "b"}) left += fs::exists(cache_path(k, "cpu"));
  left += fs::exists(dir_ + "/kernels/k.cubin");
  EXPECT_EQ(left, 1);
  EXPECT_TRUE(fs::exists(cache_path("c", "cpu")));
  unsigned long long recorded = 0;
  f = std::fopen((dir_ + "/.size").c_str(), "r");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(std::fscanf(f, "%llu", &recorded), 1);
  std::fclose(f);
  EXPECT_LE(recorded, 1024ull * 1024);
  EXPECT_GT(recorded, 0ull);
}

TEST(CpuDiskCacheOff, EmptyCacheDirTurnsItOff) {
  setenv("TC_CACHE_DIR", "", 1);
  EXPECT_EQ(cache_dir(), "");
  EXPECT_EQ(cache_path("anything"), "");
  std::string obj;
  EXPECT_EQ(cache_read("anything", &obj), CacheRead::Miss);
  unsetenv("TC_CACHE_DIR");
  const char* home = getenv("HOME");
  if (home && *home) {
    EXPECT_EQ(cache_dir(), std::string(home) + "/.cache/tc/cpu");
  }
  set_cache_dir("/some/dir");  // tcrun's --cache-dir wins over the environment
  EXPECT_EQ(cache_dir(), "/some/dir/cpu");
  set_cache_dir("");  // --no-cache
  EXPECT_EQ(cache_dir(), "");
}

}  // namespace
}  // namespace tc::backends::cpu::test
