-- A package that is not one, truncated, corrupted (any byte of any section: checksums) or of
-- another format version is refused at load with an error naming the file and the problem.
local tc = require "tc"
local h = require "helpers"
local path = h.tmp("good")
tc.aot.compile(tc.export(function(a) return (a * 2):relu() end, {tc.randn(4)}), {path = path})
local f = assert(io.open(path, "rb"))
local good = f:read("a")
f:close()
assert(good:sub(2, 6) == "TCPKG", "magic")
local function write(bytes)
  local p = h.tmp("bad")
  local w = assert(io.open(p, "wb"))
  w:write(bytes)
  w:close()
  return p
end
local function refused(bytes, pattern)
  local p = write(bytes)
  local msg = h.expect_kind("ValueError", pattern, tc.aot.load, p)
  assert(msg:find(p, 1, true), "the error names the file: " .. msg)
  os.remove(p)
end
refused("hello", "is not a tc package")
refused(good:sub(1, 20), "is truncated (20 bytes")
refused(good:sub(1, #good - 1), "is truncated or damaged")
refused(good .. "x", "is truncated or damaged")
-- another format version at offset 8: an older package (version 1: CUDA plans without the tiny
-- graph's kernel) or a newer one
refused(good:sub(1, 8) .. string.pack("<I4", 1) .. good:sub(13), "has package format version 1; this tc")
refused(good:sub(1, 8) .. string.pack("<I4", 3) .. good:sub(13), "has package format version 3; this tc")
-- one byte flipped in each section (the manifest first, the object code last) and in the table
local n = string.unpack("<I4", good, 13)
for i = 0, n - 1 do
  local e = 32 + 64 * i
  local name = good:sub(e + 1, e + 40):gsub("%z+$", "")
  local off, size = string.unpack("<I8I8", good, e + 41)
  local at = off + size // 2 + 1
  local bad = good:sub(1, at - 1) .. string.char((good:byte(at) + 1) % 256) .. good:sub(at + 1)
  refused(bad, ("checksum mismatch in section '%s'"):format(name))
end
refused(good:sub(1, 33) .. "Z" .. good:sub(35), "header checksum mismatch")
-- the good one still loads and runs
local pkg = tc.aot.load(path)
h.close(pkg(tc.tensor({-1.0, 2.0, -3.0, 4.0})), tc.tensor({0.0, 4.0, 0.0, 8.0}), "good package", 0)
-- writes are atomic: no temporary file is left next to the package
local dir, base = path:match("^(.*)/([^/]*)$")
local ls = assert(io.popen('ls "' .. dir .. '"'))
for name in ls:lines() do assert(not name:find(base .. ".tmp", 1, true), "temporary file left: " .. name) end
ls:close()
os.remove(path)
