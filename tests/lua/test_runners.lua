-- The test runners count a skip apart from a pass: tests/lua/run.lua (check.skip) and
-- tests/capture/run.lua (h.skip, also tests/aot's) end with `N passed, N skipped, N failed` and
-- exit 0, 1 on a failure, or 77 (ctest's SKIP_RETURN_CODE: "Skipped") when all that ran skipped.
-- Each runner runs here on a scratch folder holding a copy of it and a few test files.
local check = require "check"
local T = {}

local TCRUN, run = check.TCRUN, check.run

local function copy(from, to)
  local f = assert(io.open(from, "rb"))
  local text = f:read("a")
  f:close()
  local g = assert(io.open(to, "wb"))
  g:write(text)
  g:close()
end

-- A scratch folder with `files` (name -> text, or true: copied from `source`); removed by the caller.
local function folder(source, files)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir))
  for name, text in pairs(files) do
    if text == true then
      copy(source .. "/" .. name, dir .. "/" .. name)
    else
      local f = assert(io.open(dir .. "/" .. name, "w"))
      f:write(text)
      f:close()
    end
  end
  return dir
end

local function last_line(out) return out:match("([^\n]*)\n$") end

function T.lua_runner_counts_skips_apart_from_passes()
  local pass = 'return {ok = function() end}\n'
  local skip = 'local check = require "check"\nreturn {needs_gpu = function() check.skip("no GPU here") end}\n'
  local fail = 'return {broken = function() error("on purpose") end}\n'
  local dir = folder("tests/lua",
                     {["run.lua"] = true, ["check.lua"] = true, ["test_a.lua"] = pass, ["test_b.lua"] = skip})
  local out, code = run(TCRUN .. " " .. dir .. "/run.lua")
  check.eq(last_line(out), "1 passed, 1 skipped, 0 failed", out)
  check.eq(code, 0, out)
  check.eq(out:find("SKIP test_b:needs_gpu: no GPU here", 1, true) ~= nil, true, out)
  out, code = run(TCRUN .. " " .. dir .. "/run.lua test_b")
  check.eq(last_line(out), "0 passed, 1 skipped, 0 failed", out)
  check.eq(code, 77, "every test that ran skipped: " .. out)
  local f = assert(io.open(dir .. "/test_c.lua", "w"))
  f:write(fail)
  f:close()
  out, code = run(TCRUN .. " " .. dir .. "/run.lua test_")
  check.eq(last_line(out), "1 passed, 1 skipped, 1 failed", out)
  check.eq(code, 1, out)
  os.execute("rm -r " .. dir)
end

function T.capture_runner_counts_skipped_scripts()
  local dir = folder("tests/capture", {
    ["run.lua"] = true, ["helpers.lua"] = true,
    ["passes.lua"] = 'assert(1 + 1 == 2)\n',
    ["needs_gpu.lua"] = 'local h = require "helpers"\nh.skip("no GPU here")\nerror("not reached")\n',
  })
  local out, code = run(TCRUN .. " " .. dir .. "/run.lua")
  check.eq(last_line(out), "1 passed, 1 skipped, 0 failed", out)
  check.eq(code, 0, out)
  check.eq(out:find("SKIP needs_gpu.lua: no GPU here", 1, true) ~= nil, true, out)
  out, code = run(TCRUN .. " " .. dir .. "/run.lua needs_gpu")
  check.eq(last_line(out), "0 passed, 1 skipped, 0 failed", out)
  check.eq(code, 77, out)
  os.execute("rm -r " .. dir)
end

return T
