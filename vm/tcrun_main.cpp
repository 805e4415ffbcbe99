// tcrun: runs a Lua script on tc's runtime (LUA_API.md §8). Exit status 0 on success, 1 on a Lua
// error (message with the user's file:line and a traceback on stderr), 2 on bad usage.
#include <lua.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "launcher.h"
#include "llvm/Config/llvm-config.h"
#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/cpu_backend.h"
#include "tc/cuda.h"
#include "tc/vm/bytecode.h"
#include "tc/vm/compiler.h"
#include "tc/vm/runtime.h"
#ifdef TC_HAVE_CUDA
#include <cuda.h>
#endif

namespace {

// "{backends}" and "{modes}" are filled in from the backend registry (usage()).
const char* kUsage =
    "usage: tcrun [options] script.lua [args...]     (args reach the script as `arg` and `...`)\n"
    "       tcrun [options] - [args...]              (the script from standard input)\n"
    "  --explain[=text|json]   after the run, print the report for every compiled function\n"
    "  --fullgraph             every compiled function is strict (a graph break is an error)\n"
    "  --backend=NAME          default backend for tc.compile ({backends})\n"
    "  --device=cpu|cuda       default device for new tensors\n"
    "  --mode=MODE             default mode for tc.compile ({modes})\n"
    "  --eager                 tc.compile returns functions unchanged (A/B runs)\n"
    "  --compile-all           every Lua function that runs goes through tc.compile: the script,\n"
    "                          -e chunks, and the Lua functions they reach (capture/README.md)\n"
    "  --log=LIST              as TC_LOGS: comma-separated graph_breaks, recompiles, guards,\n"
    "                          graph_code, skips, aot_graphs, output_code, perf_hints, all\n"
    "                          (stderr)\n"
    "  --cache-dir=DIR         compiled-kernel cache (default $TC_CACHE_DIR or ~/.cache/tc)\n"
    "  --no-cache              do not read or write the kernel cache\n"
    "  --nproc-per-node G      run G ranks of the script (RANK, LOCAL_RANK, GROUP_RANK, WORLD_SIZE,\n"
    "                          LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set as torchrun does) for\n"
    "                          tc.distributed; a failing rank stops the others (on every node) and\n"
    "                          its exit status is tcrun's\n"
    "  --nnodes N, --node-rank R   run on N machines, this one node R (0..N-1): start one tcrun on\n"
    "                          each with the same --nnodes, --nproc-per-node, --master-addr and\n"
    "                          --master-port; RANK = R*G + LOCAL_RANK, WORLD_SIZE = N*G\n"
    "  --master-addr A, --master-port P   one node: the ranks' store (default 127.0.0.1, a free\n"
    "                          port); several: node 0's address and launcher port (default\n"
    "                          127.0.0.1:29500), the ranks' store on a port node 0 picks\n"
    "  --rdzv-timeout S        several nodes: seconds they may take to meet (default 300)\n"
    "                          (these launcher options may be spelt with '_' too; without the\n"
    "                          option, tcrun reads PET_NNODES, NNODES or SLURM_NNODES; PET_NODE_RANK,\n"
    "                          NODE_RANK or SLURM_NODEID; PET_MASTER_ADDR or MASTER_ADDR;\n"
    "                          PET_MASTER_PORT or MASTER_PORT, the first one set)\n"
    "  --bytecode FILE         print FILE's Lua bytecode like `luac5.4 -l -l` and exit\n"
    "  --split-check FILE      run the resume-synthesis check harness on FILE and exit\n"
    "  -e STAT                 execute string STAT (before the script)\n"
    "  -l MOD                  require library MOD into global MOD (-l g=MOD: into global g)\n"
    "  -W                      turn Lua warnings on\n"
    "  -v, --version           print tc's version with Lua's, LLVM's and CUDA's\n"
    "  -h, --help              print this help\n"
    "  --                      stop handling options\n"
    "Settings reach scripts as tc.config (backend, mode, fullgraph, eager, explain, log, cache_dir,\n"
    "no_cache), which also holds capture's limits: recompile_limit (8 entries per function, then it\n"
    "runs uncompiled with one warning), trace_max_instructions (50000), trace_max_depth (64 inlined\n"
    "calls) and trace_max_iterations (5000 unrolled loop iterations): past one, the trace ends with\n"
    "a graph break (TC0405, TC0406, TC0410) and the rest runs eagerly.\n"
    "Environment: TC_LOGS (as --log), TC_DEBUG=1|2|4 (breaks and recompiles, graphs, guards),\n"
    "TC_CACHE_DIR, TC_CACHE_MAX_MB (the kernel cache's size cap, default 2048; 0: none),\n"
    "TC_GUARD_FASTPATH=0 (guards checked in full on every call).\n";

struct Options {
  std::vector<std::pair<char, std::string>> pre;  // -e / -l in command-line order
  std::string explain, backend, device, mode, log, cache_dir, bytecode, split_check;
  std::string nproc, nnodes, node_rank, master_addr, master_port, rdzv_timeout;  // the launcher's (vm/launcher.h)
  std::vector<std::string> child_args;          // argv[1..] without the launcher's options
  bool fullgraph = false, eager = false, compile_all = false, no_cache = false, warnings = false, version = false, help = false;
  int script = 0;  // index of the script in argv, 0 if none
  bool script_stdin = false;  // the script is "-" (not after "--"): read it from standard input
};

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string usage() {
  std::string s = kUsage;
  for (auto [key, names] : {std::pair{"{backends}", tc::backends::names()},
                            std::pair{"{modes}", tc::backends::modes()}})
    s.replace(s.find(key), std::strlen(key), joined(names));
  return s;
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "tcrun: %s\n%s", msg.c_str(), usage().c_str());
  std::exit(2);
}

bool one_of(const std::string& v, const std::vector<std::string>& allowed) {
  for (const std::string& a : allowed)
    if (v == a) return true;
  return false;
}

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  // "--name=VALUE" or "--name VALUE"
  auto value = [&](const std::string& a, const char* name, std::string* out) {
    std::string n = std::string("--") + name;
    if (a.rfind(n + "=", 0) == 0) {
      *out = a.substr(n.size() + 1);
      return true;
    }
    if (a == n) {
      if (i + 1 >= argc) usage_error("option '" + n + "' needs a value");
      *out = argv[++i];
      return true;
    }
    return false;
  };
  for (; i < argc; i++) {
    std::string a = argv[i];
    int first = i;
    if (value(a, "nproc-per-node", &o.nproc) || value(a, "nproc_per_node", &o.nproc) ||
        value(a, "nnodes", &o.nnodes) || value(a, "node-rank", &o.node_rank) ||
        value(a, "node_rank", &o.node_rank) || value(a, "master-addr", &o.master_addr) ||
        value(a, "master_addr", &o.master_addr) || value(a, "master-port", &o.master_port) ||
        value(a, "master_port", &o.master_port) || value(a, "rdzv-timeout", &o.rdzv_timeout) ||
        value(a, "rdzv_timeout", &o.rdzv_timeout))
      continue;
    if (a == "--") {
      o.child_args.push_back(a);
      i++;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;
    if (a == "-e" || a == "-l") {
      if (i + 1 >= argc) usage_error("'" + a + "' needs an argument");
      o.pre.emplace_back(a[1], argv[++i]);
    } else if ((a.rfind("-e", 0) == 0 || a.rfind("-l", 0) == 0) && a[1] != '-') {
      o.pre.emplace_back(a[1], a.substr(2));
    } else if (a == "-v" || a == "--version") {
      o.version = true;
    } else if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "-W") {
      o.warnings = true;
    } else if (a == "--explain") {
      o.explain = "text";
    } else if (a.rfind("--explain=", 0) == 0) {
      o.explain = a.substr(10);
      if (!one_of(o.explain, {"text", "json"})) usage_error("--explain takes text or json, not '" + o.explain + "'");
    } else if (a == "--fullgraph") {
      o.fullgraph = true;
    } else if (a == "--eager") {
      o.eager = true;
    } else if (a == "--compile-all") {
      o.compile_all = true;
    } else if (a == "--no-cache") {
      o.no_cache = true;
    } else if (value(a, "backend", &o.backend)) {
      if (!one_of(o.backend, tc::backends::names()))
        usage_error("unknown backend '" + o.backend + "' (" + joined(tc::backends::names()) + ")");
    } else if (value(a, "device", &o.device)) {
      if (!one_of(o.device, {"cpu", "cuda"}) && o.device.rfind("cuda:", 0) != 0)
        usage_error("unknown device '" + o.device + "' (cpu, cuda, cuda:N)");
    } else if (value(a, "mode", &o.mode)) {
      if (!one_of(o.mode, tc::backends::modes()))
        usage_error("unknown mode '" + o.mode + "' (" + joined(tc::backends::modes()) + ")");
    } else if (value(a, "log", &o.log)) {
      if (std::string err = tc::capture::check_logs(o.log); !err.empty()) usage_error("--log: " + err);
    } else if (value(a, "cache-dir", &o.cache_dir) || value(a, "bytecode", &o.bytecode) ||
               value(a, "split-check", &o.split_check)) {
    } else {
      usage_error("unrecognized option '" + a + "'");
    }
    for (int k = first; k <= i; k++) o.child_args.push_back(argv[k]);
  }
  if (i < argc) o.script = i;
  // as lua5.4: "-" is standard input, except after "--" where it names a file
  o.script_stdin = o.script && std::strcmp(argv[i], "-") == 0 && std::strcmp(argv[i - 1], "--") != 0;
  for (int k = i; k < argc; k++) o.child_args.push_back(argv[k]);
  return o;
}

// A launcher setting: the option's value, else the first of `vars` set in the environment (for
// SLURM-style launchers); *from names the one used, for messages.
std::string setting(const std::string& option, const char* flag, std::initializer_list<const char*> vars,
                    std::string* from) {
  *from = flag;
  if (!option.empty()) return option;
  for (const char* v : vars)
    if (const char* e = std::getenv(v); e && *e) {
      *from = v;
      return e;
    }
  return "";
}

// An integer setting in [lo, hi]; `what` says what it takes.
int int_setting(const std::string& v, const std::string& from, long lo, long hi, const char* what) {
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || n < lo || n > hi) usage_error(from + " takes " + what + ", not '" + v + "'");
  return (int)n;
}

tc::vm::LaunchOptions launch_options(const Options& o) {
  tc::vm::LaunchOptions lo;
  std::string from;
  lo.nproc = int_setting(o.nproc, "--nproc-per-node", 1, 1 << 16, "a positive integer");
  std::string v = setting(o.nnodes, "--nnodes", {"PET_NNODES", "NNODES", "SLURM_NNODES"}, &from);
  if (!v.empty()) lo.nnodes = int_setting(v, from, 1, 1 << 16, "a positive integer");
  std::string nnodes_from = v.empty() ? "the default --nnodes" : from;
  v = setting(o.node_rank, "--node-rank", {"PET_NODE_RANK", "NODE_RANK", "SLURM_NODEID"}, &from);
  if (!v.empty()) lo.node_rank = int_setting(v, from, 0, 1 << 16, "a node rank (0, 1, ...)");
  if (lo.node_rank >= lo.nnodes)
    usage_error(from + " " + std::to_string(lo.node_rank) + " is not below " + nnodes_from + " " + std::to_string(lo.nnodes) +
                " (node ranks are 0.." + std::to_string(lo.nnodes - 1) + ")");
  lo.master_addr = setting(o.master_addr, "--master-addr", {"PET_MASTER_ADDR", "MASTER_ADDR"}, &from);
  v = setting(o.master_port, "--master-port", {"PET_MASTER_PORT", "MASTER_PORT"}, &from);
  if (!v.empty()) lo.master_port = int_setting(v, from, 1, 65535, "a port (1..65535)");
  if (!o.rdzv_timeout.empty()) {
    char* end = nullptr;
    lo.rdzv_timeout_s = std::strtod(o.rdzv_timeout.c_str(), &end);
    if (*end || !(lo.rdzv_timeout_s > 0) || lo.rdzv_timeout_s > 1e6)
      usage_error("--rdzv-timeout takes seconds (a positive number), not '" + o.rdzv_timeout + "'");
  }
  return lo;
}

std::string version_string() {
  std::string s = std::string("tc ") + TC_VERSION + " (" + LUA_RELEASE + ", LLVM " + LLVM_VERSION_STRING;
#ifdef TC_HAVE_CUDA
  s += ", CUDA " + std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
#else
  s += ", built without CUDA";
#endif
  return s + ")";
}

// tc.config from the command line; --device also sets the default device for new tensors.
void configure(tc::vm::Runtime& rt, const Options& o) {
  tc::vm::Ref set = rt.run_string("return function(k, v) require('tc').config[k] = v end", "=(tcrun)")[0];
  const std::pair<const char*, const std::string*> strings[] = {
      {"backend", &o.backend}, {"mode", &o.mode},           {"log", &o.log},
      {"cache_dir", &o.cache_dir}, {"explain", &o.explain}, {"device", &o.device}};
  for (auto& [key, v] : strings)
    if (!v->empty()) set(key, *v);
  if (o.fullgraph) set("fullgraph", true);
  if (o.eager) set("eager", true);
  if (o.compile_all) set("compile_all", true);
  if (o.no_cache) set("no_cache", true);
  // The code generators' disk cache (cpu and cuda kernels) reads these, not tc.config; eager CUDA
  // kernels' cubin cache (stdlib/cuda/nvrtc.cpp) and child processes read TC_CACHE_DIR.
  if (!o.cache_dir.empty()) tc::backends::cpu::set_cache_dir(o.cache_dir), setenv("TC_CACHE_DIR", o.cache_dir.c_str(), 1);
  if (o.no_cache) tc::backends::cpu::set_cache_dir(""), setenv("TC_CACHE_DIR", "", 1);
  if (!o.device.empty()) rt.global("require")("tc")[0]["set_default_device"](o.device);
}

// The global `arg`, as lua5.4 builds it: arg[0] the script, arg[1..] its arguments, negative
// indices the interpreter and its options.
void set_arg_table(lua_State* L, int argc, char** argv, int script) {
  int base = script ? script : argc;
  lua_createtable(L, argc - base, base + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - base);
  }
  lua_setglobal(L, "arg");
}

// The script of `tcrun -`: all of standard input; a first line starting with '#' (a shebang) is
// skipped as luaL_loadfile does, its newline kept so that line numbers stay right.
std::string read_stdin() {
  std::string code;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, stdin)) > 0;) code.append(buf, n);
  if (std::ferror(stdin)) throw tc::vm::LuaError("cannot read stdin: " + std::string(std::strerror(errno)), "", "");
  if (!code.empty() && code[0] == '#') code.erase(0, code.find('\n') == std::string::npos ? code.size() : code.find('\n'));
  return code;
}

// --backend=cuda without a usable GPU is refused at startup, as tc.compile(f, {backend = "cuda"})
// is (stdlib/lua/tc._api.lua), not at the first compiled call; compile-only mode (kernels compiled
// by NVRTC, never launched) needs no GPU.
void check_backend_device(const Options& o) {
  if (o.backend != "cuda") return;
  std::string why = "tc was built without the CUDA toolkit";
#ifdef TC_HAVE_CUDA
  if (tc::cuda::compile_only() || tc::cuda::is_available(&why)) return;
#endif
  std::fprintf(stderr,
               "tcrun: --backend=cuda needs a CUDA GPU, and none is available (%s); use --backend=tc, which compiles for the device the tensors are on\n",
               why.c_str());
  std::exit(2);
}

void print_error(const tc::vm::LuaError& e) {
  std::fprintf(stderr, "%s\n", e.what());
  if (!e.traceback().empty()) std::fprintf(stderr, "%s\n", e.traceback().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (o.version) std::printf("%s\n", version_string().c_str());
  if (!o.bytecode.empty()) return tc::vm::print_bytecode(o.bytecode.c_str(), std::cout);
  check_backend_device(o);
  if (o.nproc.empty()) {
    // the launcher's other options alone would be ignored (the environment's are read only under
    // --nproc-per-node: every rank has MASTER_ADDR and MASTER_PORT)
    for (auto [name, v] : {std::pair{"--nnodes", &o.nnodes}, {"--node-rank", &o.node_rank}, {"--master-addr", &o.master_addr},
                           {"--master-port", &o.master_port}, {"--rdzv-timeout", &o.rdzv_timeout}})
      if (!v->empty()) usage_error(std::string(name) + " needs --nproc-per-node G (the ranks to run on this node)");
  } else {
    tc::vm::LaunchOptions lo = launch_options(o);
    lo.argv0 = argv[0];
    if (!o.script) usage_error("no script given");
    if (o.script_stdin) usage_error("--nproc-per-node runs the script once a rank: it cannot read it from stdin ('-')");
    return tc::vm::launch_ranks(lo, o.child_args);
  }
  try {
    tc::vm::Runtime rt("tcrun");
    tc::vm::install_compiler(rt);  // tc.compile, tc.compiler, tc.export, tc.aot
    if (!o.split_check.empty()) return tc::vm::split_check(rt.state(), o.split_check.c_str(), std::cout);
    if (!o.script && o.pre.empty()) {
      if (o.version) return 0;
      usage_error("no script given");
    }
    if (o.warnings) lua_warning(rt.state(), "@on", 0);
    configure(rt, o);
    set_arg_table(rt.state(), argc, argv, o.script);
    // --compile-all: the script and -e chunks are loaded as usual and run as tc.compile(chunk)
    std::optional<tc::vm::Ref> compiled_run;
    if (o.compile_all && !o.eager) {
      tc::capture::set_compile_all(rt.state(), true);
      compiled_run = rt.run_string(R"LUA(local compile = require('tc').compile
return function(kind, src, name, ...)
  local chunk, err
  if kind == "file" then chunk, err = loadfile(src) else chunk, err = load(src, name) end
  if not chunk then error(err, 0) end
  return compile(chunk)(...)
end)LUA",
                                   "=(tcrun)")[0];
    }
    for (auto& [kind, text] : o.pre) {
      if (kind == 'e' && compiled_run) {
        (*compiled_run)("string", text, "=(command line)");
      } else if (kind == 'e') {
        rt.run_string(text, "=(command line)");
      } else {
        size_t eq = text.find('=');
        std::string global = eq == std::string::npos ? text : text.substr(0, eq);
        std::string mod = eq == std::string::npos ? text : text.substr(eq + 1);
        rt.set_global(global, rt.require(mod));
      }
    }
    if (o.script) {
      std::vector<tc::vm::Arg> args;
      for (int i = o.script + 1; i < argc; i++) args.emplace_back(std::string(argv[i]));
      const std::string code = o.script_stdin ? read_stdin() : "";
      if (compiled_run) {
        std::vector<tc::vm::Arg> all = {std::string("file"), std::string(argv[o.script]), std::string()};
        if (o.script_stdin) all = {std::string("string"), code, std::string("=stdin")};
        all.insert(all.end(), args.begin(), args.end());
        compiled_run->call(all);
      } else if (o.script_stdin) {
        rt.run_string(code, "=stdin", args);
      } else {
        rt.run_file(argv[o.script], args);
      }
    }
    // A process group the script left open is closed as destroy_process_group does: rank 0 (which
    // serves the store) then waits for the other ranks to finish with it instead of leaving them a
    // "rank 0 is gone" in their last collective. Errors (a rank that already left) are ignored.
    rt.run_string("local d = package.loaded['tc.distributed'] "
                  "if d and d.is_initialized() then pcall(d.destroy_process_group) end",
                  "=(tcrun exit)");
    if (!o.explain.empty()) tc::capture::print_explain(rt.state(), o.explain, stderr);
  } catch (const tc::vm::LuaError& e) {
    print_error(e);
    return 1;
  } catch (const tc::Error& e) {
    std::fprintf(stderr, "tcrun: %s\n", e.what());
    return 1;
  }
  return 0;
}
