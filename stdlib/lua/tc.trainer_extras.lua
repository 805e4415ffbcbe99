-- tc.trainer_extras: tc.Trainer's Timer callback and TensorBoard logger (docs/trainer.md). tc.trainer
-- calls install(M) with its own module table once that is filled, so Timer subclasses its Callback and
-- `require "tc.trainer"` gives Timer and TensorBoardLogger with the rest (no circular require).
local tc = require "tc"

local X = {}

local function raise(kind, msg)
  if tc._C and tc._C.raise then tc._C.raise(kind, msg) end
  error(kind .. ": " .. msg, 3)
end

-- ---- Timer -----------------------------------------------------------------------------------------
local STAGES = {"train", "sanity_check", "validate", "test", "predict"}

local function hms(s)
  s = math.floor(s)
  local d, rest = s // 86400, s % 86400
  local t = ("%d:%02d:%02d"):format(rest // 3600, rest % 3600 // 60, rest % 60)
  return d > 0 and ("%d day%s, %s"):format(d, d > 1 and "s" or "", t) or t
end

local function define_timer(L)
  -- Timer{duration, interval = "step" | "epoch", verbose = true, clock = tc.utils.perf_counter}:
  -- Lightning's Timer. Measures each stage's time between its on_<stage>_start and _end hooks and,
  -- once training has taken `duration` seconds, sets trainer.should_stop, checked after every training
  -- batch (interval "step") or epoch ("epoch") and at fit start (a resumed run whose time is spent).
  -- state_dict() holds the elapsed times; load_state_dict() makes a resumed fit count on from them.
  -- duration: seconds, "DD:HH:MM:SS" or {days, hours, minutes, seconds} (Lightning's forms)
  local function duration_seconds(d)
    local s = L._duration_seconds(d)
    if s == false then
      raise("ValueError", ('Timer: duration is seconds (>= 0), "DD:HH:MM:SS" or {days, hours, minutes, seconds}, got %s')
        :format(type(d) == "string" and ("%q"):format(d) or tostring(d)))
    end
    return s
  end
  local Timer = L.Callback:extend("Timer")
  function Timer:__init(opts)
    opts = opts or {}
    -- Timer(duration): seconds, "DD:HH:MM:SS" or {hours = ...} given alone
    if type(opts) ~= "table" or opts.days or opts.hours or opts.minutes or opts.seconds then opts = {duration = opts} end
    for k in pairs(opts) do
      if k ~= "duration" and k ~= "interval" and k ~= "verbose" and k ~= "clock" then
        raise("ValueError", ("Timer: unknown option '%s' (known: clock, duration, interval, verbose)"):format(tostring(k)))
      end
    end
    self.duration = duration_seconds(opts.duration)
    self.interval = opts.interval or "step"
    if self.interval ~= "step" and self.interval ~= "epoch" then
      raise("ValueError", "Timer: interval is 'step' or 'epoch', got " .. tostring(self.interval))
    end
    self.verbose = opts.verbose ~= false
    self.clock = opts.clock or tc.utils.perf_counter
    if type(self.clock) ~= "function" then raise("ValueError", "Timer: clock must be a function returning seconds") end
    self._start, self._end, self._offset = {}, {}, 0
  end
  local function stage_of(s)
    s = s or "train"
    for _, k in ipairs(STAGES) do if k == s then return s end end
    raise("ValueError", ("Timer: stage is one of %s, got %s"):format(table.concat(STAGES, ", "), tostring(s)))
  end
  -- the clock's reading at the stage's last start / end (nil before it started / while it runs)
  function Timer:start_time(stage) return self._start[stage_of(stage)] end
  function Timer:end_time(stage) return self._end[stage_of(stage)] end
  -- seconds spent in the stage (training: plus what a loaded state_dict had)
  function Timer:time_elapsed(stage)
    stage = stage_of(stage)
    local offset = stage == "train" and self._offset or 0
    local s, e = self._start[stage], self._end[stage]
    if s == nil then return offset end
    return (e or self.clock()) - s + offset
  end
  function Timer:time_remaining(stage)
    if self.duration == nil then return nil end
    return self.duration - self:time_elapsed(stage)
  end
  function Timer:_begin(stage) self._start[stage], self._end[stage] = self.clock(), nil end
  function Timer:_finish(stage) self._end[stage] = self.clock() end
  function Timer:on_train_start() self:_begin("train") end
  function Timer:on_train_end() self:_finish("train") end
  function Timer:on_validation_start(trainer) self:_begin(trainer.sanity_checking and "sanity_check" or "validate") end
  function Timer:on_validation_end(trainer) self:_finish(trainer.sanity_checking and "sanity_check" or "validate") end
  function Timer:on_test_start() self:_begin("test") end
  function Timer:on_test_end() self:_finish("test") end
  function Timer:on_predict_start() self:_begin("predict") end
  function Timer:on_predict_end() self:_finish("predict") end
  function Timer:_check(trainer)
    if self.duration == nil then return end
    if self:time_elapsed("train") < self.duration then return end
    if self.verbose and not trainer.should_stop then
      local out = trainer.progress and trainer.progress.out or io.stdout
      out:write(("\nTimer: time limit reached. Elapsed time is %s. Signaling Trainer to stop.\n"):format(
        hms(self:time_elapsed("train"))))
      out:flush()
    end
    trainer.should_stop = true
  end
  function Timer:on_fit_start(trainer) self:_check(trainer) end
  function Timer:on_train_batch_end(trainer) if self.interval == "step" then self:_check(trainer) end end
  function Timer:on_train_epoch_end(trainer) if self.interval == "epoch" then self:_check(trainer) end end
  -- {time_elapsed_<stage> = seconds} for each stage: numbers only
  function Timer:state_dict()
    local t = {}
    for _, s in ipairs(STAGES) do t["time_elapsed_" .. s] = self:time_elapsed(s) end
    return t
  end
  -- the training time goes on from the saved one (numbers or numeric strings)
  function Timer:load_state_dict(t)
    local v = type(t) == "table" and t.time_elapsed_train
    if type(v) == "string" then v = tonumber(v) end
    if type(v) ~= "number" then
      raise("ValueError", "Timer:load_state_dict(): expected a table with time_elapsed_train (seconds), got " .. tostring(v))
    end
    self._offset = v
  end
  return Timer
end

-- ---- TensorBoard event files ---------------------------------------------------------------------
-- An event file is a sequence of TFRecords: uint64 length (little-endian), masked CRC32C of those 8
-- bytes, the data, masked CRC32C of the data. Each record is a protobuf tensorflow.Event
-- (tensorboard/compat/proto/event.proto): wall_time = 1 (double), step = 2 (int64), file_version = 3
-- (string), summary = 5 (Summary: repeated Value value = 1; Value: tag = 1, simple_value = 2 (float),
-- metadata = 9, tensor = 8).
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0x82F63B78 ~ (c >> 1)) or (c >> 1) end
  crc_table[i] = c
end
-- CRC32C (Castagnoli) of a string
function X.crc32c(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = crc_table[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end
-- TFRecord's masked CRC: rotate right by 15, add a constant
function X.masked_crc32c(s)
  local c = X.crc32c(s)
  return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
end
function X.tfrecord(data)
  local len = string.pack("<I8", #data)
  return len .. string.pack("<I4", X.masked_crc32c(len)) .. data .. string.pack("<I4", X.masked_crc32c(data))
end

-- protobuf wire format: varints (two's complement for negative int64), 64-bit, length-delimited, 32-bit
local function varint(n)
  local out = {}
  repeat
    local b = n & 0x7F
    n = n >> 7  -- logical shift: a negative int64 takes ten bytes, as protobuf writes it
    out[#out + 1] = string.char(n ~= 0 and (b | 0x80) or b)
  until n == 0
  return table.concat(out)
end
local function key(field, wire) return varint(field << 3 | wire) end
local pb = {}
function pb.int(field, n) return key(field, 0) .. varint(math.tointeger(n) or 0) end
function pb.double(field, x) return key(field, 1) .. string.pack("<d", x) end
function pb.float(field, x) return key(field, 5) .. string.pack("<f", x) end
function pb.bytes(field, s) return key(field, 2) .. varint(#s) .. s end
X.pb = pb

-- tensorflow.Event bytes: {wall_time, step, file_version | summary_values = {Value bytes ...}}
function X.event(wall_time, step, what)
  local parts = {pb.double(1, wall_time)}
  if step and step ~= 0 then parts[#parts + 1] = pb.int(2, step) end
  if what.file_version then parts[#parts + 1] = pb.bytes(3, what.file_version) end
  if what.values then
    local summary = {}
    for i, v in ipairs(what.values) do summary[i] = pb.bytes(1, v) end
    parts[#parts + 1] = pb.bytes(5, table.concat(summary))
  end
  return table.concat(parts)
end
-- Summary.Value of a scalar: {tag, simple_value}
function X.scalar_value(tag, x) return pb.bytes(1, tag) .. pb.float(2, x) end
-- Summary.Value of TensorBoard's text plugin: metadata.plugin_data.plugin_name = "text" and a scalar
-- DT_STRING (7) tensor whose string_val (field 8) is the text
function X.text_value(tag, text)
  local metadata = pb.bytes(1, pb.bytes(1, "text"))
  local tensor = pb.int(1, 7) .. pb.bytes(2, "") .. pb.bytes(8, text)
  return pb.bytes(1, tag) .. pb.bytes(9, metadata) .. pb.bytes(8, tensor)
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function mkdir(dir) os.execute("mkdir -p " .. shell_quote(dir)) end
local function exists(p) local f = io.open(p, "rb"); if f then f:close() end; return f ~= nil end
local function is_dir(p) return os.execute("test -d " .. shell_quote(p)) == true end

local function hostname()
  local f = io.open("/proc/sys/kernel/hostname", "r")
  local h = f and f:read("l")
  if f then f:close() end
  h = h or os.getenv("HOSTNAME") or "localhost"
  return (h:gsub("[^%w%.%-_]", "_"))
end

-- the next free version_N under dir (N from 0, as Lightning)
local function next_version(dir)
  local n = 0
  while is_dir(("%s/version_%d"):format(dir, n)) do n = n + 1 end
  return n
end

-- TensorBoardLogger(save_dir, {name = "lightning_logs", version = next free | N | "string", flush = true}):
-- Lightning's TensorBoardLogger. Writes <save_dir>/<name>/version_<N>/events.out.tfevents.<time>.<host>,
-- a scalar per logged metric at the trainer's global step (and "epoch", as Lightning logs it);
-- log_hyperparams(params) writes hparams.yaml and a text summary "hparams" (a Markdown table).
local TensorBoardLogger = {}
TensorBoardLogger.__index = TensorBoardLogger
TensorBoardLogger.__name = "TensorBoardLogger"
X.TensorBoardLogger = TensorBoardLogger
setmetatable(TensorBoardLogger, {__call = function(cls, save_dir, opts)
  opts = opts or {}
  if type(save_dir) ~= "string" then raise("ValueError", "TensorBoardLogger: save_dir must be a directory name (a string)") end
  for k in pairs(opts) do
    if k ~= "name" and k ~= "version" and k ~= "flush" then
      raise("ValueError", ("TensorBoardLogger: unknown option '%s' (known: flush, name, version)"):format(tostring(k)))
    end
  end
  local name = opts.name
  if name == nil then name = "lightning_logs" end
  local v = opts.version
  if v ~= nil and math.type(v) ~= "integer" and type(v) ~= "string" then
    raise("ValueError", "TensorBoardLogger: version is an integer or a string, got " .. tostring(v))
  end
  return setmetatable({save_dir = save_dir, name = name, _version = v, flush_each = opts.flush ~= false}, cls)
end})

function TensorBoardLogger:root_dir()
  return (self.name == false or self.name == "") and self.save_dir or (self.save_dir .. "/" .. self.name)
end
-- the version: the one given or the next free version_N, fixed at first use
function TensorBoardLogger:version()
  if self._version == nil then self._version = next_version(self:root_dir()) end
  return self._version
end
function TensorBoardLogger:log_dir()
  local v = self:version()
  return self:root_dir() .. "/" .. (type(v) == "string" and v or ("version_%d"):format(v))
end

-- wall time in seconds since the epoch, to the clock's resolution (os.time() anchors a monotonic clock)
function TensorBoardLogger:_wall_time()
  if not self._t0 then self._t0, self._p0 = os.time(), tc.utils.perf_counter() end
  return self._t0 + (tc.utils.perf_counter() - self._p0)
end

function TensorBoardLogger:_file()
  if self._f then return self._f end
  local dir = self:log_dir()
  mkdir(dir)
  local base = ("%s/events.out.tfevents.%d.%s"):format(dir, os.time(), hostname())
  local path, n = base, 1
  while exists(path) do path, n = ("%s.%d"):format(base, n), n + 1 end
  local f, err = io.open(path, "wb")
  if not f then raise("RuntimeError", "TensorBoardLogger: cannot write " .. path .. ": " .. tostring(err)) end
  self._f, self.path = f, path
  f:write(X.tfrecord(X.event(self:_wall_time(), 0, {file_version = "brain.Event:2"})))
  return f
end

function TensorBoardLogger:_write(step, values)
  local f = self:_file()
  f:write(X.tfrecord(X.event(self:_wall_time(), step, {values = values})))
  if self.flush_each then f:flush() end
end

local function number_of(k, v)
  if tc.is_tensor(v) then return v:float():item() end
  if type(v) == "boolean" then return v and 1 or 0 end
  if type(v) ~= "number" then
    raise("ValueError", ("TensorBoardLogger:log_metrics(): '%s' must be a number or a one-element tensor, got %s"):format(
      tostring(k), type(v)))
  end
  return v
end

-- the Trainer's logger protocol: one event per call, a scalar per metric (names sorted) plus "epoch"
function TensorBoardLogger:log_metrics(metrics, step, epoch)
  if next(metrics) == nil then return end
  local names = {}
  for k in pairs(metrics) do names[#names + 1] = tostring(k) end
  table.sort(names)
  local values = {}
  for _, k in ipairs(names) do values[#values + 1] = X.scalar_value(k, number_of(k, metrics[k])) end
  if epoch ~= nil and metrics.epoch == nil then values[#values + 1] = X.scalar_value("epoch", epoch) end
  self:_write(step or 0, values)
end

local function yaml_scalar(v)
  if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  return ("%q"):format(tostring(v))
end
-- params: a table of names to numbers, strings or booleans (nested tables are written as name.key)
function TensorBoardLogger:log_hyperparams(params)
  if type(params) ~= "table" then raise("ValueError", "TensorBoardLogger:log_hyperparams(): expected a table") end
  local flat = {}
  local function walk(prefix, t, depth)
    for k, v in pairs(t) do
      local name = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
      if type(v) == "table" and depth < 4 then walk(name, v, depth + 1) else flat[name] = v end
    end
  end
  walk(nil, params, 0)
  local names = {}
  for k in pairs(flat) do names[#names + 1] = k end
  table.sort(names)
  local rows, yaml = {"|parameter|value|", "|-|-|"}, {}
  for _, k in ipairs(names) do
    rows[#rows + 1] = ("|%s|%s|"):format(k, tostring(flat[k]))
    yaml[#yaml + 1] = ("%s: %s"):format(k, yaml_scalar(flat[k]))
  end
  self:_write(0, {X.text_value("hparams", table.concat(rows, "\n"))})
  local f = assert(io.open(self:log_dir() .. "/hparams.yaml", "w"))
  f:write(table.concat(yaml, "\n"), #yaml > 0 and "\n" or "")
  f:close()
end

function TensorBoardLogger:save() if self._f then self._f:flush() end end
function TensorBoardLogger:close()
  if self._f then self._f:close(); self._f = nil end
end
TensorBoardLogger.finalize = TensorBoardLogger.close

-- fills tc.trainer's module table (called from its end)
function X.install(L)
  X.Timer = define_timer(L)
  L.Timer, L.TensorBoardLogger = X.Timer, TensorBoardLogger
  return L
end

return X
