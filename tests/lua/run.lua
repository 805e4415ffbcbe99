-- The Lua API test runner: `tcrun tests/lua/run.lua [PATTERN]` from the repository root.
-- Loads every tests/lua/test_*.lua (each returns a table of named test functions), runs the tests
-- whose "file:name" contains PATTERN (all by default), prints each failure with its message, each
-- skip (check.skip) with its reason and `N passed, N skipped, N failed` as the last line; exits 1
-- when anything failed, 77 (ctest's SKIP_RETURN_CODE) when every test that ran was skipped.
local dir = (arg and arg[0] or "tests/lua/run.lua"):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/?.lua;" .. package.path
local pattern = arg and arg[1]
local check = require "check"
-- counts of traces must not depend on dims an earlier run made dynamic (capture/remembered_dynamic.h)
require("tc").config.remember_dynamic = false

local function list_tests()
  local files = {}
  local p = assert(io.popen('ls "' .. dir .. '"'))
  for name in p:lines() do
    if name:match("^test_.*%.lua$") then files[#files + 1] = name end
  end
  p:close()
  table.sort(files)
  return files
end

local function message(e)
  if type(e) == "table" and getmetatable(e) and getmetatable(e).__tostring then return tostring(e) end
  return tostring(e)
end

local passed, skipped, failed = 0, 0, 0
local function fail(what, e, tb)
  failed = failed + 1
  print(("FAIL %s\n    %s"):format(what, message(e):gsub("\n", "\n    ")))
  if tb and os.getenv("TC_TEST_TRACEBACK") then print(tb) end
end

for _, file in ipairs(list_tests()) do
  local chunk, err = loadfile(dir .. "/" .. file)
  local ok, tests = false, err
  if chunk then ok, tests = pcall(chunk) end
  if not ok or type(tests) ~= "table" then
    fail(file, tests or "did not return a table of tests")
  else
    local names = {}
    for name in pairs(tests) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      local id = file:gsub("%.lua$", "") .. ":" .. name
      if not pattern or id:find(pattern, 1, true) then
        local tb
        local ok2, e = xpcall(tests[name], function(e) tb = debug.traceback(nil, 2); return e end)
        if ok2 then
          passed = passed + 1
        elseif getmetatable(e) == check.Skip then
          skipped = skipped + 1
          print(("SKIP %s: %s"):format(id, e.reason))
        else
          fail(id, e, tb)
        end
      end
    end
  end
end

print(("%d passed, %d skipped, %d failed"):format(passed, skipped, failed))
os.exit(failed > 0 and 1 or (passed == 0 and skipped > 0) and 77 or 0)
