-- What the tc benchmark scripts share (bench/codegen_cpu.lua, codegen_cuda.lua,
-- compare_torch_cuda.lua): the "key value" output line, the compile report of a first call, and
-- the 10-op pointwise chain every code-generation benchmark times (the same ops everywhere, so
-- figures of the CPU and CUDA benchmarks and of PyTorch's peers compare).
-- Loaded with package.path = "bench/?.lua;" .. package.path; local common = require "bench_common".
local tc = require "tc"
local common = {}

-- One "key value" line: integers as integers, other numbers with 4 decimals.
function common.say(key, value)
  print(("%s " .. (math.type(value) == "integer" and "%d" or "%.4f")):format(key, value))
  io.stdout:flush()
end

-- The median of a list of numbers (sorts it in place).
function common.median(t)
  table.sort(t)
  local n = #t
  return n % 2 == 1 and t[(n + 1) // 2] or (t[n // 2] + t[n // 2 + 1]) / 2
end

-- The first call's time and the compiler's counters (tc.compiler.stats()) under `prefix`.
function common.report_compile(prefix, ms, s)
  local say = common.say
  say(prefix .. "_first_call_ms", ms)
  say(prefix .. "_trace_ms", s.trace_ms)
  say(prefix .. "_backend_compile_ms", s.backend_compile_ms)
  say(prefix .. "_lower_ms", s.lower_ms)  -- on a warm start: reading the lowered graph from disk
  say(prefix .. "_compile_ms", s.compile_ms)
  say(prefix .. "_kernels", s.kernels)
  say(prefix .. "_distinct_kernels", s.distinct_kernels)
  say(prefix .. "_cached_kernels", s.cached_kernels)
  say(prefix .. "_cached_plans", s.cached_plans)
  say(prefix .. "_fallback_nodes", s.fallback_nodes)
end

-- Ten pointwise ops: one kernel when fused (reads and writes each element once).
function common.chain(v)
  v = v * 1.5 + 0.25
  v = tc.relu(v) - 0.5
  v = tc.sigmoid(v) * v
  v = tc.tanh(v) + v
  return tc.abs(v) * 0.75
end

-- Ten cheap pointwise ops (no exp, no division): a fused kernel of these is bound by memory, where
-- common.chain's sigmoid and tanh make it bound by arithmetic on a CPU (CPU benchmarks time both).
function common.cheap_chain(v)
  v = v * 1.5 + 0.25
  v = tc.relu(v) - 0.5
  v = tc.abs(v) * v
  v = tc.clamp(v, -2, 2) + v
  return tc.neg(v) * 0.75
end

return common
