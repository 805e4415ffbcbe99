-- The differential check of the fuzzer: runs a generated program eagerly and compiled (once per
-- backend), in this process, and compares results, side effects and output.
--   tcrun tests/fuzz/check.lua --seed S [--count N] [--backends eager,cpu] [--print]
--   tcrun tests/fuzz/check.lua --file prog.lua [--backends ...]
-- Prints one line per program: `PASS seed`, `FAIL seed category: detail` or `INVALID seed: why`
-- (the eager run itself failed: a generator bug, not a tc bug). Categories: compiled-error (the
-- compiled run raised where eager did not), missing-error, error-diff (both raised, differently),
-- mismatch (values), output-diff (what the program wrote). Crashes and hangs are seen by the
-- caller (run.sh, shrink.lua): the process dies or times out.
local dir = (arg and arg[0] or "tests/fuzz/check.lua"):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/?.lua;" .. package.path
local tc = require "tc"
local gen = require "gen"
io.stdout:setvbuf("line")

local opts = {count = 1, backends = {"eager"}}
do
  local k = 1
  while arg[k] do
    local a = arg[k]
    if a == "--seed" then opts.seed = tonumber(arg[k + 1]); k = k + 1
    elseif a == "--count" then opts.count = tonumber(arg[k + 1]); k = k + 1
    elseif a == "--file" then opts.file = arg[k + 1]; k = k + 1
    elseif a == "--backends" then
      opts.backends = {}
      for b in arg[k + 1]:gmatch("[^,]+") do opts.backends[#opts.backends + 1] = b end
      k = k + 1
    elseif a == "--print" then opts.print = true
    else error("check.lua: unknown argument " .. a) end
    k = k + 1
  end
end

-- ------------------------------------------------------------------ comparison
local Mismatch = {}
local function fail(category, detail) error(setmetatable({category = category, detail = detail}, Mismatch), 0) end

local exact_floats
local function show(v)
  if tc.is_tensor(v) then return tostring(v.dtype) .. tostring(v.shape) end
  if type(v) == "table" then
    if type(v.kind) == "string" and v.message then return v.kind .. ": " .. tostring(v.message) end
    return "table"
  end
  return string.format("%s (%s)", tostring(v), math.type(v) or type(v))
end

-- What a program wrote, compared on a code generator: the same text except numbers that differ
-- by at most what the tensor tolerance allows at the printed precision (a float sum fused in
-- another order may round the 4th printed decimal the other way).
local function same_text_within_tolerance(a, b)
  local pat = "%-?%d+%.?%d*[eE]?[-+]?%d*"
  -- (tensor printing picks fixed or scientific notation and column widths from the values)
  if a:gsub(pat, "#"):gsub("%s+", "") ~= b:gsub(pat, "#"):gsub("%s+", "") then return false end
  local na, nb = {}, {}
  for x in a:gmatch(pat) do na[#na + 1] = tonumber(x) end
  for x in b:gmatch(pat) do nb[#nb + 1] = tonumber(x) end
  if #na ~= #nb then return false end
  for i = 1, #na do
    local x, y = na[i], nb[i]
    if x ~= y and not (x and y and math.abs(x - y) <= 2e-4 + 1e-4 * math.abs(x)) then return false end
  end
  return true
end

local function tensors_equal(a, b)
  if a.dtype ~= b.dtype or tostring(a.shape) ~= tostring(b.shape) or a.device ~= b.device then return false end
  if a:numel() == 0 then return true end
  if a.dtype == tc.bool then return a:eq(b):all():item() end
  if a.dtype == tc.int64 or a.dtype == tc.int32 or a.dtype == tc.uint8 then return a:eq(b):all():item() end
  local x, y = a:double(), b:double()
  local same = x:eq(y):logical_or(x:isnan():logical_and(y:isnan()))
  if exact_floats then return same:all():item() end
  -- cancellation errors scale with the largest values (a sum of +-1e38 terms)
  local finite = y:abs():lt(math.huge)
  local scale = tc.where(finite, y:abs(), 0):max():item()
  local close = (x - y):abs():le((y:abs() * 1e-4) + 1e-5 + 1e-6 * scale)
  return same:logical_or(close):all():item()
end

local function deep_eq(a, b, path, seen)
  if tc.is_tensor(a) or tc.is_tensor(b) then
    if not (tc.is_tensor(a) and tc.is_tensor(b)) then fail("mismatch", path .. ": " .. show(a) .. " vs " .. show(b)) end
    if not tensors_equal(a, b) then
      fail("mismatch", ("%s: tensors differ\neager:\n%s\ncompiled:\n%s"):format(path, tostring(a), tostring(b)))
    end
    return
  end
  if type(a) ~= type(b) then fail("mismatch", path .. ": " .. show(a) .. " vs " .. show(b)) end
  if type(a) == "number" then
    if math.type(a) ~= math.type(b) then fail("mismatch", path .. ": " .. show(a) .. " vs " .. show(b)) end
    if a == b or (a ~= a and b ~= b) then return end
    if not exact_floats and math.type(a) == "float" and math.abs(a - b) <= 1e-5 + 1e-4 * math.abs(a) then return end
    fail("mismatch", path .. ": " .. show(a) .. " vs " .. show(b))
  end
  if type(a) == "string" and a ~= b and not exact_floats and same_text_within_tolerance(a, b) then return end
  if type(a) == "table" then
    if seen[a] then return end
    seen[a] = true
    if getmetatable(a) ~= getmetatable(b) and not (type(getmetatable(a)) == "table" and type(getmetatable(b)) == "table") then
      fail("mismatch", path .. ": metatables differ")
    end
    if a.call == true and b.call == true then -- a pcall's results: errors are their own categories
      if a[1] and not b[1] then fail("compiled-error", path .. ": " .. show(b[2])) end
      if b[1] and not a[1] then fail("missing-error", path .. ": eager raised " .. show(a[2])) end
      if not a[1] then
        local ok, m = pcall(deep_eq, a[2], b[2], path .. ".error", seen)
        if not ok then fail("error-diff", path .. ": eager " .. show(a[2]) .. " | compiled " .. show(b[2])) end
      end
    end
    for k, v in pairs(a) do deep_eq(v, rawget(b, k), path .. "." .. tostring(k), seen) end
    for k, v in pairs(b) do
      if rawget(a, k) == nil then fail("mismatch", path .. "." .. tostring(k) .. ": missing in eager") end
    end
    return
  end
  if type(a) == "function" or type(a) == "thread" or type(a) == "userdata" then return end
  if a ~= b then fail("mismatch", path .. ": " .. show(a) .. " vs " .. show(b)) end
end

-- ------------------------------------------------------------------ running
local function run(src, wrap)
  local env = setmetatable({}, {__index = _G})
  local chunk, err = load(src, "=prog", "t", env)
  if not chunk then return {load_error = err} end
  tc.compiler.reset()
  local out = io.tmpfile()
  io.output(out) -- io.write goes to the same buffer
  -- Grad mode off in both runs: the corpus checks values, and compiled training (a training entry
  -- replays its graph through autograd at its first call) is tested by tests/capture/compiled_train*.
  local r = table.pack(tc.no_grad(xpcall, chunk, function(e) return {e = e, tb = debug.traceback(tostring(e), 2)} end,
    wrap, out))
  io.output(io.stdout)
  out:seek("set")
  local text = out:read("a")
  out:close()
  return {ok = r[1], value = r[2], out = text}
end

-- C(f) in the program: the same check in both modes, so that a program the shrinker broke
-- (C(nil)) fails alike instead of looking like a compile error.
local function wrapper(compile)
  return function(f)
    if f == nil then error("C(nil)", 2) end
    return compile(f)
  end
end

local function check(src, label)
  local eager = run(src, wrapper(function(f) return f end))
  if eager.load_error then return "INVALID " .. label .. ": " .. eager.load_error end
  if not eager.ok then return "INVALID " .. label .. ": eager run raised " .. tostring(eager.value.e) end
  for _, backend in ipairs(opts.backends) do
    exact_floats = backend == "eager"
    local compiled = run(src, wrapper(function(f) return tc.compile(f, {backend = backend}) end))
    if not compiled.ok then
      return ("FAIL %s compiled-error: [%s] top level raised %s"):format(label, backend, show(compiled.value.e))
    end
    local ok, m = pcall(deep_eq, eager.value, compiled.value, "R", {})
    if not ok then
      if getmetatable(m) ~= Mismatch then error(m, 0) end
      return ("FAIL %s %s: [%s] %s"):format(label, m.category, backend, m.detail)
    end
    if eager.out ~= compiled.out and (exact_floats or not same_text_within_tolerance(eager.out, compiled.out)) then
      return ("FAIL %s output-diff: [%s]\n--- eager\n%s--- compiled\n%s"):format(label, backend, eager.out, compiled.out)
    end
  end
  return "PASS " .. label
end

if opts.file then
  local f = assert(io.open(opts.file))
  local src = f:read("a")
  f:close()
  print(check(src, src:match("seed (%d+)") or opts.file))
else
  for seed = opts.seed, opts.seed + opts.count - 1 do
    local src = gen.render(gen.generate(seed))
    if opts.print then print(src) end
    print(check(src, tostring(seed)))
  end
end
