-- Module-level API: grad mode, tc.compile option checking, tc.compiler on the uncompiled runtime,
-- utilities, tc.config, and `require "tc"` from stock lua5.4 through the C module.
local tc = require "tc"
local check = require "check"
local T = {}

function T.require_returns_the_same_module()
  check.eq(rawequal(require "tc", tc), true)
  check.eq(type(tc.__version), "string")
  check.eq(tc.__version:match("^%d+%.%d+%.%d+") ~= nil, true)
end

function T.no_grad_close_form()
  check.eq(tc.is_grad_enabled(), true)
  do
    local _ <close> = tc.no_grad()
    check.eq(tc.is_grad_enabled(), false)
    do
      local _ <close> = tc.enable_grad()
      check.eq(tc.is_grad_enabled(), true)
    end
    check.eq(tc.is_grad_enabled(), false)
  end
  check.eq(tc.is_grad_enabled(), true)
end

function T.no_grad_function_form_restores_on_error()
  local a, b = tc.no_grad(function(x) return tc.is_grad_enabled(), x end, 5)
  check.eq(a, false)
  check.eq(b, 5)
  check.eq(tc.is_grad_enabled(), true)
  local ok = pcall(tc.no_grad, function() error("boom") end)
  check.eq(ok, false)
  check.eq(tc.is_grad_enabled(), true, "restored after an error")
  local ok2 = pcall(function()
    local _ <close> = tc.no_grad()
    error("boom")
  end)
  check.eq(ok2, false)
  check.eq(tc.is_grad_enabled(), true, "<close> restores after an error")
end

function T.compile_returns_a_working_function()
  local function f(x) return (x * 2):sum() end
  local cf = tc.compile(f)
  check.eq(cf(tc.ones(3)):item(), 6.0)
  local cf2 = tc.compile(f, {fullgraph = true, dynamic = false, backend = "eager", mode = "max-autotune",
                             options = {}})
  check.eq(cf2(tc.ones(2)):item(), 4.0)
  check.eq(type(tc.compile(f, {backend = function(gm, inputs) return gm end})), "function")
end

function T.compile_checks_options()
  local f = function() end
  check.raises("ValueError", tc.compile, f, {fullgraph = "yes"})
  check.raises("ValueError", tc.compile, f, {backend = "nope"})
  check.raises("ValueError", tc.compile, f, {mode = "fast"})
  check.raises("ValueError", tc.compile, f, {unknown = 1})
  check.raises("ValueError", tc.compile, 42)
end

function T.compiler_api_on_uncompiled_runtime()
  local c = tc.compiler
  c.reset()
  local f = function(x) return x + 1 end
  check.eq(c.disable(f), f)
  c.set_stance("force_eager")
  c.set_stance("default")
  check.raises("ValueError", c.set_stance, "sometimes")
  c.mark_dynamic(tc.ones(2, 3), 1)
  check.raises("IndexError", c.mark_dynamic, tc.ones(2, 3), 3)
  check.eq(c.allow_in_graph(f), f)
  local report, text = c.explain(f)(tc.ones(1))
  check.eq(math.type(report.graph_count), "integer")
  check.eq(report.graph_break_count, 0)
  check.eq(type(report.break_reasons), "table")
  check.eq(type(report.ops_per_graph), "table")
  check.eq(text:match("^Graph Count: %d+\nGraph Break Count: 0\nOp Count: %d+") ~= nil, true, text)
  check.eq(math.type(c.stats().graph_breaks), "integer")
end

function T.utilities()
  local t0 = tc.utils.perf_counter()
  local t1 = tc.utils.perf_counter()
  check.eq(type(t0), "number")
  check.eq(t1 >= t0, true, "monotonic")
  local n = tc.get_num_threads()
  check.eq(math.type(n), "integer")
  tc.set_num_threads(1)
  check.eq(tc.get_num_threads(), 1)
  tc.set_num_threads(n)
  check.raises("ValueError", tc.set_num_threads, 0)
  check.eq(tc.is_tensor(tc.ones(1)), true)
  check.eq(tc.is_tensor({}), false)
  check.eq(type(tc.config), "table")
  check.eq(tc.config.backend, "tc")
end

function T.op_functions_and_methods_come_from_the_op_table()
  check.eq(type(tc.add), "function")
  check.eq(type(tc.Tensor.add), "function")
  check.eq(type(tc.conv2d), "function")
  check.eq(tc.Tensor.cat, nil, "cat takes a list, it is not a method")
  check.eq(tc.nonexistent_submodule, nil)
end

-- The same module from the stock interpreter: LUA_CPATH=build/?.so lua5.4.
function T.stock_lua_loads_the_c_module()
  -- tc.so sits next to tcrun in the build folder
  local bin = arg and arg[-1] and arg[-1]:match("^(.*)/tcrun$") or "build"
  local so = io.open(bin .. "/tc.so")
  if not so then error(bin .. "/tc.so not found: run scripts/dev/build.sh --target tc_module (from the repo root)") end
  so:close()
  -- the stock interpreter is a dev/CI-machine package (scripts/setup.sh); the GPU machine has none
  if os.execute("command -v lua5.4 >/dev/null 2>&1") ~= true then
    check.skip("no lua5.4 on this machine")
  end
  local cmd = [[LUA_CPATH="]] .. bin .. [[/?.so" lua5.4 -e 'local tc = require "tc"; print(tc.ones(2, 2)); ]]
      .. [[local ok, e = pcall(function() return tc.ones(2, 3):matmul(tc.ones(2, 3)) end); print(e.kind, tostring(e)); ]]
      .. [[print(tc.compile(print) == print)' 2>&1]]
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  for _, piece in ipairs {
    "tensor([[1., 1.],\n        [1., 1.]])\n[tc.float32 of size 2x2 on cpu]\n",
    "ShapeError\t(command line):1: mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)\n",
    "tc: compilation is not available under stock lua5.4; tc.compile returns functions unchanged (run with tcrun)\n",
    "true\n"} do
    if not out:find(piece, 1, true) then error("stock lua5.4 output lacks " .. check.show(piece) .. "; got:\n" .. out, 0) end
  end
end

return T
