-- Code generation on the CPU (issue 11's Measure section), tc's side: compiled with a backend next
-- to eager, in one process. bench/run_codegen_cpu.sh runs its sections and PyTorch's
-- (bench/peer_torch_codegen.py) and prints the ratios.
-- Usage: tcrun bench/codegen_cpu.lua BACKEND SECTION [THREADS]
--   kernels        10-op pointwise chains on 16M floats (bench_common.chain, with sigmoid and tanh,
--                  and cheap_chain), copies, softmax and layer_norm over [4096, 1024]
--   seed_whole     the 64-layer seed model compiled whole: first call (compile), then per call
--   seed_regional  the same with each Layer compiled (regional): first call, then per call
-- Prints "key value" lines (times in ms: best of N, the least disturbed figure on a shared machine).
local tc = require "tc"
package.path = "scripts/models/?.lua;bench/?.lua;" .. package.path
local common = require "bench_common"

local backend, section = arg[1], arg[2]
assert(backend and section, "usage: tcrun bench/codegen_cpu.lua BACKEND SECTION [THREADS]")
tc.set_num_threads(tonumber(arg[3]) or tc.get_num_threads())
tc.manual_seed(0)
local clock = tc.utils.perf_counter

local function best_ms(f, iters, ...)
  f(...)  -- warm-up
  local best = math.huge
  for _ = 1, iters do
    local t0 = clock()
    f(...)
    best = math.min(best, (clock() - t0) * 1e3)
  end
  return best
end

local say = common.say

-- The first call of a compiled function: trace + backend compile + one run; and the parts.
local function first_call(cf, ...)
  tc.compiler.reset()
  local t0 = clock()
  cf(...)
  local ms = (clock() - t0) * 1e3
  return ms, tc.compiler.stats()
end

local report_compile = common.report_compile

local sections = {}

function sections.kernels()
  tc.no_grad(function()
    -- ten pointwise ops over 16M float32 (64 MiB in, 64 MiB out once fused), next to the machine's
    -- copy rate measured in the same rounds: copy_ into an existing tensor (memcpy), clone (a new
    -- output each call, as a compiled graph allocates its output) and a plain compiled one-op
    -- kernel (-v: a copy with the chain's loads, stores, threads and output allocation). The copy
    -- rate is the best of them. Each round runs every candidate once, so load on a shared machine
    -- falls on all of them alike; the figures are each one's best round.
    local n = 16 * 1024 * 1024
    local x = tc.randn(n)
    local chain = common.chain
    local cchain = tc.compile(chain, {backend = backend})
    local ccheap = tc.compile(common.cheap_chain, {backend = backend})
    local ccopy = tc.compile(function(v) return -v end, {backend = backend})
    local y = tc.empty(n)
    local timed = {
      {"copy_ms", function() y:copy_(x) end},
      {"clone_ms", function() return x:clone() end},
      {"compiled_copy_ms", function() return ccopy(x) end},
      {"chain_compiled_ms", function() return cchain(x) end},
      {"cheap_chain_compiled_ms", function() return ccheap(x) end},
    }
    local best = {}
    for _, t in ipairs(timed) do
      t[2]()  -- warm-up (compiles)
      best[t[1]] = math.huge
    end
    say("chain_fallback_nodes", tc.compiler.stats().fallback_nodes)
    for _ = 1, 15 do
      for _, t in ipairs(timed) do
        local t0 = clock()
        t[2]()
        best[t[1]] = math.min(best[t[1]], (clock() - t0) * 1e3)
      end
    end
    for _, t in ipairs(timed) do say(t[1], best[t[1]]) end
    local copy = math.min(best.copy_ms, best.clone_ms, best.compiled_copy_ms)
    say("chain_pct_of_copy_rate", 100 * copy / best.chain_compiled_ms)
    say("cheap_chain_pct_of_copy_rate", 100 * copy / best.cheap_chain_compiled_ms)
    say("chain_eager_ms", best_ms(chain, 3, x))
    say("cheap_chain_eager_ms", best_ms(common.cheap_chain, 3, x))
    -- softmax and layer_norm over the rows of [4096, 1024]
    local m = tc.randn(4096, 1024)
    local w, b = tc.randn(1024), tc.randn(1024)
    local function softmax(v) return tc.softmax(v, -1) end
    local function layer_norm(v) return tc.layer_norm(v, {1024}, w, b) end
    say("softmax_eager_ms", best_ms(softmax, 20, m))
    say("softmax_compiled_ms", best_ms(tc.compile(softmax, {backend = backend}), 20, m))
    say("layer_norm_eager_ms", best_ms(layer_norm, 20, m))
    say("layer_norm_compiled_ms", best_ms(tc.compile(layer_norm, {backend = backend}), 20, m))
  end)
end

local function seed(regional)
  local seed_layers = require "seed_layers"
  tc.config.backend = backend  -- Module:compile (regional) uses the configured backend
  local model = seed_layers.Model({regional = regional})
  model:eval()
  local plain = seed_layers.Model()
  plain:load_state_dict(model:state_dict())
  plain:eval()
  local x = tc.randn(10, 10)
  tc.no_grad(function()
    local cm = regional and model or tc.compile(model, {backend = backend})
    local prefix = regional and "seed_regional" or "seed_whole"
    report_compile(prefix, first_call(cm, x))
    say(prefix .. "_compiled_ms", best_ms(cm, 200, x))
    say(prefix .. "_eager_ms", best_ms(plain, 200, x))
  end)
end
function sections.seed_whole() seed(false) end
function sections.seed_regional() seed(true) end

assert(sections[section], "unknown section " .. tostring(section))
sections[section]()
