// The CPU code generator's counters, for tc.compiler.stats() and explain.
//
//   tc::backends::cpu::Stats s = tc::backends::cpu::stats();
//   printf("%lld kernels compiled, %lld from disk, LLVM %.3f s\n", s.kernels_compiled, s.disk_hits, s.llvm_s);
//
// Process-wide totals since start (or the last reset_stats()); safe to read from any thread.
#pragma once
#include <cstdint>
#include <string>

namespace tc::backends::cpu {

struct Stats {
  int64_t graphs_compiled = 0;   // graphs the cpu backend compiled (lowered + generated)
  int64_t graphs_fallback = 0;   // graphs that fell back to eager (lowering or LLVM failure)
  int64_t graphs_lowered = 0;    // graphs lowering ran for (a warm start reads them from disk)
  int64_t plan_hits = 0;         // graphs whose lowered form came from the disk cache
  int64_t kernels_compiled = 0;  // distinct kernels LLVM compiled to machine code
  int64_t memory_hits = 0;       // kernels found already compiled in this process
  int64_t disk_hits = 0;         // kernels loaded from the disk cache
  int64_t disk_rejected = 0;     // disk cache entries (objects, plans) discarded: corrupt, truncated, other version
  double lower_s = 0;            // seconds in lowering (capture::Graph -> loop IR)
  double codegen_s = 0;          // seconds building LLVM IR
  double llvm_s = 0;             // seconds in LLVM (O3 + machine code), incl. loading cached objects
};

Stats stats();
void reset_stats();

// Settings that otherwise come from the environment (for tcrun's --cache-dir, --no-cache and
// --log): the disk cache's directory ("" turns it off; default $TC_CACHE_DIR or ~/.cache/tc),
// and whether generated LLVM IR is printed to stderr (default: TC_DEBUG>=3 or TC_LOGS naming
// output_code).
void set_cache_dir(const std::string& dir);
void set_log_output_code(bool on);

}  // namespace tc::backends::cpu
