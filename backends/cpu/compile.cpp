// Loop IR to running code (compile.h). Kernels are identified by their structure (kernel_key):
// one already compiled in this process is reused (the 64 identical layers of a model compile
// once); the rest of a graph's kernels go into one module, which is loaded from the disk cache
// when an entry for exactly that set of kernels on this LLVM/CPU/tc version exists, and else
// generated, optimized, compiled and written there.
#include "compile.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>

#include "disk_cache.h"
#include "jit.h"
#include "tc/config.h"
#include "tc/cpu_backend.h"
#include "tc/error.h"

namespace tc::backends::cpu {
namespace {

struct Counters {
  std::atomic<int64_t> graphs_compiled{0}, graphs_fallback{0}, graphs_lowered{0}, plan_hits{0}, kernels_compiled{0},
      memory_hits{0}, disk_hits{0}, disk_rejected{0};
  std::atomic<double> lower_s{0}, codegen_s{0}, llvm_s{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Compiled kernels of this process by symbol; the key guards against a hash collision.
struct Compiled {
  std::string key;
  CompiledKernel kernel;
};
std::unordered_map<std::string, Compiled>& compiled() {
  static auto* m = new std::unordered_map<std::string, Compiled>;
  return *m;
}

// TC_DEBUG=3 or TC_LOGS=output_code: the generated LLVM IR of every module before optimization.
std::atomic<bool>& log_output_code() {
  static std::atomic<bool> on = tc::logs_output_code();
  return on;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

// Builds, compiles and caches the kernels `todo` (symbol -> kernel, key) as one module.
void compile_module(const std::map<std::string, std::pair<const lower::Kernel*, std::string>>& todo,
                    capture::CompileReport& report) {
  Counters& c = counters();
  Jit& jit = Jit::get();
  std::string module_key = jit.target_id();
  for (const auto& [sym, kk] : todo) module_key += "\n" + sym + ":" + kk.second;
  std::string object;
  auto t0 = std::chrono::steady_clock::now();
  switch (cache_read(module_key, &object)) {
    case CacheRead::Hit:
      jit.add_object(object);
      c.disk_hits += (int64_t)todo.size();
      report.cached_kernels += (int)todo.size();
      report.compile_ms += 1e3 * seconds_since(t0);
      c.llvm_s += seconds_since(t0);
      return;
    case CacheRead::Rejected: c.disk_rejected++; break;
    case CacheRead::Miss: break;
  }
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> m = new_module(*ctx, "tc_graph");
  jit.prepare(*m);
  std::string listing;
  for (const auto& [sym, kk] : todo) {
    const lower::Kernel& k = *kk.first;
    emit_kernel(*m, k, sym, kk.second[0] == 'N');
    listing += "; " + sym + " = kernel " + k.name;
    if (!k.source_nodes.empty()) listing += ": graph nodes " + join(k.source_nodes);
    if (!k.source_lines.empty()) listing += " (lines " + join(k.source_lines) + ")";
    listing += "\n";
  }
  if (log_output_code()) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    m->print(os, nullptr);
    std::fprintf(stderr, "; ---- tc cpu backend: generated LLVM IR ----\n%s%s\n", listing.c_str(), ir.c_str());
  }
  auto t1 = std::chrono::steady_clock::now();
  c.codegen_s += std::chrono::duration<double>(t1 - t0).count();
  report.codegen_ms += 1e3 * std::chrono::duration<double>(t1 - t0).count();
  object = jit.compile(std::move(m), std::move(ctx));
  c.kernels_compiled += (int64_t)todo.size();
  c.llvm_s += seconds_since(t1);
  report.compile_ms += 1e3 * seconds_since(t1);
  if (!object.empty()) cache_write(module_key, object);
}

}  // namespace

Program compile_lowered(const lower::LoweredGraph& g, capture::CompileReport* report) {
  capture::CompileReport local;
  capture::CompileReport& r = report ? *report : local;
  r.distinct_kernels += (int)g.kernels.size();
  for (const lower::Step& s : g.steps) r.kernels += s.kind == lower::Step::Kind::Launch;
  Program p;
  p.graph = g;
  p.kernels.resize(g.kernels.size());
  std::vector<bool> noalias = lower::kernels_without_aliasing(g);
  std::vector<std::string> keys, syms;
  for (size_t i = 0; i < g.kernels.size(); i++) {
    keys.push_back(kernel_key(g.kernels[i], noalias[i]));
    syms.push_back(kernel_symbol(keys.back()));
  }
  Jit& jit = Jit::get();
  std::lock_guard<std::mutex> lock(jit.mutex());
  auto& cache = compiled();
  std::map<std::string, std::pair<const lower::Kernel*, std::string>> todo;
  int64_t hits = 0;
  for (size_t i = 0; i < g.kernels.size(); i++) {
    auto it = cache.find(syms[i]);
    if (it == cache.end()) {
      todo.emplace(syms[i], std::make_pair(&g.kernels[i], keys[i]));
      continue;
    }
    TC_CHECK(it->second.key == keys[i], CompileError, "cpu backend: two kernels share the hash %s", syms[i].c_str());
    hits++;
  }
  counters().memory_hits += hits;
  if (!todo.empty()) {
    compile_module(todo, r);
    for (const auto& [sym, kk] : todo) {
      CompiledKernel k = find_kernel(*kk.first, sym, [&](const std::string& name) { return jit.lookup(name); });
      cache.emplace(sym, Compiled{kk.second, k});
    }
  }
  for (size_t i = 0; i < g.kernels.size(); i++) p.kernels[i] = cache.at(syms[i]).kernel;
  p.prepare_static_launches();
  return p;
}

void set_log_output_code(bool on) {
  log_output_code() = on;
}

void count_graph(bool fallback, double lower_seconds) {
  Counters& c = counters();
  (fallback ? c.graphs_fallback : c.graphs_compiled)++;
  c.lower_s += lower_seconds;
}

void count_plan(bool hit, bool rejected) {
  Counters& c = counters();
  (hit ? c.plan_hits : c.graphs_lowered)++;
  c.disk_rejected += rejected;
}

Stats stats() {
  Counters& c = counters();
  Stats s;
  s.graphs_compiled = c.graphs_compiled;
  s.graphs_fallback = c.graphs_fallback;
  s.graphs_lowered = c.graphs_lowered;
  s.plan_hits = c.plan_hits;
  s.kernels_compiled = c.kernels_compiled;
  s.memory_hits = c.memory_hits;
  s.disk_hits = c.disk_hits;
  s.disk_rejected = c.disk_rejected;
  s.lower_s = c.lower_s;
  s.codegen_s = c.codegen_s;
  s.llvm_s = c.llvm_s;
  return s;
}

void reset_stats() {
  Counters& c = counters();
  for (auto* v : {&c.graphs_compiled, &c.graphs_fallback, &c.graphs_lowered, &c.plan_hits, &c.kernels_compiled,
                  &c.memory_hits, &c.disk_hits, &c.disk_rejected})
    *v = 0;
  for (auto* v : {&c.lower_s, &c.codegen_s, &c.llvm_s}) *v = 0;
}

}  // namespace tc::backends::cpu
