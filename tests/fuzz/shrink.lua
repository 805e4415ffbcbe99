-- The fuzzer's shrinker: regenerates a failing seed's program and cuts it down while the same
-- kind of failure persists (each candidate checked in a fresh process under a timeout, so hangs
-- and crashes shrink too). Passes, repeated until none makes progress: delete statements (halves,
-- quarters, ... single ones, in every block), replace a block by its body, drop else branches,
-- replace an expression by its type's leaf or by a child of the same type.
--   tcrun tests/fuzz/shrink.lua --seed S --category CAT --out FILE [--backends eager]
--     [--timeout SECONDS] [--budget SECONDS]
-- CAT is what run.sh reported: hang, crash, or check.lua's category (mismatch, compiled-error, ...).
local dir = (arg and arg[0] or "tests/fuzz/shrink.lua"):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/?.lua;" .. package.path
local gen = require "gen"
io.stdout:setvbuf("line")

local opts = {backends = "eager", timeout = 5, budget = 240}
do
  local k = 1
  while arg[k] do
    local key, v = arg[k]:match("^%-%-(%w+)$"), arg[k + 1]
    assert(key and v, "shrink.lua: bad argument " .. tostring(arg[k]))
    opts[key] = tonumber(v) or v
    k = k + 2
  end
end
assert(opts.seed and opts.category and opts.out, "shrink.lua: needs --seed, --category and --out")
local i = -1
while arg[i - 1] do i = i - 1 end
local tcrun = arg[i]

local tmp = opts.out .. ".candidate.lua"
local started = os.time()
local tests, last_line = 0, nil

-- Classifies one program as run.sh does: its category, and check.lua's line.
local function classify(src)
  local f = assert(io.open(tmp, "w"))
  f:write(src)
  f:close()
  local cmd = ("timeout %d %s %s/check.lua --file %s --backends %s 2>/dev/null; echo \"rc=$?\"")
    :format(opts.timeout, tcrun, dir, tmp, opts.backends)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  local line = out:match("^[^\n]*")
  if rc == 124 or rc == 137 then return "hang", line end
  local cat = line:match("^FAIL %S+ (%S+):")
  if cat then return cat, out:gsub("rc=%d+%s*$", "") end
  if line:match("^PASS") then return "pass", line end
  if line:match("^INVALID") then return "invalid", line end
  return "crash", out
end

-- What must stay the same while shrinking: the category, and for errors the message's words
-- (line numbers and values aside), so that a shrink does not wander to another failure.
local function signature(cat, line)
  if cat ~= "compiled-error" and cat ~= "error-diff" and cat ~= "missing-error" then return cat end
  return cat .. ":" .. (line:match("^[^\n]*") or ""):gsub("^FAIL %S+ %S+ %S+ R[%.%d]*", ""):gsub("prog:%d+:", "")
    :gsub("[%d%.%-]+", "N")
end

local prog = gen.generate(opts.seed)
local first_cat, first_line = classify(gen.render(prog))
if first_cat ~= opts.category then
  print(("shrink: seed %d gives %s, not %s; nothing to shrink"):format(opts.seed, first_cat, opts.category))
  os.exit(1)
end
last_line = first_line
local want = signature(first_cat, first_line)

local function test()
  if os.time() - started > opts.budget then return false end
  tests = tests + 1
  local cat, line = classify(gen.render(prog))
  if signature(cat, line) == want then last_line = line return true end
  return false
end

local function stmt_lists()
  local lists = {}
  local function visit(list)
    lists[#lists + 1] = list
    for _, st in ipairs(list) do
      if st.body then visit(st.body) end
      if st.els then visit(st.els) end
    end
  end
  visit(prog.body)
  return lists
end

local function delete_pass()
  local progress = false
  for _, list in ipairs(stmt_lists()) do
    local c = math.max(1, #list // 2)
    while true do
      local i = #list - c + 1
      while i >= 1 do
        local removed = {}
        for k = 1, c do removed[k] = table.remove(list, i) end
        if test() then progress = true
        else for k = c, 1, -1 do table.insert(list, i, removed[k]) end end
        i = i - c
      end
      if c == 1 then break end
      c = c // 2
    end
  end
  return progress
end

local function unwrap_pass()
  local progress = false
  for _, list in ipairs(stmt_lists()) do
    local i = 1
    while i <= #list do
      local st = list[i]
      if st.body and not st.f:match("^local function") then
        local replacement = {}
        for _, s in ipairs(st.body) do replacement[#replacement + 1] = s end
        if st.after then replacement[#replacement + 1] = st.after end
        table.remove(list, i)
        for k = #replacement, 1, -1 do table.insert(list, i, replacement[k]) end
        if test() then progress = true
        else
          for _ = 1, #replacement do table.remove(list, i) end
          table.insert(list, i, st)
          if st.els then
            local els = st.els
            st.els = nil
            if test() then progress = true else st.els = els end
          end
        end
      end
      i = i + 1
    end
  end
  return progress
end

local function simplify(list, idx)
  local node = list[idx]
  if not node or not node.ty then return false end
  local progress = false
  local leaf = gen.leaf_text(node.ty)
  if leaf and (node.f ~= leaf or (node.a and #node.a > 0)) then
    list[idx] = {ty = node.ty, f = leaf, a = {}}
    if test() then return true end
    list[idx] = node
  end
  for _, child in ipairs(node.a or {}) do
    if child.ty == node.ty then
      list[idx] = child
      if test() then return true end
      list[idx] = node
    end
  end
  for k = 1, #(node.a or {}) do
    if simplify(node.a, k) then progress = true end
  end
  return progress
end

local function expr_pass()
  local progress = false
  for _, list in ipairs(stmt_lists()) do
    for _, st in ipairs(list) do
      for k = 1, #(st.a or {}) do
        if simplify(st.a, k) then progress = true end
      end
    end
  end
  return progress
end

repeat
  local progress = delete_pass()
  progress = unwrap_pass() or progress
  progress = expr_pass() or progress
until not progress or os.time() - started > opts.budget

os.remove(tmp)
local src = gen.render(prog)
local header = ("-- %s, shrunk from seed %d by tests/fuzz/shrink.lua (%d checks, %ds)\n-- reproduce: tcrun tests/fuzz/check.lua --file %s --backends %s\n-- %s\n")
  :format(opts.category, opts.seed, tests, os.time() - started, opts.out, opts.backends,
    (last_line or ""):gsub("\n", "\n-- "):sub(1, 2000))
local f = assert(io.open(opts.out, "w"))
f:write(header, src)
f:close()
print(("shrunk seed %d (%s) to %s: %d lines, %d checks"):format(opts.seed, opts.category, opts.out,
  select(2, src:gsub("\n", "")), tests))
