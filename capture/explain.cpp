// The explain report (LUA_API.md §7): text, JSON and the Lua table of tc.compiler.explain.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "capture_state.h"
#include "tc/capture.h"

namespace tc::capture {

static int op_count(const Report& r) {
  int n = 0;
  for (const auto& g : r.graphs) n += int(g.ops.size());
  return n;
}

// The backend's call split into its parts: lower, codegen, and the rest (the backend's compiler,
// LLVM or NVRTC, and whatever else it did), so that the parts add up to the total.
static double rest_ms(const Report::TimeRec& t) {
  return std::max(0.0, t.backend_ms - t.lower_ms - t.codegen_ms);
}

// cached_plans: the graph's lowered form came from the disk cache (a warm start lowers nothing).
static std::string kernels_line(const CompileReport& b) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "%d kernels, %d distinct (%d from cache), %d fallback nodes%s",
                        b.kernels, b.distinct_kernels, b.cached_kernels, b.fallback_nodes,
                        b.cached_plans ? ", lowered graph from cache" : "");
  if (b.tuned_kernels > 0)  // mode = "max-autotune"
    std::snprintf(buf + n, sizeof buf - n, ", %d launches tuned (%d from cache) in %.1f ms", b.tuned_kernels,
                  b.tuned_cached, b.tune_ms);
  return buf;
}

static nlohmann::json to_json(const Report& r) {
  using nlohmann::json;
  json j;
  j["graph_count"] = r.graphs.size();
  j["graph_break_count"] = r.breaks.size();
  j["op_count"] = op_count(r);
  json reasons = json::array();
  for (const GraphBreak& b : r.breaks) {
    json x{{"reason", b.reason()},
           {"code", break_info(b.code).code},
           {"hint", break_info(b.code).hint},
           {"action", b.action}};
    if (!b.stack.empty()) x["file"] = b.stack.back().file, x["line"] = b.stack.back().line;
    json stack = json::array();
    for (const StackFrame& f : b.stack)
      stack.push_back({{"file", f.file},
                       {"line", f.line},
                       {"function", f.function},
                       {"source", f.source_line}});
    x["user_stack"] = stack;
    reasons.push_back(x);
  }
  j["break_reasons"] = reasons;
  json ops = json::array();
  for (const auto& g : r.graphs) ops.push_back(g.ops);
  j["ops_per_graph"] = ops;
  json kernels = json::array();
  for (const auto& g : r.graphs)
    kernels.push_back({{"kernels", g.backend.kernels},
                       {"distinct_kernels", g.backend.distinct_kernels},
                       {"cached_kernels", g.backend.cached_kernels},
                       {"tuned_kernels", g.backend.tuned_kernels},
                       {"tuned_cached", g.backend.tuned_cached},
                       {"tune_ms", g.backend.tune_ms},
                       {"cached_plans", g.backend.cached_plans},
                       {"fallback_nodes", g.backend.fallback_nodes}});
  j["kernels_per_graph"] = kernels;
  json guards = json::array();
  for (const auto& g : r.guards) guards.push_back({{"function", g.function}, {"guards", g.lines()}});
  j["guards"] = guards;
  json rec = json::array();
  for (const auto& x : r.recompiles)
    rec.push_back({{"function", x.function}, {"count", x.count}, {"reason", x.reason}});
  j["recompiles"] = rec;
  json times = json::array();
  for (const auto& t : r.times)
    times.push_back({{"function", t.function},
                     {"trace_ms", t.trace_ms},
                     {"lower_ms", t.lower_ms},
                     {"codegen_ms", t.codegen_ms},
                     {"backend_compile_ms", rest_ms(t)},
                     {"total_ms", t.trace_ms + t.backend_ms}});
  j["compile_times"] = times;
  j["uncompiled"] = r.fallbacks;
  j["training"] = r.training;
  json caches = json::array();
  for (const auto& c : r.caches)
    caches.push_back({{"function", c.function},
                      {"entries", c.entries},
                      {"cache_hits", c.hits},
                      {"recompile_limit_reached", c.gave_up}});
  j["cache"] = caches;
  return j;
}

static std::string to_text(const Report& r) {
  std::string s;
  s += "Graph Count: " + std::to_string(r.graphs.size()) + "\n";
  s += "Graph Break Count: " + std::to_string(r.breaks.size()) + "\n";
  s += "Op Count: " + std::to_string(op_count(r)) + "\n";
  s += "Break Reasons:\n";
  for (size_t i = 0; i < r.breaks.size(); i++) {
    const GraphBreak& b = r.breaks[i];
    s += "  Break Reason " + std::to_string(i + 1) + ":\n";
    s += "    Reason: " + b.reason() + "\n";
    s += "    User Stack:\n";
    for (const StackFrame& f : b.stack) {
      s += "      " + f.file + ":" + std::to_string(f.line) + " in " + f.function + "\n";
      if (!f.source_line.empty()) s += "        " + f.source_line + "\n";
    }
    s += "    Hint: " + std::string(break_info(b.code).hint) + "\n";
    if (!b.action.empty()) s += "    Action: " + b.action + "\n";
  }
  s += "Ops per Graph:\n";
  for (size_t i = 0; i < r.graphs.size(); i++) {
    s += "  Ops " + std::to_string(i + 1) + ": ";
    for (size_t k = 0; k < r.graphs[i].ops.size(); k++) s += (k ? ", " : "") + r.graphs[i].ops[k];
    s += "\n";
  }
  s += "Kernels per Graph:\n";
  for (size_t i = 0; i < r.graphs.size(); i++)
    s += "  Graph " + std::to_string(i + 1) + ": " + kernels_line(r.graphs[i].backend) + "\n";
  s += "Guards:\n";
  for (const auto& g : r.guards) {
    s += "  " + g.function + ":\n";
    for (const std::string& l : g.lines()) s += "    " + l + "\n";
  }
  s += "Recompiles:\n";
  for (const auto& x : r.recompiles) {
    std::string why = x.reason;  // a list of each entry's failing guard goes one level deeper
    for (size_t at = 0; (at = why.find("\n  - ", at)) != std::string::npos; at += 5)
      why.insert(at + 1, "    ");
    s += "  " + x.function + ": recompile " + std::to_string(x.count) + ", triggered by " + why +
         "\n";
  }
  s += "Compile Times:\n";
  for (const auto& t : r.times) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "  %s: trace %.3f ms, lower %.3f ms, codegen %.3f ms, backend compile %.3f ms, "
                  "total %.3f ms\n",
                  t.function.c_str(), t.trace_ms, t.lower_ms, t.codegen_ms, rest_ms(t),
                  t.trace_ms + t.backend_ms);
    s += buf;
  }
  s += "Cache:\n";
  for (const auto& c : r.caches)
    s += "  " + c.function + ": " + std::to_string(c.entries) +
         (c.entries == 1 ? " entry, " : " entries, ") + std::to_string(c.hits) + " cache hits" +
         (c.gave_up ? ", recompile limit reached" : "") + "\n";
  if (!r.training.empty()) {
    s += "Compiled Training:\n";
    for (const std::string& t : r.training) s += "  " + t + "\n";
  }
  if (!r.fallbacks.empty()) {
    s += "Uncompiled:\n";
    for (const std::string& f : r.fallbacks) s += "  " + f + "\n";
  }
  return s;
}

std::string report_text(const Report& r) {
  return to_text(r);
}
std::string report_json(const Report& r) {
  // Lua strings are bytes: guards on non-UTF-8 strings (pattern tests, binary data) print with
  // U+FFFD where a byte is not UTF-8, instead of throwing out of tcrun
  return to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

static void push_strings(lua_State* L, const std::vector<std::string>& v) {
  lua_createtable(L, int(v.size()), 0);
  for (size_t i = 0; i < v.size(); i++) {
    lua_pushstring(L, v[i].c_str());
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
}

// Pushes the report as the Lua table of LUA_API.md §7.
void push_report(lua_State* L, const Report& r) {
  lua_createtable(L, 0, 10);
  lua_pushinteger(L, lua_Integer(r.graphs.size()));
  lua_setfield(L, -2, "graph_count");
  lua_pushinteger(L, lua_Integer(r.breaks.size()));
  lua_setfield(L, -2, "graph_break_count");
  lua_pushinteger(L, op_count(r));
  lua_setfield(L, -2, "op_count");
  lua_createtable(L, int(r.breaks.size()), 0);
  for (size_t i = 0; i < r.breaks.size(); i++) {
    const GraphBreak& b = r.breaks[i];
    lua_createtable(L, 0, 6);
    lua_pushstring(L, b.reason().c_str());
    lua_setfield(L, -2, "reason");
    lua_pushstring(L, break_info(b.code).code);
    lua_setfield(L, -2, "code");
    lua_pushstring(L, break_info(b.code).hint);
    lua_setfield(L, -2, "hint");
    lua_pushstring(L, b.action.c_str());
    lua_setfield(L, -2, "action");
    if (!b.stack.empty()) {
      lua_pushstring(L, b.stack.back().file.c_str());
      lua_setfield(L, -2, "file");
      lua_pushinteger(L, b.stack.back().line);
      lua_setfield(L, -2, "line");
      lua_pushstring(L, b.stack.back().source_line.c_str());
      lua_setfield(L, -2, "source_line");
    }
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
  lua_setfield(L, -2, "break_reasons");
  lua_createtable(L, int(r.graphs.size()), 0);
  for (size_t i = 0; i < r.graphs.size(); i++) {
    lua_createtable(L, int(r.graphs[i].ops.size()), 0);
    for (size_t k = 0; k < r.graphs[i].ops.size(); k++) {
      lua_pushstring(L, r.graphs[i].ops[k].c_str());
      lua_rawseti(L, -2, lua_Integer(k) + 1);
    }
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
  lua_setfield(L, -2, "ops_per_graph");
  lua_createtable(L, int(r.graphs.size()), 0);
  for (size_t i = 0; i < r.graphs.size(); i++) {
    const CompileReport& b = r.graphs[i].backend;
    lua_createtable(L, 0, 5);
    const std::pair<const char*, int> fields[] = {{"kernels", b.kernels},
                                                  {"distinct_kernels", b.distinct_kernels},
                                                  {"cached_kernels", b.cached_kernels},
                                                  {"cached_plans", b.cached_plans},
                                                  {"fallback_nodes", b.fallback_nodes},
                                                  {"tuned_kernels", b.tuned_kernels},
                                                  {"tuned_cached", b.tuned_cached}};
    for (auto& [k, v] : fields) {
      lua_pushinteger(L, v);
      lua_setfield(L, -2, k);
    }
    lua_pushnumber(L, b.tune_ms);
    lua_setfield(L, -2, "tune_ms");
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
  lua_setfield(L, -2, "kernels_per_graph");
  lua_createtable(L, int(r.guards.size()), 0);
  for (size_t i = 0; i < r.guards.size(); i++) {
    lua_createtable(L, 0, 2);
    lua_pushstring(L, r.guards[i].function.c_str());
    lua_setfield(L, -2, "function");
    const std::vector<std::string> lines = r.guards[i].lines();
    lua_createtable(L, int(lines.size()), 0);
    for (size_t k = 0; k < lines.size(); k++) {
      lua_pushstring(L, lines[k].c_str());
      lua_rawseti(L, -2, lua_Integer(k) + 1);
    }
    lua_setfield(L, -2, "guards");
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
  lua_setfield(L, -2, "guards");
  lua_createtable(L, int(r.recompiles.size()), 0);
  for (size_t i = 0; i < r.recompiles.size(); i++) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, r.recompiles[i].function.c_str());
    lua_setfield(L, -2, "function");
    lua_pushinteger(L, r.recompiles[i].count);
    lua_setfield(L, -2, "count");
    lua_pushstring(L, r.recompiles[i].reason.c_str());
    lua_setfield(L, -2, "reason");
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
  lua_setfield(L, -2, "recompiles");
  lua_createtable(L, int(r.times.size()), 0);
  for (size_t i = 0; i < r.times.size(); i++) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, r.times[i].function.c_str());
    lua_setfield(L, -2, "function");
    lua_pushnumber(L, r.times[i].trace_ms);
    lua_setfield(L, -2, "trace_ms");
    const std::pair<const char*, double> parts[] = {{"lower_ms", r.times[i].lower_ms},
                                                    {"codegen_ms", r.times[i].codegen_ms},
                                                    {"backend_compile_ms", rest_ms(r.times[i])}};
    for (auto& [k, v] : parts) {
      lua_pushnumber(L, v);
      lua_setfield(L, -2, k);
    }
    lua_pushnumber(L, r.times[i].trace_ms + r.times[i].backend_ms);
    lua_setfield(L, -2, "total_ms");
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
  lua_setfield(L, -2, "compile_times");
  push_strings(L, r.training);
  lua_setfield(L, -2, "training");
  push_strings(L, r.fallbacks);
  lua_setfield(L, -2, "uncompiled");
  lua_createtable(L, int(r.caches.size()), 0);
  for (size_t i = 0; i < r.caches.size(); i++) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, r.caches[i].function.c_str());
    lua_setfield(L, -2, "function");
    lua_pushinteger(L, r.caches[i].entries);
    lua_setfield(L, -2, "entries");
    lua_pushinteger(L, r.caches[i].hits);
    lua_setfield(L, -2, "cache_hits");
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
  lua_setfield(L, -2, "cache");
}

std::string explain_report(const std::string& format) {
  Report& r = state().report;
  r.caches = cache_records();
  return format == "json" ? report_json(r) + "\n" : report_text(r);
}

void print_explain(lua_State*, const std::string& format, FILE* out) {
  std::string s = explain_report(format);
  std::fputs(s.c_str(), out);
}

}  // namespace tc::capture
