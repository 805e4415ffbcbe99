-- tc.save / tc.load (safetensors): round trips, files written by other tools, and malformed files
-- rejected with tc.IOError at the caller's line, one distinct message per rule.
local tc = require "tc"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local function tmp() return os.tmpname() .. ".safetensors" end

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

-- A file image: 8-byte little-endian header length, the header text, the data.
local function image(header, data, declared_len)
  return string.pack("<I8", declared_len or #header) .. header .. (data or "")
end

local tests = {}

function tests.round_trip_every_dtype()
  local t = {
    f32 = tc.randn(3, 4), f64 = tc.randn(2, {dtype = tc.float64}), f16 = tc.randn(5, {dtype = tc.float16}),
    bf16 = tc.randn(2, 2, {dtype = tc.bfloat16}), i64 = tc.tensor({{1, -2}, {3, 4}}),
    i32 = tc.tensor({7, 8}, {dtype = tc.int32}), u8 = tc.tensor({0, 255}, {dtype = tc.uint8}),
    b = tc.tensor({true, false, true}), scalar = tc.tensor(3.5), empty = tc.zeros(0, 3),
    strided = tc.randn(4, 6):t(),  -- non-contiguous: written in logical order
  }
  local path = tmp()
  tc.save(path, t)
  local r, meta = tc.load(path)
  os.remove(path)
  assert(next(meta) == nil, "no metadata")
  for name, want in pairs(t) do
    local got = r[name]
    assert(got, name .. " missing")
    assert(got.dtype == want.dtype, name .. ": dtype " .. tostring(got.dtype))
    assert(got.shape == want.shape, name .. ": shape " .. tostring(got.shape))
    assert(got:eq(want):all():item(), name .. ": values differ")
  end
  assert(r.strided:is_contiguous())
end

function tests.metadata_and_map_location()
  local path = tmp()
  tc.save(path, {w = tc.ones(2)}, {format = "pt", epoch = "3"})
  local r, meta = tc.load(path, {map_location = "cpu"})
  os.remove(path)
  assert(meta.format == "pt" and meta.epoch == "3")
  assert(r.w.device == "cpu" or tostring(r.w.device) == "cpu")
end

function tests.reads_files_written_by_the_reference_layout()
  -- tests/fixtures/interop.safetensors: laid out like the Hugging Face package (see gen_safetensors.py)
  local r, meta = tc.load(here .. "/../fixtures/interop.safetensors")
  assert(meta.format == "pt")
  assert(r["layers.1.weight"].shape == tc.Size({3, 4}))
  assert(r["layers.1.weight"]:eq(tc.arange(12):float():reshape(3, 4)):all():item())
  assert(r.emb.dtype == tc.float16 and r.ids.dtype == tc.int64 and r.mask.dtype == tc.bool)
  assert(r.scalar:dim() == 0)
end

function tests.parity_fixtures_written_by_python_load()
  local r = tc.load(here .. "/../fixtures/parity/layers.safetensors")
  assert(r["batchnorm1d_train/in/1"].shape == tc.Size({6, 4}))
end

-- Each malformed file: {bytes, pattern of the message}
local good_header = '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
local malformed = {
  too_short = {"\1\0\0", "shorter than the 8%-byte header length"},
  oversized_header = {string.pack("<I8", 200000000) .. "{}", "exceeds the 100 MB limit"},
  header_past_end = {image("{}", "", 64), "runs past the end of the file"},
  bad_json = {image('{"a":{"dtype":', string.rep("\0", 8)), "not valid JSON"},
  not_an_object = {image("[1,2]"), "not a JSON object"},
  unknown_dtype = {image('{"a":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}}', string.rep("\0", 8)), "F7"},
  size_mismatch = {image('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', string.rep("\0", 8)), "a"},
  out_of_range = {image('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', string.rep("\0", 4)), "a"},
  overlapping = {image('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}',
                       string.rep("\0", 12)), "overlap"},
}

function tests.malformed_files_raise_io_errors_with_distinct_messages()
  local messages = {}
  for name, c in pairs(malformed) do
    local path = tmp()
    write(path, c[1])
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, e = pcall(tc.load, path)
    os.remove(path)
    assert(not ok, name .. ": loading succeeded")
    assert(type(e) == "table" and e.kind == "IOError", name .. ": expected an IOError, got " .. tostring(e))
    assert(getmetatable(e) == tc.IOError, name .. ": metatable tc.IOError")
    assert(e.message:find(c[2]), name .. ": message '" .. e.message .. "' lacks '" .. c[2] .. "'")
    assert(e.line == line, name .. ": error at line " .. tostring(e.line) .. ", expected the caller's line " .. line)
    assert(not messages[e.message:gsub("'[^']*'", "")], name .. ": same message as another rule: " .. e.message)
    messages[e.message:gsub("'[^']*'", "")] = true
  end
  -- the well-formed variant loads
  local path = tmp()
  write(path, image(good_header, string.pack("<ff", 1.5, -2)))
  local r = tc.load(path)
  os.remove(path)
  assert(r.a:eq(tc.tensor({1.5, -2})):all():item())
end

function tests.missing_file_and_bad_arguments()
  local ok, e = pcall(tc.load, "/nonexistent/dir/x.safetensors")
  assert(not ok and e.kind == "IOError" and e.message:find("cannot open"), tostring(e))
  ok, e = pcall(tc.save, "/tmp/x.safetensors", {a = 1})
  assert(not ok and e.kind == "ValueError" and e.message:find("must be a tensor"), tostring(e))
  ok, e = pcall(tc.save, "/tmp/x.safetensors", {tc.ones(1)})
  assert(not ok and e.kind == "ValueError" and e.message:find("names must be strings"), tostring(e))
  ok, e = pcall(tc.load, "/tmp/x.safetensors", {device = "cpu"})
  assert(not ok and e.kind == "ValueError" and e.message:find("map_location"), tostring(e))
  ok, e = pcall(tc.save, "/nonexistent/dir/x.safetensors", {a = tc.ones(1)})
  assert(not ok and e.kind == "IOError", tostring(e))
end

return tests
