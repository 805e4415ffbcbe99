-- Messages that used to mislead (issue 32): xpcall(f, debug.traceback) on tc errors, tc.traceback,
-- tc.config's unknown keys and wrong types, tc.load of a directory, tc.einsum's operands as
-- arguments, backend = "cuda" without a GPU, an unwritable cache directory, and tc.aot/tc.export
-- under stock lua5.4 (no compiler).
local check = require "check"
local tc = require "tc"
local T = {}
local FILE = "test_messages.lua"

local TCRUN = os.getenv("TCRUN") or (arg and arg[-1] and arg[-1]:match("tcrun$") and arg[-1]) or "./build/tcrun"

local run = check.run

local function has(text, piece, what)
  if not text:find(piece, 1, true) then error((what or "text") .. " lacks " .. check.show(piece) .. "; got:\n" .. text, 2) end
end

function T.xpcall_with_debug_traceback_shows_tc_errors_and_their_stack()
  local line = check.line() + 1
  local ok, tb = xpcall(function() return tc.ones(2) + tc.ones(3) end, debug.traceback)
  check.eq(ok, false)
  check.eq(type(tb), "string", "debug.traceback made text of the tc error")
  has(tb, FILE .. ":" .. line .. ": ")
  has(tb, "\nstack traceback:\n")
  has(tb, "in function 'xpcall'")
  -- other values are as Lua leaves them: strings get the traceback, tables come back untouched
  local t = {}
  check.eq(debug.traceback(t), t, "a table that is no tc error")
  has(debug.traceback("plain", 1), "plain\nstack traceback:\n")
  check.eq(debug.traceback(nil, 1):sub(1, 16), "stack traceback:")
end

function T.tc_traceback_writes_errors_with_their_tostring()
  local line = check.line() + 1
  local ok, tb = xpcall(function() return tc.ones(2, 3):matmul(tc.ones(2, 3)) end, tc.traceback)
  check.eq(ok, false)
  has(tb, FILE .. ":" .. line .. ": mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)\nstack traceback:\n")
  local obj = setmetatable({}, {__tostring = function() return "my error" end})
  has(tc.traceback(obj), "my error\nstack traceback:\n")
  has(tc.traceback("text"), "text\nstack traceback:\n")
end

function T.config_rejects_unknown_keys_naming_the_closest()
  local line = check.line() + 1
  local e = check.raises("ValueError", function() tc.config.recompile_limt = 64 end)
  has(e.message, "tc.config has no setting 'recompile_limt' (did you mean 'recompile_limit'?)")
  check.eq(e.line, line, "the user's line")
  check.eq(rawget(tc.config, "recompile_limt"), nil, "nothing stored")
  e = check.raises("ValueError", tc.compile, function() end, {fulgraph = true})
  has(e.message, "tc.compile() got an unexpected option 'fulgraph' (did you mean 'fullgraph'?)")
  e = check.raises("ValueError", function() tc.config.zzz = 1 end)
  has(e.message, "tc.config has no setting 'zzz' (settings: ")
  check.eq(e.message:find("did you mean", 1, true), nil, "no suggestion when nothing is close")
end

function T.config_rejects_values_of_the_wrong_type()
  local e = check.raises("ValueError", function() tc.config.recompile_limit = "64" end)
  check.eq(e.message, "tc.config.recompile_limit must be an integer >= 0, got string")
  e = check.raises("ValueError", function() tc.config.recompile_limit = 2.5 end)
  check.eq(e.message, "tc.config.recompile_limit must be an integer >= 0, got 2.5")
  check.raises("ValueError", function() tc.config.fullgraph = "yes" end)
  check.raises("ValueError", function() tc.config.backend = 3 end)
  check.eq(tc.config.recompile_limit, 8, "unchanged")
  -- right types are stored (a whole float as an integer, as the C side reads it); nil restores
  -- the default
  tc.config.recompile_limit = 16.0
  check.eq(math.type(tc.config.recompile_limit), "integer")
  check.eq(tc.config.recompile_limit, 16)
  tc.config.recompile_limit = nil
  check.eq(tc.config.recompile_limit, 8, "default again")
  local seen = {}
  for k in pairs(tc.config) do seen[k] = true end
  check.eq(seen.backend and seen.recompile_limit, true, "pairs lists the settings")
end

function T.load_of_a_directory_is_an_io_error_naming_it()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. dir))
  local e = check.raises("IOError", tc.load, dir)
  check.eq(e.message, 'tc.load("' .. dir .. '"): the path is a directory, not a safetensors file')
  e = check.raises("IOError", tc.save, dir, {x = tc.ones(1)})
  has(e.message, "is a directory")
  os.execute("rmdir " .. dir)
end

function T.einsum_takes_operands_as_arguments_or_a_table()
  local a, b = tc.randn(2, 3), tc.randn(4, 3)
  local want = a:matmul(b:t())
  check.eq(tc.allclose(tc.einsum("ij,kj->ik", a, b), want, 1e-5, 1e-6), true, "varargs")
  check.eq(tc.allclose(tc.einsum("ij,kj->ik", {a, b}), want, 1e-5, 1e-6), true, "table")
  check.eq(tc.allclose(tc.einsum("ii->i", tc.eye(3)), tc.ones(3)), true, "one operand")
  if tc.compiler._backends then  -- compiled: one graph
    local f = tc.compile(function(x, y) return tc.einsum("ij,kj->ik", x, y) end, {fullgraph = true})
    check.eq(tc.allclose(f(a, b), want, 1e-5, 1e-6), true, "compiled")
  end
end

function T.cuda_backend_without_a_gpu_is_an_error_at_compile()
  if tc.cuda.is_available() then check.skip("this machine has a GPU") end
  if tc.compiler._backends == nil then check.skip("no compiler (stock lua5.4)") end
  local e = check.raises("DeviceError", tc.compile, function(x) return x + 1 end, {backend = "cuda"})
  has(e.message, 'backend "cuda" needs a CUDA GPU, and none is available')
  local old = tc.config.backend
  tc.config.backend = "cuda"
  local ok, e2 = pcall(tc.compile, function(x) return x + 1 end)
  tc.config.backend = old
  check.eq(ok, false, "tc.config.backend = cuda too")
  check.eq(e2.kind, "DeviceError")
end

function T.unwritable_cache_dir_warns_once()
  local s = os.tmpname() .. ".lua"
  local f = assert(io.open(s, "w"))
  f:write([[
local tc = require "tc"
for k = 1, 3 do
  local f = tc.compile(load("return function(x) return (x * " .. k .. "):sin() + 1 end")())
  f(tc.ones(3))
end
print("ran")
]])
  f:close()
  local out, code = run(TCRUN .. " --cache-dir=/dev/null/tc " .. s)
  os.remove(s)
  check.eq(code, 0, out)
  has(out, "ran\n")
  has(out, "tc: warning: the kernel cache directory /dev/null/tc is not writable (Not a directory)")
  local _, n = out:gsub("not writable", "")
  check.eq(n, 1, "said once:\n" .. out)
end

function T.stock_lua_names_the_missing_compiler()
  local bin = TCRUN:match("^(.*)/tcrun$") or "build"
  if not io.open(bin .. "/tc.so") then check.skip("no " .. bin .. "/tc.so (target tc_module)") end
  if os.execute("command -v lua5.4 >/dev/null 2>&1") ~= true then check.skip("no lua5.4 on this machine") end
  local out = run([[LUA_CPATH="]] .. bin .. [[/?.so" lua5.4 -e 'local tc = require "tc"; ]]
    .. [[local ok, e = pcall(tc.aot.load, "m.tcpkg"); print(e.kind, tostring(e)); ]]
    .. [[ok, e = pcall(tc.export, function(x) return x:sin() end, {tc.ones(2)}); print(e.kind, tostring(e))']])
  has(out, "CompileError\t(command line):1: tc.aot.load needs tc's compiler, which this Lua does not have")
  has(out, "CompileError\t(command line):1: tc.export() needs tc's compiler, which this Lua does not have")
  check.eq(out:find("unknown error kind", 1, true), nil, out)
  check.eq(out:find("made no graph", 1, true), nil, out)
end

return T
