-- The capture test runner: `tcrun tests/capture/run.lua [PATTERN]` from the repository root.
-- Every other tests/capture/*.lua file (named after the behaviour it checks) is a script that
-- raises on failure (or calls h.skip(reason) where it cannot run); each runs after
-- tc.compiler.reset(), so its counters start at zero. The last line is `N passed, N skipped,
-- N failed`; exits 1 when anything failed, 77 (ctest's SKIP_RETURN_CODE) when every script that
-- ran was skipped.
local dir = (arg and arg[0] or "tests/capture/run.lua"):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/?.lua;scripts/models/?.lua;" .. package.path
local tc = require "tc"
local h = require "helpers"
-- counts of traces must not depend on dims an earlier run made dynamic (remembered_dynamic.h)
tc.config.remember_dynamic = false
local i = -1
while arg[i - 1] do i = i - 1 end
h.tcrun = arg[i]
local pattern = arg[1]

local files = {}
local p = assert(io.popen('ls "' .. dir .. '"'))
for name in p:lines() do
  if name:match("%.lua$") and name ~= "run.lua" and name ~= "helpers.lua" and (not pattern or name:find(pattern, 1, true)) then
    files[#files + 1] = name
  end
end
p:close()
table.sort(files)

local passed, skipped, failed = 0, 0, 0
for _, name in ipairs(files) do
  tc.compiler.reset()
  tc.compiler.set_stance("default")
  local chunk, err = loadfile(dir .. "/" .. name)
  local tb
  local ok, e = false, err
  if chunk then ok, e = xpcall(chunk, function(x) tb = debug.traceback(tostring(x), 2); return x end) end
  if ok then
    passed = passed + 1
  elseif getmetatable(e) == h.Skip then
    skipped = skipped + 1
    print(("SKIP %s: %s"):format(name, e.reason))
  else
    failed = failed + 1
    print(("FAIL %s\n    %s"):format(name, tostring(e):gsub("\n", "\n    ")))
    if tb and os.getenv("TC_TEST_TRACEBACK") then print(tb) end
  end
end
print(("%d passed, %d skipped, %d failed"):format(passed, skipped, failed))
os.exit(failed > 0 and 1 or (passed == 0 and skipped > 0) and 77 or 0)
