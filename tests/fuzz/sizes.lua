-- The size-overflow fuzzer (issue 32): random huge, negative and non-integer sizes through the
-- creation, view and movement ops that take sizes from the user, eagerly and compiled. Every
-- call must end in a tc error (a table of a known kind) or a valid tensor: its shape is what the
-- sizes asked for, its numel fits int64, and its last element can be read. Never a crash, a
-- hang or a silently wrapped size.
--
--   tcrun tests/fuzz/sizes.lua [--seed S] [--count N]   cases in a child tcrun under a timeout: a
--                                                        crash or hang names its case, and the
--                                                        run goes on after it
--   tcrun tests/fuzz/sizes.lua --child --seed S --from I --count N   the cases in this process
--
-- CPU memory is capped (tc.memory.set_cpu_limit), so a huge but representable allocation is an
-- OutOfMemoryError at once instead of paging; sizes are small (<= 8), mid (<= 2^20) or huge
-- (>= 2^31), so ops that return one tensor per slice never build millions of them.
local opts = {seed = 1, count = 1500, from = 1}
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--child" then
    opts.child = true
  else
    local key = a:match("^%-%-(%w+)$")
    assert(key and opts[key] and arg[i + 1], "usage: sizes.lua [--seed S] [--count N] [--child --from I]")
    opts[key] = math.tointeger(tonumber(arg[i + 1]))
    i = i + 1
  end
  i = i + 1
end

if not opts.child then  -- the parent: children run the cases, a crash restarts after its case
  local tcrun, script = arg[-1], arg[0]
  local from, failures, passed, errors = opts.from, {}, 0, 0
  local last = opts.from + opts.count - 1
  while from <= last do
    -- the address-space cap keeps a runaway case from exhausting the machine
    local cmd = ("ulimit -v 8000000; timeout 120 %q %q --child --seed %d --from %d --count %d 2>&1"):format(tcrun, script, opts.seed, from,
                                                                                       last - from + 1)
    local p = assert(io.popen(cmd))
    local current, done = nil, false
    for line in p:lines() do
      local n, desc = line:match("^CASE (%d+) (.*)$")
      if n then
        current = {n = tonumber(n), desc = desc}
      elseif line:match("^FAIL ") then
        failures[#failures + 1] = line
        if current then current.finished = true end
      elseif line == "R ok" then
        passed = passed + 1
        current.finished = true
      elseif line == "R err" then
        errors = errors + 1
        current.finished = true
      elseif line:match("^DONE ") then
        done = true
      elseif not line:match("^tc: ") then  -- tc's own log lines (recompile limits) are not failures
        io.write("  | ", line, "\n")
      end
    end
    local _, how, code = p:close()
    if done then break end
    if current and current.finished then current = {n = current.n + 1, desc = "the case after it"} end
    local at = current and current.n or from
    failures[#failures + 1] = ("FAIL case %d: %s (%s %s) in %s"):format(at, how == "signal" and "crash" or
                                                                          code == 124 and "hang" or "died", how, code,
                                                                      current and current.desc or "startup")
    from = at + 1
  end
  for _, f in ipairs(failures) do print(f) end
  print(("size fuzzer: seed %d, cases %d..%d: %d valid tensors, %d tc errors, %d failures"):format(opts.seed, opts.from,
                                                                                                   last, passed, errors,
                                                                                                   #failures))
  os.exit(#failures == 0 and 0 or 1)
end

local tc = require "tc"
local F = tc.nn.functional
tc.memory.set_cpu_limit(tc.memory.live_bytes() + 64 * 2 ^ 20)

local kinds = {ShapeError = true, ValueError = true, OutOfMemoryError = true, IndexError = true, DTypeError = true,
               NotImplementedError = true}
local small = {0, 1, 1, 2, 3, 5, 8}
local mid = {1000, 4096, 2 ^ 20}
local huge = {2 ^ 31, 2 ^ 32, 2 ^ 33, 2 ^ 40, 2 ^ 61, 2 ^ 62, 2 ^ 62 + 1, math.maxinteger}
local odd = {-1, -2, -2 ^ 62, math.mininteger, 2.0, 2 ^ 62 * 1.0, 2 ^ 63, 1e30, -1e30, 2.5, math.huge, 0 / 0}

local function pick(t) return t[math.random(#t)] end
-- A size: mostly small, sometimes huge, now and then mid or invalid.
local function size(no_mid)
  local r = math.random(100)
  if r <= 50 then return pick(small) end
  if r <= 82 then return pick(huge) end
  if r <= 90 and not no_mid then return pick(mid) end
  return pick(odd)
end
local function sizes(n, no_mid)
  local s = {}
  for k = 1, n or math.random(0, 4) do s[k] = size(no_mid) end
  return s
end
local function dim(rank) return math.random(-rank - 1, rank + 1) end
local dtypes = {tc.float32, tc.float64, tc.int64, tc.int32, tc.uint8, tc.bool, tc.float16}

local function show(v)
  if type(v) == "table" then
    local o = {}
    for k = 1, #v do o[k] = show(v[k]) end
    return "{" .. table.concat(o, ",") .. "}"
  end
  if math.type(v) == "float" then return ("%.17g"):format(v) end
  return tostring(v)
end

-- A base tensor to view: small and real, or a stride-0 expand of one element to small and huge
-- dims (a legal view of any size whose numel fits int64).
local function base()
  if math.random(3) == 1 then return tc.ones(math.random(1, 3), math.random(1, 4)), "ones(r,c)" end
  local s
  repeat
    s = {}
    local numel = 1.0
    for k = 1, math.random(1, 3) do
      s[k] = math.random(2) == 1 and pick(small) or pick(huge)
      numel = numel * s[k]
    end
  until numel < 2 ^ 63
  local ones = {}
  for k = 1, #s do ones[k] = 1 end
  return tc.ones(table.unpack(ones)):expand(table.unpack(s)), "expand" .. show(s)
end

-- The exact int64 product of valid sizes, or nil where it would not fit.
local function prod(s)
  local p = 1
  for _, v in ipairs(s) do
    if v == 0 then return 0 end
  end
  for _, v in ipairs(s) do
    v = math.tointeger(v)
    if not v or v < 0 or p > math.maxinteger // v then return nil end
    p = p * v
  end
  return p
end
local function valid_size(v) return math.tointeger(v) ~= nil and v >= 0 end

-- The checks of a result that is a tensor: shape as expected (where the case knows it), numel
-- within int64, and its last element readable.
local function check_tensor(t, expect)
  local shape = t.shape
  for k = 1, #shape do
    if math.type(shape[k]) ~= "integer" or shape[k] < 0 then return "bad size " .. show(shape[k]) end
  end
  if not prod(shape) then return "numel past int64 in " .. tostring(shape) end
  if expect then
    if #expect ~= #shape then return ("rank %d, expected %d"):format(#shape, #expect) end
    for k = 1, #expect do
      if shape[k] ~= math.tointeger(expect[k]) then
        return ("shape %s, expected %s"):format(tostring(shape), show(expect))
      end
    end
  end
  if prod(shape) > 0 then
    local v = t
    for _ = 1, t:dim() do v = v:select(1, -1) end
    v:item()
  end
  local _ = tostring(t)  -- printing summarises a huge view
  return nil
end

local ok_count, err_count = 0, 0
local function run_case(n, desc, f, expect)
  io.write("CASE ", n, " ", desc, "\n")
  io.flush()
  local ok, r = pcall(f)
  if ok then
    local results = type(r) == "table" and getmetatable(r) == nil and r or {r}
    for _, t in ipairs(results) do
      if tc.is_tensor(t) then
        local ok2, why = pcall(check_tensor, t, expect)
        if not ok2 or why then
          print(("FAIL case %d: %s: invalid result: %s"):format(n, desc, tostring(why)))
          return
        end
      end
    end
    ok_count = ok_count + 1
    io.write("R ok\n")
  elseif type(r) == "table" and kinds[r.kind] then
    err_count = err_count + 1
    io.write("R err\n")
  else
    print(("FAIL case %d: %s: not a tc error: %s"):format(n, desc, tostring(type(r) == "table" and r.kind or r)))
  end
end

-- Cases: each returns a description, a function, and where the shape is known the expected one.
local creation = {"zeros", "ones", "empty", "rand", "randn"}
local cases = {
  function()
    local op, s, dt = pick(creation), sizes(), math.random(2) == 1 and pick(dtypes) or nil
    if (op == "rand" or op == "randn") and dt and dt ~= tc.float64 then dt = tc.float32 end
    local args = {table.unpack(s)}
    if dt then args[#args + 1] = {dtype = dt} end
    local all_valid = true
    for _, v in ipairs(s) do all_valid = all_valid and valid_size(v) end
    return op .. show(s) .. (dt and tostring(dt) or ""), function() return tc[op](table.unpack(args)) end,
           all_valid and s or nil
  end,
  function()
    local s, v = sizes(), pick({1.5, 0, true, 7})
    return "full" .. show(s), function() return tc.full(s, v) end, nil
  end,
  function()
    local s = sizes()
    return "randint" .. show(s), function() return tc.randint(0, 5, s) end, nil
  end,
  function()
    local a, b = size(), size()
    return ("eye(%s,%s)"):format(show(a), show(b)), function() return tc.eye(a, b) end, nil
  end,
  function()
    local n, step = size(), pick({1, 2 ^ 20, 2 ^ 40, 0.5, 2 ^ 62})
    return ("arange(0,%s,%s)"):format(show(n), show(step)), function() return tc.arange(0, n, step) end, nil
  end,
  function()
    local n = size()
    return ("linspace(0,1,%s)"):format(show(n)), function() return tc.linspace(0, 1, n) end, nil
  end,
  function()
    local x, what = base()
    local s = sizes(math.random(1, 4), true)
    local op = pick({"view", "reshape", "expand"})
    if math.random(3) == 1 then s[math.random(#s)] = -1 end
    return ("%s:%s%s"):format(what, op, show(s)), function() return x[op](x, table.unpack(s)) end, nil
  end,
  function()
    local x, what = base()
    local d, start, len = dim(x:dim()), pick({1, 2, -1, 0, 2 ^ 62, math.maxinteger}), size(true)
    return ("%s:narrow(%s,%s,%s)"):format(what, d, show(start), show(len)),
           function() return x:narrow(d, start, len) end, nil
  end,
  function()
    local x, what = base()
    local op, d = pick({"unsqueeze", "squeeze", "select", "flatten", "t", "unbind"}), dim(x:dim())
    local idx = pick({1, -1, 2, 2 ^ 62, math.maxinteger, math.mininteger})
    return ("%s:%s(%s)"):format(what, op, d), function()
      if op == "select" then return x:select(d, idx) end
      if op == "t" then return x:t() end
      if op == "flatten" then return x:flatten() end
      return x[op](x, d)
    end, nil
  end,
  function()
    local x, what = base()
    local perm = {}
    for k = 1, x:dim() do perm[k] = k end
    for k = #perm, 2, -1 do
      local j = math.random(k)
      perm[k], perm[j] = perm[j], perm[k]
    end
    if math.random(4) == 1 then perm[1] = dim(x:dim()) end
    return ("%s:permute%s:expand"):format(what, show(perm)), function()
      local p = x:permute(table.unpack(perm))
      local s = {}
      for k = 1, p:dim() do s[k] = p.shape[k] end
      table.insert(s, 1, size(true))
      return p:expand(table.unpack(s))
    end, nil
  end,
  function()
    local x, what = base()
    local reps = sizes(x:dim() + math.random(0, 1), true)
    local expect = {}
    local lead = #reps - x:dim()
    for k = 1, #reps do
      local have = k <= lead and 1 or x.shape[k - lead]
      if not valid_size(reps[k]) then expect = nil break end
      local p = prod({reps[k], have})
      if not p then expect = nil break end
      expect[k] = p
    end
    if expect and not prod(expect) then expect = nil end
    return ("%s:repeat%s"):format(what, show(reps)), function() return x["repeat"](x, table.unpack(reps)) end, expect
  end,
  function()
    local x, what = base()
    local n, d = math.random(1, 5), dim(x:dim())
    local list = {}
    for k = 1, n do list[k] = math.random(3) == 1 and x:narrow(1, 1, math.min(1, x.shape[1])) or x end
    return ("cat(%d x %s, %d)"):format(n, what, d), function() return tc.cat(list, d) end, nil
  end,
  function()
    local x, what = base()
    local n = math.random(1, 3)
    local list = {}
    for k = 1, n do list[k] = x end
    return ("stack(%d x %s)"):format(n, what), function() return tc.stack(list, dim(x:dim())) end, nil
  end,
  function()
    local x = tc.ones(1, 1, math.random(1, 4))
    local pads = {size(true), size(true)}
    if math.random(2) == 1 then pads[1] = -pads[1] end
    local mode = pick({"constant", "constant", "reflect", "replicate", "circular"})
    local expect = nil
    local lo, hi = math.tointeger(pads[1]), math.tointeger(pads[2])
    if lo and hi and math.abs(lo) < 2 ^ 61 and math.abs(hi) < 2 ^ 61 and mode == "constant" then
      local w = x.shape[3] + lo + hi  -- exact: no operand near int64's ends
      if w >= 0 then expect = {1, 1, w} end
    end
    return ("pad(ones(1,1,%d),%s,%s)"):format(x.shape[3], show(pads), mode),
           function() return F.pad(x, pads, mode) end, expect
  end,
  function()
    local img = tc.ones(1, 1, 2, 3)
    if math.random(2) == 1 then
      local s = {size(true), size(true)}
      return "interpolate(size=" .. show(s) .. ")", function() return F.interpolate(img, {size = s}) end, nil
    end
    local sf = pick({0.5, 2, 1e10, 1e30, 2 ^ 40, -1, 0 / 0, math.huge})
    return "interpolate(scale=" .. show(sf) .. ")", function() return F.interpolate(img, {scale_factor = sf}) end, nil
  end,
  function()
    local x, what = base()
    local op = pick({"split", "chunk", "split_with_sizes"})
    local d = dim(x:dim())
    local arg1 = op == "split_with_sizes" and sizes(math.random(1, 4), true) or size(true)
    return ("%s:%s(%s,%d)"):format(what, op, show(arg1), d), function() return x[op](x, arg1, d) end, nil
  end,
  function()
    local x = tc.ones(1, 1, 5, 5)
    local op = pick({"max_pool2d", "avg_pool2d"})
    local k, s = pick({1, 2, 3}), pick({1, 2, 2 ^ 62, math.maxinteger})
    return ("%s(k=%d,s=%s)"):format(op, k, show(s)), function() return F[op](x, k, s, 0, true) end, nil
  end,
  function()
    local stride, pad, dil = pick({1, 2, 2 ^ 40, 2 ^ 62}), pick({0, 1, 2 ^ 62}), pick({1, 2, 2 ^ 62})
    local op = pick({"conv2d", "conv_transpose2d"})
    return ("%s(stride=%s,pad=%s,dil=%s)"):format(op, show(stride), show(pad), show(dil)), function()
      local x, w = tc.ones(1, 1, 4, 4), tc.ones(1, 1, 2, 2)
      if op == "conv2d" then return F.conv2d(x, w, nil, stride, pad, dil) end
      return F.conv_transpose2d(x, w, nil, stride, pad, 0, 1, dil)
    end, nil
  end,
}

-- Compiled: the sizes are graph inputs (numbers: specialised, then dynamic after a recompile).
-- Integer, float and invalid sizes each make an entry: a limit that never sends a case eager.
tc.config.recompile_limit = 1000
local compiled = {
  zeros = tc.compile(function(a, b) return tc.zeros(a, b) + 1 end),
  zeros_dynamic = tc.compile(function(a, b) return tc.zeros(a, b) + 1 end, {dynamic = true}),
  expand = tc.compile(function(x, n) return x:expand(n, 2) * 2 end, {dynamic = true}),
  outer = tc.compile(function(x) return x:unsqueeze(2) * x:unsqueeze(1) end, {dynamic = true}),
  view = tc.compile(function(x, a, b) return x:reshape(a, b):narrow(1, 1, 1) + 0 end),
}
local compiled_cases = {
  function()
    local a, b = size(), size()
    local expect = valid_size(a) and valid_size(b) and {a, b} or nil
    local which = pick({"zeros", "zeros_dynamic"})
    return ("compiled %s(%s,%s)+1"):format(which, show(a), show(b)), function() return compiled[which](a, b) end, expect
  end,
  function()
    local n = size(true)
    return ("compiled ones(1,2):expand(%s,2)*2"):format(show(n)),
           function() return compiled.expand(tc.ones(1, 2), n) end, valid_size(n) and {n, 2} or nil
  end,
  function()
    local n = math.random(2) == 1 and pick(small) or pick(huge)
    local x = math.random(2) == 1 and tc.ones(1):expand(n) or tc.ones(math.min(n, 8))  -- dense inputs lower
    return ("compiled outer(%s)"):format(show(x.shape[1])), function() return compiled.outer(x) end, nil
  end,
  function()
    local a, b = size(true), size(true)
    return ("compiled expand(2^40):reshape(%s,%s)"):format(show(a), show(b)),
           function() return compiled.view(tc.ones(1):expand(2 ^ 40), a, b) end, nil
  end,
}

math.randomseed(opts.seed)
for n = 1, opts.from + opts.count - 1 do
  -- the draws of case n depend only on the seed and n: a restarted child sees the same cases
  math.randomseed(opts.seed * 1000003 + n)
  if n >= opts.from then
    local gen = n % 10 == 0 and pick(compiled_cases) or pick(cases)
    local desc, f, expect = gen()
    run_case(n, desc, f, expect)
  end
end
local st = tc.compiler.stats()
print(("DONE %d %d (compiled: %d traces, %d backend compiles, %d recompiles, %d fallbacks)"):format(ok_count, err_count,
      st.traces, st.backend_compiles, st.recompiles, st.fallbacks))
