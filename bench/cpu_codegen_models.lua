-- The seed model (scripts/models/seed_layers.lua: a linear, then 64 Layers of linear, relu,
-- sigmoid, linear, relu on [10, 10]) on the CPU code generator, next to eager in the same run:
-- the first call compiled (whole, or regionally: each Layer compiled; cold unless the disk cache
-- holds the kernels), then per-call time compiled vs eager. One mode per process, so that the
-- in-memory kernel cache of one mode does not serve the other; bench/run_cpu_codegen.sh runs them.
-- Usage: TC_CACHE_DIR=DIR tcrun bench/cpu_codegen_models.lua whole|regional [ITERATIONS]
local tc = require "tc"
package.path = "scripts/models/?.lua;" .. package.path
local seed = require "seed_layers"

local mode = arg[1] or "whole"
local iters = tonumber(arg[2]) or 300
tc.manual_seed(0)
local x = tc.randn(10, 10)

local function best_ms(f)
  f()
  local best = math.huge
  for _ = 1, iters do
    local t0 = tc.utils.perf_counter()
    f()
    best = math.min(best, tc.utils.perf_counter() - t0)
  end
  return best * 1e3
end

tc.no_grad(function()
  local model = seed.Model({regional = mode == "regional"})
  model:eval()
  local compiled = mode == "regional" and model or tc.compile(model)
  local reference = seed.Model()  -- same seed: the same weights, never compiled
  reference:load_state_dict(model:state_dict())
  reference:eval()
  local t0 = tc.utils.perf_counter()
  local y = compiled(x)
  local t_first = (tc.utils.perf_counter() - t0) * 1e3
  assert((y - reference(x)):abs():max():item() < 1e-4, "compiled result differs from eager")
  local t_eager, t_compiled = best_ms(function() reference(x) end), best_ms(function() compiled(x) end)
  print(("%s: first call %.1f ms; per call: eager %.3f ms, compiled %.3f ms (%.1fx)")
    :format(mode, t_first, t_eager, t_compiled, t_eager / t_compiled))
end)
