-- tcrun's command line (LUA_API §8): arguments, -e, -l, options into tc.config, --version,
-- exit status 0/1/2, and errors printed with the user's file:line and a traceback.
local check = require "check"
local tc = require "tc"
local T = {}

-- The tcrun running these tests and a shell command's output and exit status (check.lua).
local TCRUN, run = check.TCRUN, check.run

local function script(src)
  local name = os.tmpname() .. ".lua"
  local f = assert(io.open(name, "w"))
  f:write(src)
  f:close()
  return name
end

function T.arguments_reach_the_script()
  local s = script("print(arg[0] ~= nil, #arg, arg[1], arg[2], select('#', ...), ...)")
  local out, code = run(TCRUN .. " " .. s .. " one two")
  os.remove(s)
  check.eq(code, 0)
  check.eq(out, "true\t2\tone\ttwo\t2\tone\ttwo\n")
end

function T.e_and_l_run_in_order()
  local out, code = run(TCRUN .. [[ -e "x = 1" -l string -e "print(x + 1, type(string))"]])
  check.eq(code, 0)
  check.eq(out, "2\ttable\n")
  out, code = run(TCRUN .. [[ -l t=tc -e "print(t.ones(1):item())"]])
  check.eq(code, 0)
  check.eq(out, "1.0\n")
end

function T.options_land_in_tc_config()
  local out, code = run(TCRUN .. [[ --backend=eager --mode=max-autotune --fullgraph --eager --log=graph_breaks ]]
                        .. [[--cache-dir /tmp/tc-cache --no-cache --explain=json -e "local c = require('tc').config; ]]
                        .. [[print(c.backend, c.mode, c.fullgraph, c.eager, c.log, c.cache_dir, c.no_cache, c.explain)"]])
  check.eq(code, 0)
  check.eq(out:match("^[^\n]*\n"), "eager\tmax-autotune\ttrue\ttrue\tgraph_breaks\t/tmp/tc-cache\ttrue\tjson\n")
end

-- --cache-dir is where the code generators' disk cache goes (over TC_CACHE_DIR); --no-cache
-- writes nothing anywhere.
function T.cache_dir_option_reaches_the_kernel_cache()
  local env_dir, opt_dir = os.tmpname(), os.tmpname()
  os.remove(env_dir)
  os.remove(opt_dir)
  local chunk = [[ -e "local tc = require 'tc'; tc.compile(function(x) return x:sin() * 3 end, {backend = 'cpu'})(tc.ones(5))"]]
  local function entries(dir)
    local p = assert(io.popen('ls "' .. dir .. '/cpu" 2>/dev/null'))
    local n = select(2, p:read("a"):gsub("\n", ""))
    p:close()
    return n
  end
  local out, code = run(("TC_CACHE_DIR=%s %s --cache-dir %s"):format(env_dir, TCRUN, opt_dir) .. chunk)
  check.eq(code, 0, out)
  check.eq(entries(opt_dir) > 0, true, "nothing written under --cache-dir")
  check.eq(entries(env_dir), 0)
  os.execute('rm -rf "' .. opt_dir .. '"')
  out, code = run(("TC_CACHE_DIR=%s %s --no-cache"):format(env_dir, TCRUN) .. chunk)
  check.eq(code, 0, out)
  check.eq(entries(env_dir), 0)
  -- the eager CUDA kernels' cubin cache and child processes read TC_CACHE_DIR: it follows the options
  local show = [[ -e "print('[' .. os.getenv('TC_CACHE_DIR') .. ']')"]]
  out = run(("TC_CACHE_DIR=%s %s --cache-dir %s"):format(env_dir, TCRUN, opt_dir) .. show)
  check.eq(out, "[" .. opt_dir .. "]\n")
  out = run(("TC_CACHE_DIR=%s %s --no-cache"):format(env_dir, TCRUN) .. show)
  check.eq(out, "[]\n")
  os.execute('rm -rf "' .. env_dir .. '" "' .. opt_dir .. '"')
end

function T.device_option_sets_the_default_device()
  local out, code = run(TCRUN .. [[ --device=cuda -e "local tc = require 'tc'; print(tc.get_default_device()); tc.ones(1)"]])
  check.eq(out:match("^cuda:0\n") ~= nil, true, out)
  if tc.cuda.is_available() then
    check.eq(code, 0, out)
  else  -- the first tensor is a DeviceError at the user's line
    check.eq(code, 1)
    check.eq(out:find("\n%(command line%):1: [^\n]*cuda") ~= nil, true, out)
  end
end

function T.backend_cuda_without_a_gpu_is_refused_at_startup()
  if tc.cuda.is_available() then check.skip("a CUDA GPU is present") end
  for _, opts in ipairs({"--backend=cuda", "--compile-all --backend=cuda"}) do
    local out, code = run(TCRUN .. " " .. opts .. [[ -e "print('ran')"]])
    check.eq(code, 2, out)
    check.eq(out:find("ran", 1, true), nil, out)
    check.eq(out:find("tcrun: --backend=cuda needs a CUDA GPU, and none is available (", 1, true) ~= nil, true, out)
  end
end

function T.version()
  local out, code = run(TCRUN .. " --version")
  check.eq(code, 0)
  check.eq(out:match("^tc %d+%.%d+%.%d+ %(Lua 5%.4%.%d+, LLVM %d+%.%d+%.%d+, [^)]*%)\n$") ~= nil, true, out)
end

function T.bad_usage_exits_2()
  local _, code = run(TCRUN)
  check.eq(code, 2)
  _, code = run(TCRUN .. " --frobnicate x.lua")
  check.eq(code, 2)
  _, code = run(TCRUN .. " --backend=nope x.lua")
  check.eq(code, 2)
  _, code = run(TCRUN .. " -e")
  check.eq(code, 2)
  local out
  out, code = run(TCRUN .. " --help")
  check.eq(code, 0)
  check.eq(out:find("--fullgraph", 1, true) ~= nil, true)
end

function T.lua_error_exits_1_with_file_line_and_traceback()
  local s = script("local tc = require 'tc'\nlocal function f(a)\n  return a:matmul(a)\nend\nf(tc.ones(2, 3))\n")
  local out, code = run(TCRUN .. " " .. s)
  check.eq(code, 1)
  local short = s:match("[^/]+$")
  check.eq(out:match("^[^\n]*" .. short:gsub("%p", "%%%0") .. ":3: mat1 and mat2 shapes cannot be multiplied %(2x3 and 2x3%)\n") ~= nil,
           true, out)
  check.eq(out:find("stack traceback:", 1, true) ~= nil, true, out)
  check.eq(out:find(short .. ":5: in main chunk", 1, true) ~= nil, true, out)
  out, code = run(TCRUN .. " " .. s .. ".missing")
  check.eq(code, 1)
  os.remove(s)
end

function T.plain_lua_errors_and_os_exit()
  local out, code = run(TCRUN .. [[ -e "error('boom')"]])
  check.eq(code, 1)
  check.eq(out:match("^%(command line%):1: boom\n") ~= nil, true, out)
  _, code = run(TCRUN .. [[ -e "os.exit(3)"]])
  check.eq(code, 3)
end

-- `tcrun -` reads the script from standard input (chunk name "stdin", as lua5.4), with --compile-all
-- too; after "--", "-" is a file name.
function T.dash_runs_the_script_from_stdin()
  local src = script("#!/usr/bin/env tcrun\nlocal tc = require 'tc'\nprint(arg[0], table.concat({...}, ','), tc.ones(2):sum():item())\nerror('boom')\n")
  local out, code = run(TCRUN .. " - one two < " .. src)
  check.eq(code, 1)
  check.eq(out:match("^[^\n]*\n"), "-\tone,two\t2.0\n")
  check.eq(out:match("\n(stdin:4: boom)\n") ~= nil, true, out)
  out, code = run(TCRUN .. " --compile-all - x < " .. src)
  check.eq(code, 1)
  check.eq(out:match("^[^\n]*\n"), "-\tx\t2.0\n")
  out, code = run("echo 'print(1)' | " .. TCRUN .. " -- -")
  check.eq(code, 1)
  check.eq(out:find("cannot open -", 1, true) ~= nil, true, out)
  _, code = run("echo 'print(1)' | " .. TCRUN .. " --nproc-per-node 2 -")
  check.eq(code, 2)
  os.remove(src)
end

function T.bytecode_listing()
  local s = script("local x = 1\nreturn x + 1\n")
  local out, code = run(TCRUN .. " --bytecode " .. s)
  os.remove(s)
  check.eq(code, 0)
  check.eq(out:find("main <", 1, true) ~= nil, true, out)
  check.eq(out:find("RETURN", 1, true) ~= nil, true, out)
end

function T.split_check_harness()
  local out, code = run(TCRUN .. " --split-check tests/vm/split/basics.lua")
  check.eq(code, 0, out)
  check.eq(out:match("\n%d+ passed, 0 failed\n$") ~= nil, true, out)
end

function T.hello_example_runs()
  local out, code = run(TCRUN .. " scripts/examples/hello.lua")
  check.eq(code, 0, out)
  check.eq(out:find("compiled mlp output:", 1, true) ~= nil, true, out)
end

return T
