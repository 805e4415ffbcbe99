-- The helpers of the tests/aot scripts: capture's (tests/capture/helpers.lua) plus a temporary
-- package path, export -> compile -> load in one, and error checks.
local tc = require "tc"
local a = dofile("tests/capture/helpers.lua")

function a.tmp(name)
  local dir = os.getenv("TMPDIR") or "/tmp"
  return ("%s/tc-aot-test-%d-%s.tcpkg"):format(dir, math.random(1, 1 << 30), name)
end

-- Exports f on args, writes a package, loads it; returns the package, its path and the exported program.
function a.round_trip(f, args, export_opts, compile_opts)
  local ep = tc.export(f, args, export_opts)
  local opts = {path = a.tmp("rt")}
  for k, v in pairs(compile_opts or {}) do opts[k] = v end
  tc.aot.compile(ep, opts)
  return tc.aot.load(opts.path), opts.path, ep
end

-- Compiles exported program `ep` for device "cuda" (opts merged in) and returns the package's path,
-- its bytes and the report; nil where this tc has no NVRTC (the caller skips).
function a.compile_for_cuda(ep, name, opts)
  local o = {path = a.tmp(name), device = "cuda"}
  for k, v in pairs(opts or {}) do o[k] = v end
  local ok, err, report = pcall(tc.aot.compile, ep, o)
  if not ok then
    local msg = tostring(type(err) == "table" and err.message or err)
    if msg:find("NVRTC", 1, true) or msg:find("without the CUDA toolkit", 1, true) then return nil end
    error(err, 2)
  end
  local f = assert(io.open(o.path, "rb"))
  local bytes = f:read("a")
  f:close()
  return o.path, bytes, report
end

-- Runs fn and returns the error's message (fails when fn succeeds).
function a.error_of(fn, ...)
  local ok, e = pcall(fn, ...)
  assert(not ok, "expected an error")
  return type(e) == "table" and (e.message or tostring(e)) or tostring(e), e
end

function a.expect_error(pattern, fn, ...)
  local msg, e = a.error_of(fn, ...)
  if not msg:find(pattern, 1, true) then error(("expected an error containing %q, got: %s"):format(pattern, msg), 2) end
  return msg, e
end

-- As expect_error, and the error is a tc error of `kind` ("ValueError", "DeviceError" ...).
function a.expect_kind(kind, pattern, fn, ...)
  local msg, e = a.expect_error(pattern, fn, ...)
  if type(e) ~= "table" or e.kind ~= kind then
    error(("expected a %s, got %s: %s"):format(kind, type(e) == "table" and tostring(e.kind) or type(e), msg), 2)
  end
  return msg, e
end

return a
