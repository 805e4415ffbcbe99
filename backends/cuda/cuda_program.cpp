// Loop IR to a loaded CUDA module and the launch list that runs it (cuda_program.h).
#include "cuda_program.h"

#include <llvm/Support/xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>

#include "cpu/disk_cache.h"
#include "cuda_autotune.h"
#include "cuda_tiny_rows.h"
#include "lower/launch_list.h"
#include "cuda/runtime.h"
#include "tc/config.h"
#include "tc/cuda.h"
#include "tc/error.h"

namespace tc::backends::cuda {

using lower::Buffer;
using lower::BufferView;
namespace drv = tc::cuda;

namespace {

constexpr int kCodegenVersion = 1;

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::string hash_name(const std::string& text) {
  llvm::XXH128_hash_t h = llvm::xxh3_128bits(llvm::ArrayRef<uint8_t>((const uint8_t*)text.data(), text.size()));
  char buf[48];
  std::snprintf(buf, sizeof buf, "tck_%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
  return buf;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

// The cubin of `source` for sm_<arch>: from the disk cache, else NVRTC (then cached).
// `r.cached_kernels` gets `distinct` added on a hit. Called from several threads at once.
std::string cubin_for(const std::string& source, int arch, capture::CompileReport& r, int distinct) {
  const std::string key = "tc " TC_VERSION " cuda codegen " + std::to_string(kCodegenVersion) + " nvrtc " +
                          drv::nvrtc_version() + " sm_" + std::to_string(arch) + "\n" + source;
  cpu::CacheRead read;
  std::string cubin = cpu::cached(key, "cuda", [&] { return drv::compile_cubin(source, arch); }, &read);
  if (read == cpu::CacheRead::Hit) r.cached_kernels += distinct;
  return cubin;
}

constexpr int kTinyBlock = 256;
constexpr size_t kKernelsPerProgram = 4;  // at least this many kernels per NVRTC program

// Whether `g` runs as one kernel of one block: static sizes, only generated steps, each small
// enough for one block: at most 1024 outer iterations (4 per thread) by default, where one block
// beats a launch per step (the 64-layer seed model: 4x); TC_CUDA_TINY_GRAPH=1 allows up to 4096,
// =0 turns it off.
bool tiny_eligible(const lower::LoweredGraph& g) {
  const char* on = std::getenv("TC_CUDA_TINY_GRAPH");
  if ((on && *on == '0') || !g.symbols.empty() || g.steps.size() < 2) return false;
  const int64_t max_outer = on && *on && *on != '0' ? 16 * kTinyBlock : 4 * kTinyBlock;
  int io = 0;  // pointer parameters of the graph kernel (4 KiB of parameters at most)
  for (const Buffer& b : g.buffers) io += b.kind != Buffer::Kind::Temp;
  if (io > 400) return false;
  const std::vector<int64_t> none;
  for (const lower::Step& s : g.steps) {
    if (s.kind != lower::Step::Kind::Launch) return false;
    std::vector<int64_t> sizes = lower::eval_all(s.launch.sizes, none);
    std::optional<KernelWork> w = kernel_work(g.kernels[s.launch.kernel], &sizes);
    if (!w || w->outer > max_outer || w->row > 256) return false;
    for (int b : s.launch.buffers)
      if (g.buffers[b].kind == Buffer::Kind::Temp && g.buffers[b].offset < 0) return false;
  }
  return true;
}

// The tiny graph's kernel: each step's device function called in launch order. Its arena and
// the read-only inputs of 4-byte-or-wider dtypes (weights) live in shared memory while they fit
// (kTinySmem; TC_CUDA_TINY_SMEM=0: global memory): the inputs are copied in once at the start
// (sm_80+: cp.async, every copy in flight at once), and every step then reads shared memory (a
// few dozen cycles) instead of L2 (hundreds), which is what the chain of dependent steps waits
// on. `smem_bytes` gets the dynamic shared memory size.
constexpr int64_t kTinySmem = 160 * 1024;
// Runs of at least kTinyFoldReps repetitions of a period of at most kTinyFoldPeriod steps (the 64
// layers) become a loop (TC_CUDA_TINY_FOLD=0: off); with at most kTinyInlineCalls call sites the
// steps are inlined (the loop's body computes its indices once; one layer's code stays in the
// instruction cache), else __noinline__ (NVRTC time).
constexpr size_t kTinyFoldPeriod = 8;
constexpr size_t kTinyFoldReps = 3;
constexpr int kTinyInlineCalls = 32;

// One step's call in the tiny kernel: a pointer argument is `base` + `offset` bytes ("sh" or
// "arena" with an offset, or a graph parameter "p3" with offset 0).
struct TinyCall {
  std::string fn, tail;  // the function; the size arguments after the pointers
  struct Arg {
    std::string type, base;
    int64_t offset = 0;
  };
  std::vector<Arg> args;
  std::string text(const std::string& rep, const std::vector<int64_t>& deltas) const {
    std::string s = fn + "(";
    for (size_t j = 0; j < args.size(); j++) {
      const Arg& a = args[j];
      if (a.base.rfind("p", 0) == 0) {
        s += "(" + a.type + ")" + a.base + ", ";
        continue;
      }
      s += "(" + a.type + ")(" + a.base + " + " + std::to_string(a.offset);
      if (!rep.empty() && deltas[j]) s += " + " + rep + " * " + std::to_string(deltas[j]);
      s += "), ";
    }
    return s + tail + ");";
  }
};

// Whether `c` is `base` moved by `r` times `deltas` (pointer parameters equal).
bool moved_by(const TinyCall& c, const TinyCall& base, const std::vector<int64_t>& deltas, int64_t r) {
  if (c.fn != base.fn || c.tail != base.tail || c.args.size() != base.args.size()) return false;
  for (size_t j = 0; j < c.args.size(); j++)
    if (c.args[j].type != base.args[j].type || c.args[j].base != base.args[j].base ||
        c.args[j].offset != base.args[j].offset + r * deltas[j])
      return false;
  return true;
}

std::string tiny_graph_source(const lower::LoweredGraph& g, const std::vector<std::vector<std::string>>& names, int block,
                              bool warp_rows, std::vector<int>* params, int64_t* smem_bytes, bool* inline_steps) {
  std::string sig = "char* arena", body, prologue;
  std::vector<bool> param(g.buffers.size(), false);
  const std::vector<int64_t> none;
  // shared-memory plan: byte offset per buffer (-1: global memory)
  std::vector<int64_t> at(g.buffers.size(), -1);
  int64_t used = 0;
  const char* off = std::getenv("TC_CUDA_TINY_SMEM");
  bool arena_shared = !(off && *off == '0') && g.arena_bytes_static >= 0 && g.arena_bytes_static <= kTinySmem;
  for (const BufferView& v : g.outputs) arena_shared &= g.buffers[v.buffer].kind != Buffer::Kind::Temp;
  if (arena_shared) used = (g.arena_bytes_static + 15) / 16 * 16;
  std::map<int64_t, std::string> small;  // words -> copies of inputs of that many words
  if (arena_shared) {
    std::vector<bool> written(g.buffers.size(), false);
    for (const lower::Step& st : g.steps)
      for (size_t j = 0; j < st.launch.buffers.size(); j++)
        written[st.launch.buffers[j]] = written[st.launch.buffers[j]] || g.kernels[st.launch.kernel].buffers[j].written;
    for (const lower::Step& st : g.steps)
      for (int b : st.launch.buffers) {
        const Buffer& buf = g.buffers[b];
        const int64_t bytes = buf.numel.eval(none) * (int64_t)itemsize(buf.dtype);
        if (buf.kind != Buffer::Kind::Input || written[b] || at[b] >= 0 || itemsize(buf.dtype) < 4 || bytes <= 0 ||
            used + bytes > kTinySmem)
          continue;
        at[b] = used;
        // a word per thread (the first `words` threads, grouped by `words`), larger inputs in a loop
        const int64_t words = bytes / 4;
        const std::string at_s = std::to_string(used), src = "(const unsigned*)p" + std::to_string(b);
        if (words <= block)
          small[words] += "      tc_tiny_copy(sh, " + at_s + " + 4 * t, " + src + " + t);\n";
        else
          prologue += "    for (int i = t; i < " + std::to_string(words) + "; i += blockDim.x) tc_tiny_copy(sh, " + at_s +
                      " + 4 * i, " + src + " + i);\n";
        used += (bytes + 15) / 16 * 16;
      }
  }
  for (const auto& [words, copies] : small) prologue += "    if (t < " + std::to_string(words) + ") {\n" + copies + "    }\n";
  *smem_bytes = arena_shared ? used : 0;
  std::vector<TinyCall> calls;
  for (const lower::Step& st : g.steps) {
    const lower::Launch& l = st.launch;
    const lower::Kernel& k = g.kernels[l.kernel];
    TinyCall c;
    c.fn = names[l.kernel][0];
    for (size_t j = 0; j < l.buffers.size(); j++) {
      const int b = l.buffers[j];
      TinyCall::Arg a;
      a.type = std::string(k.buffers[j].written ? "" : "const ") + buffer_type(k.buffers[j].dtype) + "*";
      if (g.buffers[b].kind == Buffer::Kind::Temp) {
        a.base = arena_shared ? "sh" : "arena", a.offset = g.buffers[b].offset;
      } else if (at[b] >= 0) {
        a.base = "sh", a.offset = at[b];
      } else {
        a.base = "p" + std::to_string(b);
      }
      c.args.push_back(a);
    }
    std::vector<int64_t> sizes = lower::eval_all(l.sizes, none);
    for (int64_t v : sizes) c.tail += std::to_string(v) + "ll, ";
    c.tail += std::to_string(kernel_work(k, &sizes)->outer) + "ll" + (checks_index_values(k) ? ", tc_err" : "");
    calls.push_back(std::move(c));
  }
  // the calls, runs of a repeated period folded into loops (the sync before every step but the first)
  const std::string sync = warp_rows ? "__syncwarp();" : "__syncthreads();";
  const char* fold = std::getenv("TC_CUDA_TINY_FOLD");
  const bool folding = !(fold && *fold == '0');
  int sites = 0, loops = 0;
  for (size_t i = 0; i < calls.size();) {
    size_t best_p = 0, best_n = 0;
    std::vector<std::vector<int64_t>> best_d;
    for (size_t p = 1; folding && p <= kTinyFoldPeriod && i + 2 * p <= calls.size(); p++) {
      std::vector<std::vector<int64_t>> d(p);
      bool ok = true;
      for (size_t k = 0; k < p && ok; k++) {
        const TinyCall &a = calls[i + k], &b = calls[i + p + k];
        ok = a.args.size() == b.args.size();
        for (size_t j = 0; ok && j < a.args.size(); j++) d[k].push_back(b.args[j].offset - a.args[j].offset);
        ok = ok && moved_by(b, a, d[k], 1);
      }
      if (!ok) continue;
      size_t n = 2;
      for (bool more = true; more && i + (n + 1) * p <= calls.size();) {
        for (size_t k = 0; k < p && more; k++) more = moved_by(calls[i + n * p + k], calls[i + k], d[k], (int64_t)n);
        n += more;
      }
      if (n >= kTinyFoldReps && n * p > best_n * best_p) best_p = p, best_n = n, best_d = d;
    }
    if (!best_p) {
      body += (i ? "  " + sync + "\n  " : "  ") + calls[i].text("", {}) + "\n";
      sites++, i++;
      continue;
    }
    const std::string r = "r" + std::to_string(loops++);
    body += "  #pragma unroll 1\n  for (int " + r + " = 0; " + r + " < " + std::to_string(best_n) + "; " + r + "++) {\n";
    for (size_t k = 0; k < best_p; k++) body += "    " + sync + "\n    " + calls[i + k].text(r, best_d[k]) + "\n";
    body += "  }\n";
    sites += (int)best_p, i += best_p * best_n;
  }
  const char* inl = std::getenv("TC_CUDA_TINY_INLINE");
  *inline_steps = inl && *inl ? *inl != '0' : sites <= kTinyInlineCalls;
  // parameters: every non-Temp buffer a step uses, in first-use order (also those copied in)
  for (const lower::Step& st : g.steps)
    for (int b : st.launch.buffers)
      if (g.buffers[b].kind != Buffer::Kind::Temp && !param[b]) {
        param[b] = true;
        params->push_back(b);
        sig += ", void* p" + std::to_string(b);
      }
  for (const lower::Kernel& k : g.kernels)
    if (checks_index_values(k)) {
      sig += ", i64* tc_err";
      break;
    }
  std::string head;
  if (arena_shared)
    head = "  extern __shared__ __align__(16) char sh[];\n  {\n    const int t = threadIdx.x;\n" + prologue +
           "    tc_tiny_copies_done();\n  }\n  __syncthreads();\n";
  // a word from global to shared memory: cp.async where the arch has it (completed by
  // tc_tiny_copies_done), else a load and a store
  const std::string copy =
      "__device__ __forceinline__ unsigned tc_tiny_shared(const char* p) {\n"
      "  unsigned a;\n"
      "  asm(\"{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }\" : \"=r\"(a) : \"l\"(p));\n"
      "  return a;\n"
      "}\n"
      "__device__ __forceinline__ void tc_tiny_copy(char* sh, unsigned at, const unsigned* src) {\n"
      "#if __CUDA_ARCH__ >= 800\n"
      "  asm volatile(\"{ .reg .u64 g; cvta.to.global.u64 g, %1; cp.async.ca.shared.global [%0], [g], 4; }\"\n"
      "               :: \"r\"(tc_tiny_shared(sh) + at), \"l\"(src) : \"memory\");\n"
      "#else\n"
      "  *(unsigned*)(sh + at) = *src;\n"
      "#endif\n"
      "}\n"
      "__device__ __forceinline__ void tc_tiny_copies_done() {\n"
      "#if __CUDA_ARCH__ >= 800\n"
      "  asm volatile(\"cp.async.wait_all;\" ::: \"memory\");\n"
      "#endif\n"
      "}\n";
  return (arena_shared ? copy : "") + "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(block) +
         ") TC_KERNEL_NAME(" + sig + ") {\n" + head + body + "}\n";
}

// What generate() makes: the code without cubins, and the sources of its NVRTC programs.
struct Generated {
  CudaCode code;
  std::vector<std::string> programs;
  std::string source;  // every kernel after one header: TC_LOGS=output_code, and code.key's text
  int distinct = 0;    // distinct functions
};

// Code generation: per kernel its strategies (each distinct source emitted once, named after its
// hash: kernels that lowering kept apart but that generate the same code are one function), the
// tiny graph's kernel when the graph is tiny, cut into the programs NVRTC compiles side by side.
Generated generate(const lower::LoweredGraph& g, int arch, capture::CompileReport& r, bool variants) {
  auto t0 = std::chrono::steady_clock::now();
  Generated gen;
  CudaCode& code = gen.code;
  code.arch = arch;
  for (const lower::Step& s : g.steps) r.kernels += s.kind == lower::Step::Kind::Launch;
  std::vector<bool> noalias = lower::kernels_without_aliasing(g);
  std::map<std::string, std::string> sources;  // name -> source, in name order (reproducible)
  std::string listing, tiny_step;
  const bool tiny = tiny_eligible(g);
  // TC_CUDA_TINY_ROWS=1: a tiny graph whose steps are row-local runs a warp per row, as many
  // warps as the most rows of a step (at most 32), __syncwarp between steps. Not the default: on
  // an H100 the seed model's kernel took 4-12% longer that way (10 warps of 10 busy lanes issue
  // more than 4 full warps, which costs more than the block-wide syncs it saves).
  const char* rows_env = std::getenv("TC_CUDA_TINY_ROWS");
  const int warp_row = tiny && rows_env && *rows_env == '1' ? tiny_warp_row(g) : 0;
  code.tiny_block = kTinyBlock;
  if (warp_row) {
    int64_t rows = 1;
    const std::vector<int64_t> none;
    for (const lower::Step& s : g.steps) {
      std::vector<int64_t> sizes = lower::eval_all(s.launch.sizes, none);
      rows = std::max(rows, (kernel_work(g.kernels[s.launch.kernel], &sizes)->outer + warp_row - 1) / warp_row);
    }
    code.tiny_block = 32 * (int)std::min<int64_t>(rows, 32);
  }
  for (size_t i = 0; i < g.kernels.size(); i++) {
    const lower::Kernel& k = g.kernels[i];
    code.shapes.push_back(plan_kernel(k, noalias[i]));
    if (variants && !tiny && g.symbols.empty()) code.shapes.back() = with_variants(k, code.shapes.back());
    if (tiny) {
      KernelShape& sh = code.shapes.back()[0];
      code.shapes.back().resize(1);
      sh.threads_per_row = 1, sh.block = code.tiny_block, sh.unroll = 1, sh.vec = 1, sh.index32 = true, sh.device_fn = true;
      sh.split = 0;
      sh.warp_row = warp_row;
      sh.noalias = false;  // no __restrict__: a later step reads what an earlier one wrote (no .nc loads)
    }
    code.names.emplace_back();
    for (const KernelShape& sh : code.shapes.back()) {
      std::string src = emit_kernel(k, "TC_KERNEL_NAME", sh);
      const std::string name = hash_name(src);
      src.replace(src.find("TC_KERNEL_NAME"), 14, name);
      code.names.back().push_back(name);
      listing += "// " + name + " = kernel " + k.name;
      if (!k.source_nodes.empty()) listing += ": graph nodes " + join(k.source_nodes);
      if (!k.source_lines.empty()) listing += " (lines " + join(k.source_lines) + ")";
      listing += "\n";
      sources.emplace(name, std::move(src));
    }
  }
  if (tiny) {
    bool inline_steps = false;
    std::string src = tiny_graph_source(g, code.names, code.tiny_block, warp_row > 0, &code.tiny_params, &code.tiny_smem,
                                        &inline_steps);
    // the steps' qualifier (KernelShape::warp_row), in the program's header ahead of them
    tiny_step = std::string("#define TC_TINY_STEP ") + (inline_steps ? "__forceinline__" : "__noinline__") + "\n";
    code.tiny = hash_name(src);
    src.replace(src.find("TC_KERNEL_NAME"), 14, code.tiny);
    listing += "// " + code.tiny + " = the whole graph in one block of " + std::to_string(code.tiny_block) + " threads" +
               (warp_row ? ", a warp per row of " + std::to_string(warp_row) : "") + " (TC_CUDA_TINY_GRAPH)\n";
    sources.emplace(code.tiny, std::move(src));
    r.kernels -= (int)g.steps.size() - 1;  // one launch per call
  }
  gen.distinct = (int)sources.size();
  r.distinct_kernels += gen.distinct;
  std::string header = drv::prelude() + codegen_prelude() + tiny_step;
  // Testing the fallback: a program NVRTC must reject.
  if (const char* f = std::getenv("TC_CUDA_FAIL_NVRTC"); f && *f && *f != '0')
    header += "\n#error \"TC_CUDA_FAIL_NVRTC is set\"\n";
  // The kernels in name order (a tiny graph's kernel after the step functions it calls), cut into
  // programs that NVRTC compiles in parallel (a tiny graph: one program).
  std::vector<std::string> order;
  for (const auto& [name, src] : sources)
    if (name != code.tiny) order.push_back(name);
  if (tiny) order.push_back(code.tiny);
  const size_t threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const size_t programs = tiny ? 1 : std::min(threads, (order.size() + kKernelsPerProgram - 1) / kKernelsPerProgram);
  if (!order.empty()) gen.programs.assign(std::max<size_t>(programs, 1), header);
  for (size_t i = 0; i < order.size(); i++)
    gen.programs[i * gen.programs.size() / order.size()] += "\n" + sources.at(order[i]);
  gen.source = header;
  for (const std::string& name : order) gen.source += "\n" + sources.at(name);
  code.key = hash_name(gen.source) + " sm_" + std::to_string(arch);
  r.codegen_ms += ms_since(t0);
  if (tc::logs_output_code())
    std::fprintf(stderr, "// ---- tc cuda backend: generated CUDA C++ ----\n%s%s\n", listing.c_str(), gen.source.c_str());
  return gen;
}

// NVRTC: gen.code.cubins from gen.programs, side by side on threads, each through the disk cache.
void compile_programs(Generated& gen, capture::CompileReport& r) {
  const size_t n = gen.programs.size();
  std::vector<std::string> cubins(n);
  std::vector<capture::CompileReport> reports(n);
  std::vector<std::exception_ptr> errors(n);
  auto compile = [&](size_t i) {
    try {
      cubins[i] = cubin_for(gen.programs[i], gen.code.arch, reports[i], 1);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  auto t1 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (size_t i = 1; i < n; i++) pool.emplace_back(compile, i);
  if (n) compile(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  r.compile_ms += ms_since(t1);  // wall time: the programs compile side by side
  bool all_cached = n > 0;
  for (const capture::CompileReport& c : reports) all_cached &= c.cached_kernels > 0;
  if (all_cached) r.cached_kernels += gen.distinct;
  gen.code.cubins = std::move(cubins);
}

// Loaded modules of this process: device and CudaCode::key -> function per entry point name.
struct Loaded {
  std::string source;  // compile_lowered's: guards against a hash collision ("" from a package)
  std::map<std::string, void*> functions;
};
std::mutex g_mu;
std::unordered_map<std::string, Loaded>& loaded() {
  static auto* m = new std::unordered_map<std::string, Loaded>;
  return *m;
}
// (compile-only mode loads nothing: its entries hold no functions)
std::string loaded_key(int device, const CudaCode& code) {
  return (drv::compile_only() ? "compile-only " : "") + std::to_string(device) + " " + code.key;
}
// Whether `code` (with this source; null: any) is loaded on `device` (g_mu held).
bool is_loaded(const std::string& key, const std::string* source) {
  auto it = loaded().find(key);
  return it != loaded().end() && (!source || it->second.source == *source);
}

Program load(lower::LoweredGraph g, int device, const CudaCode& code, const std::string* source) {
  TC_CHECK(code.shapes.size() == g.kernels.size() && code.names.size() == g.kernels.size(), ValueError,
           "cuda backend: %zu kernels but launch plans for %zu", g.kernels.size(), code.shapes.size());
  for (size_t i = 0; i < g.kernels.size(); i++)
    TC_CHECK(!code.shapes[i].empty() && code.shapes[i].size() == code.names[i].size(), ValueError,
             "cuda backend: kernel %zu has %zu strategies and %zu function names", i, code.shapes[i].size(),
             code.names[i].size());
  for (int b : code.tiny_params)
    TC_CHECK(b >= 0 && b < (int)g.buffers.size(), ValueError, "cuda backend: the tiny graph kernel reads buffer %d of %zu",
             b, g.buffers.size());
  Program p;
  p.device = device;
  p.shapes = code.shapes;
  p.tiny_graph = !code.tiny.empty();
  p.tiny_params = code.tiny_params;
  p.tiny_smem = code.tiny_smem;
  TC_CHECK(code.tiny_block >= 32 && code.tiny_block <= 1024 && code.tiny_block % 32 == 0, ValueError,
           "cuda backend: a tiny graph kernel of %d threads", code.tiny_block);
  p.tiny_block = code.tiny_block;
  for (const auto& n : code.names) p.functions.emplace_back(n.size(), nullptr);
  p.graph = std::move(g);
  // The entry points: the tiny graph's kernel, or every step's kernel.
  std::vector<std::string> entries;
  if (p.tiny_graph) entries.push_back(code.tiny);
  for (size_t i = 0; !p.tiny_graph && i < code.names.size(); i++)
    entries.insert(entries.end(), code.names[i].begin(), code.names[i].end());
  if (!entries.empty()) {
    const std::string key = loaded_key(device, code);
    std::lock_guard<std::mutex> lock(g_mu);
    if (!is_loaded(key, source)) {
      Loaded l;
      l.source = source ? *source : "";
      for (size_t m = 0; m < code.cubins.size() && !drv::compile_only(); m++) {
        CUmodule mod;
        drv::check(drv::drv().ModuleLoadData(&mod, code.cubins[m].data()), "loading a generated CUDA module");
        for (const std::string& name : entries) {
          CUfunction f;
          if (!l.functions.count(name) && drv::drv().ModuleGetFunction(&f, mod, name.c_str()) == CUDA_SUCCESS)
            l.functions[name] = (void*)f;
        }
      }
      for (const std::string& name : entries)
        TC_CHECK(drv::compile_only() || l.functions.count(name), CompileError,
                 "cuda backend: the generated kernel %s is in no loaded module", name.c_str());
      loaded().insert_or_assign(key, std::move(l));
    }
    const std::map<std::string, void*>& fns = loaded().at(key).functions;
    if (p.tiny_graph && !drv::compile_only()) {
      p.tiny = fns.at(code.tiny);
      if (p.tiny_smem > 48 * 1024)
        drv::check(drv::drv().FuncSetAttribute((CUfunction)p.tiny, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               (int)p.tiny_smem),
                   "raising a tiny graph kernel's shared memory");
    }
    for (size_t i = 0; !p.tiny_graph && !drv::compile_only() && i < code.names.size(); i++)
      for (size_t j = 0; j < code.names[i].size(); j++) p.functions[i][j] = fns.at(code.names[i][j]);
  }
  p.prepare_static_launches();
  if (profiling()) {
    int externs = 0;
    for (const lower::Step& s : p.graph.steps) externs += s.kind == lower::Step::Kind::Extern;
    p.profile = profile_table("graph of " + std::to_string(p.graph.steps.size()) + " steps (" +
                              std::to_string(externs) + " library calls), program " + code.key);
  }
  return p;
}

}  // namespace

Program compile_lowered(const lower::LoweredGraph& g, int device, capture::CompileReport* report, bool tune) {
  capture::CompileReport local;
  capture::CompileReport& r = report ? *report : local;
  drv::DeviceState& ds = drv::dev(device);
  Generated gen = generate(g, ds.cc_major * 10 + ds.cc_minor, r, tune);
  bool have;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    have = is_loaded(loaded_key(device, gen.code), &gen.source);
  }
  if (have)
    r.cached_kernels += gen.distinct;
  else
    compile_programs(gen, r);
  Program p = load(g, device, gen.code, &gen.source);
  if (tune) autotune(p, gen.code.key, r);
  return p;
}

CudaCode generate_code(const lower::LoweredGraph& g, int arch, capture::CompileReport* report) {
  capture::CompileReport local;
  capture::CompileReport& r = report ? *report : local;
  Generated gen = generate(g, arch, r, false);
  compile_programs(gen, r);
  return std::move(gen.code);
}

Program load_code(lower::LoweredGraph g, int device, const CudaCode& code) {
  return load(std::move(g), device, code, nullptr);
}
namespace {
std::string shape_str(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); d++) s += (d ? "x" : "") + std::to_string(t.size(d));
  return s + "]";
}
}  // namespace

unsigned Program::grid(const KernelShape& sh, int64_t n_outer, bool two_level) const {
  const int64_t rows_per_block = sh.block / sh.threads_per_row * sh.unroll * sh.vec;
  if (sh.split) return (unsigned)sh.split;  // a split reduction: its planned grid (its slices)
  const int64_t blocks = (n_outer + rows_per_block - 1) / rows_per_block;
  int64_t cap = (int64_t)drv::dev(device).sm_count * std::max(1, 2048 / sh.block) * 4;
  if (two_level) cap = std::min(cap, kMaxTwoLevelBlocks);  // its blocks' result slots
  return (unsigned)std::max<int64_t>(1, std::min(blocks, cap));
}

void Program::prepare_static_launches() {
  static_launches.clear();
  if (!graph.symbols.empty()) return;
  const std::vector<int64_t> none;
  static_launches.resize(graph.steps.size());
  for (size_t i = 0; i < graph.steps.size(); i++) {
    const lower::Step& s = graph.steps[i];
    if (s.kind != lower::Step::Kind::Launch) continue;
    StaticLaunch& sl = static_launches[i];
    sl.sizes = lower::eval_all(s.launch.sizes, none);
    std::optional<KernelWork> w = kernel_work(graph.kernels[s.launch.kernel], &sl.sizes);
    TC_CHECK(w.has_value(), CompileError, "cuda backend: the launch size of %s is not computable on the host",
             graph.kernels[s.launch.kernel].name.c_str());
    sl.n_outer = w->outer;
    sl.shape = choose_shape(shapes[s.launch.kernel], *w);
    sl.grid = grid(shapes[s.launch.kernel][sl.shape], w->outer, graph.kernels[s.launch.kernel].two_level());
  }
}

std::shared_ptr<Storage> Program::arena(int64_t bytes) const {
  bytes = std::max<int64_t>(bytes, 1);
  const Device d{DeviceType::CUDA, device};
  if (graph.arena_bytes_static < 0) return Storage::allocate((size_t)bytes, d);
  const int stream = drv::current_stream_id(device);
  std::lock_guard<std::mutex> lock(kept->mu);
  if (kept->storage && kept->storage.use_count() == 1 && kept->stream == stream) return kept->storage;
  std::shared_ptr<Storage> s = Storage::allocate((size_t)bytes, d);
  if (!kept->storage || kept->storage.use_count() == 1) {
    kept->storage = s;
    kept->stream = stream;
  }
  return s;
}

// Check k of g flagged `value`: raises its op's eager error (at the op's line). As a decoder of
// a CUDA graph's checks (`claim`: other checks share the codes), returns for a flag that is not
// one of its checks.
static void raise_index_check(const std::vector<lower::IndexCheck>& checks, const std::vector<int64_t>& syms,
                              int device, int64_t k, int64_t value, bool claim = false) {
  if (claim && (k < 1 || k > (int64_t)checks.size())) return;
  TC_CHECK(k >= 1 && k <= (int64_t)checks.size(), DeviceError,
           "a device-side check failed (code %lld) in a graph without such a check", (long long)k);
  const lower::IndexCheck& c = checks[size_t(k - 1)];
  try {
    c.raise(value, syms, Device{DeviceType::CUDA, device});
  } catch (const Error& e) {
    if (c.node < 0) throw;  // a loaded package's check: no graph node to name
    throw capture::NodeError(e, c.node);
  }
  if (claim) return;  // the value is in range for check k: another check's flag
  Error e(ErrorKind::IndexError, "index " + std::to_string(value) + " is out of range");
  if (c.node < 0) throw e;
  throw capture::NodeError(e, c.node);
}

// After a graph whose kernels check index values: a flagged check raises its op's eager error
// (at the op's line). One wait for the device per call of such graphs; under CUDA graph capture
// the replays read the word instead, later and without waiting (the flag number and value tell
// which check failed: tc::cuda::CudaGraph::check_later).
static void raise_flagged_index(const lower::LoweredGraph& g, const std::vector<int64_t>& syms, int device) {
  if (drv::capturing()) {
    drv::note_device_check_in_capture([checks = g.index_checks, syms, device](int64_t k, int64_t value) {
      raise_index_check(checks, syms, device, k, value, true);
    });
    return;
  }
  int64_t value = 0;
  const int64_t k = drv::take_device_error(device, &value);
  if (k != 0) raise_index_check(g.index_checks, syms, device, k, value);
}

std::vector<Tensor> Program::run(capture::GraphInputs inputs) const {
  const lower::LoweredGraph& g = graph;
  const std::vector<int64_t> syms = lower::symbol_values(g, inputs);
  std::shared_ptr<Storage> arena = this->arena(lower::arena_bytes(g, syms));
  std::vector<lower::Place> places = lower::place_buffers(g, inputs, arena, syms, Device{DeviceType::CUDA, device});
  std::vector<void*> ptrs;
  std::vector<int64_t> sizes;
  std::vector<void*> args;
  // every kernel gets the error word last (those that check index values declare it)
  void* err = drv::compile_only() ? nullptr : reinterpret_cast<void*>(drv::dev(device).error_word);
  ProfileRun prof(profile.get(), device, tiny_graph ? 1 : g.steps.size());
  if (tiny_graph) {
    prof.mark(0, "tiny graph kernel");
    ptrs = {arena->data()};
    for (int b : tiny_params) ptrs.push_back(places[b].ptr);
    for (void*& p : ptrs) args.push_back(&p);
    args.push_back(&err);
    try {
      if (tiny) drv::launch(device, (CUfunction)tiny, 1, (unsigned)tiny_block, args.data(), (unsigned)tiny_smem);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::OutOfMemoryError) throw;
      throw LaunchFailed(e.what());
    }
  }
  for (size_t step = 0; !tiny_graph && step < g.steps.size(); step++) {
    const lower::Step& s = g.steps[step];
    if (s.kind == lower::Step::Kind::Launch) {
      const int k = s.launch.kernel;
      int64_t n_outer = 0;
      unsigned blocks = 0;
      int shape = 0;
      if (!static_launches.empty()) {
        const StaticLaunch& sl = static_launches[step];
        sizes = sl.sizes;
        n_outer = sl.n_outer;
        blocks = sl.grid;
        shape = sl.shape;
      } else {
        sizes.clear();
        for (const lower::SymInt& v : s.launch.sizes) sizes.push_back(v.eval(syms));
        std::optional<KernelWork> w = kernel_work(g.kernels[k], &sizes);
        TC_CHECK(w.has_value(), CompileError, "cuda backend: the launch size of %s is not computable on the host",
                 g.kernels[k].name.c_str());
        n_outer = w->outer;
        shape = choose_shape(shapes[k], *w);
        blocks = grid(shapes[k][shape], n_outer, g.kernels[k].two_level());
      }
      void* fn = functions[k][shape];
      if (profile) {
        std::string label = "kernel " + g.kernels[k].name + " (lines " + join(g.kernels[k].source_lines) +
                            ") outer " + std::to_string(n_outer) + " tpr " + std::to_string(shapes[k][shape].threads_per_row);
        prof.mark(step, label);
      }
      if ((n_outer <= 0 && !g.kernels[k].two_level()) || !fn) continue;  // (a two-level kernel's final code runs)
      ptrs.clear();
      for (int b : s.launch.buffers) ptrs.push_back(places[b].ptr);
      args.clear();
      for (void*& p : ptrs) args.push_back(&p);
      for (int64_t& v : sizes) args.push_back(&v);
      args.push_back(&n_outer);
      args.push_back(&err);
      try {
        drv::launch(device, (CUfunction)fn, blocks, (unsigned)shapes[k][shape].block, args.data());
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::OutOfMemoryError) throw;
        throw LaunchFailed(e.what());
      }
      continue;
    }
    const lower::Extern& e = s.ext;
    if (profile) {
      std::string label = e.external ? e.external->name : op_name(e.op);
      for (const BufferView& v : e.inputs) {
        const Tensor t = lower::view_of(places[v.buffer], g.buffers[v.buffer].dtype, v, syms);
        label += " " + shape_str(t) + (t.is_contiguous() ? "" : "nc");
      }
      prof.mark(step, label);
    }
    const int checks = drv::capture_device_checks();
    // an earlier kernel's flagged index check, read first by this eager op, is the graph's error
    std::optional<drv::OuterDeviceChecks> own_checks;
    if (!g.index_checks.empty())
      own_checks.emplace([&g, &syms, device = device](int64_t k, int64_t value) {
        raise_index_check(g.index_checks, syms, device, k, value, true);
      });
    lower::run_extern(g, e, places, syms, "cuda backend", true);
    if (e.node >= 0 && drv::capture_device_checks() > checks) {
      // the eager kernel's checks, read after a replay: their errors name the node as run_extern's do
      drv::wrap_capture_device_checks(checks, [node = e.node](drv::DeviceCheckDecoder d) -> drv::DeviceCheckDecoder {
        return [d, node](int64_t code, int64_t detail) {
          try {
            d(code, detail);
          } catch (const capture::NodeError&) {
            throw;
          } catch (const Error& err) {
            throw capture::NodeError(err, node);
          }
        };
      });
    }
  }
  prof.finish();
  if (!g.index_checks.empty()) raise_flagged_index(g, syms, device);
  return lower::graph_outputs(g, places, syms);
}

}  // namespace tc::backends::cuda
