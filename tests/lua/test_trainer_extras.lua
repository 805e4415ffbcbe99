-- tc.Trainer's Timer callback and TensorBoardLogger (stdlib/lua/tc.trainer_extras.lua, docs/trainer.md).
-- The Timer runs on a fake clock that each training step advances by 10 s: no test reads wall time.
-- The event files are read back by a small TFRecord/protobuf reader here, checked against CRC32C's
-- published test vectors and a record built by hand from the format.
local tc = require "tc"
local nn = require "tc.nn"
local check = require "check"
local L = require "tc.trainer"
local X = require "tc.trainer_extras"
local data = tc.utils.data
local F = nn.functional

local tmpdir, ls = check.tmpdir, check.ls
local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end
local function raises(kind, f, pattern)
  local e = check.raises(kind, f)
  if pattern then assert(e.message:find(pattern, 1, true), ("expected '%s' in: %s"):format(pattern, e.message)) end
end

-- the fake clock: each training step advances it by 10 s
local clock_t = 0
local function clock() return clock_t end

local Reg = L.LightningModule:extend("Reg")
function Reg:__init() self.lin = nn.Linear(4, 1) end
function Reg:forward(x) return self.lin(x) end
function Reg:training_step(b)
  clock_t = clock_t + 10
  local loss = F.mse_loss(self(b[1]), b[2])
  self:log("train_loss", loss)
  return loss
end
function Reg:validation_step(b)
  clock_t = clock_t + 1
  self:log("val_loss", F.mse_loss(self(b[1]), b[2]))
end
function Reg:test_step(b) clock_t = clock_t + 2; self:log("test_loss", F.mse_loss(self(b[1]), b[2])) end
function Reg:configure_optimizers() return tc.optim.SGD(self:parameters(), {lr = 0.1}) end

local function loader(n, bs)
  tc.manual_seed(0)
  return data.DataLoader(data.TensorDataset(tc.randn(n, 4), tc.randn(n, 1)), {batch_size = bs})
end
local function trainer(opts)
  opts.enable_progress_bar = false
  if opts.logger == nil then opts.logger = false end
  return tc.Trainer(opts)
end
local function fit(timer, opts)
  clock_t = 0
  local tr = trainer(opts or {max_epochs = 3, num_sanity_val_steps = 0, callbacks = {timer}})
  tc.manual_seed(1)
  tr:fit(Reg(), loader(16, 4), loader(8, 4))
  return tr
end

local tests = {}

-- ---- Timer -------------------------------------------------------------------------------------------
function tests.timer_is_exported_from_tc_and_tc_trainer()
  check.eq(rawequal(tc.Timer, L.Timer), true)
  check.eq(rawequal(tc.TensorBoardLogger, L.TensorBoardLogger), true)
  check.eq(getmetatable(tc.Timer()).__index ~= nil, true)
  check.eq(tc.Timer().super, L.Callback)
end

function tests.timer_stops_the_fit_after_the_step_that_passes_its_duration()
  -- 4 batches an epoch, 10 s a step (+ 1 s a validation batch): the 4th step reaches 40 >= 35
  local timer = tc.Timer{duration = 35, clock = clock, verbose = false}
  local tr = fit(timer)
  check.eq(tr.global_step, 4)
  check.eq(tr.should_stop, true)
  check.eq(timer:time_elapsed("train"), 42)  -- the epoch's validation after the 4th batch runs before the stop
end

function tests.timer_with_epoch_interval_stops_at_the_epochs_end()
  -- duration 25 is passed at step 3, but the epoch interval checks after the epoch's validation
  local timer = tc.Timer{duration = 25, interval = "epoch", clock = clock, verbose = false}
  local tr = fit(timer)
  check.eq(tr.global_step, 4)
  check.eq(tr.current_epoch, 1)
  check.eq(timer:time_elapsed("train"), 42)  -- 4 steps and 2 validation batches
end

function tests.timer_without_a_limit_lets_the_fit_run()
  local timer = tc.Timer{clock = clock}
  local tr = fit(timer)
  check.eq(tr.global_step, 12)
  check.eq(timer:time_remaining(), nil)
  check.eq(timer:time_elapsed(), 126)
end

function tests.timer_measures_each_stage_between_its_hooks()
  local timer = tc.Timer{duration = "00:00:10:00", clock = clock}
  local tr = fit(timer, {max_epochs = 1, num_sanity_val_steps = 1, callbacks = {timer}})
  -- sanity check: 1 batch (1 s); training: 4 steps (40 s) and the epoch's validation (2 s)
  check.eq(timer:time_elapsed("sanity_check"), 1)
  check.eq(timer:start_time("train"), 1)
  check.eq(timer:end_time("train"), 43)
  check.eq(timer:time_elapsed("train"), 42)
  check.eq(timer:time_elapsed("validate"), 2)
  check.eq(timer:time_remaining("train"), 600 - 42)
  check.eq(timer:time_elapsed("test"), 0)
  check.eq(timer:start_time("test"), nil)
  tr:test(tr.lightning_module, loader(8, 4))
  check.eq(timer:time_elapsed("test"), 4)
  check.eq(timer:end_time("test"), 47)
  raises("ValueError", function() timer:time_elapsed("training") end, "stage is one of")
end

function tests.timer_accepts_lightnings_duration_forms()
  check.eq(tc.Timer{duration = "01:02:03:04"}.duration, ((1 * 24 + 2) * 60 + 3) * 60 + 4)
  check.eq(tc.Timer{duration = {hours = 1, minutes = 30}}.duration, 5400)
  check.eq(tc.Timer("00:00:00:30").duration, 30)
  check.eq(tc.Timer({days = 1}).duration, 86400)
  check.eq(tc.Timer(90).duration, 90)
  check.eq(tc.Timer().duration, nil)
  raises("ValueError", function() tc.Timer{duration = "12:00"} end, 'got "12:00"')
  raises("ValueError", function() tc.Timer{duration = {weeks = 1}} end, "DD:HH:MM:SS")
  raises("ValueError", function() tc.Timer{duration = -1} end, "DD:HH:MM:SS")
  raises("ValueError", function() tc.Timer{duration = 1, interval = "batch"} end, "interval is 'step' or 'epoch'")
  raises("ValueError", function() tc.Timer{duratoin = 1} end, "unknown option 'duratoin'")
end

function tests.timer_state_dict_makes_a_resumed_fit_count_on()
  local timer = tc.Timer{duration = 100, clock = clock, verbose = false}
  fit(timer, {max_steps = 3, num_sanity_val_steps = 0, callbacks = {timer}})
  local sd = timer:state_dict()
  check.eq(sd.time_elapsed_train, 30)
  for k, v in pairs(sd) do check.eq(type(k) == "string" and type(v) == "number", true, "plain state " .. tostring(k)) end
  -- a fresh Timer continues from 30 s: 100 s are passed at the 7th step (30 + 7 * 10 + 2 s of validation)
  local resumed = tc.Timer{duration = 100, clock = clock, verbose = false}
  resumed:load_state_dict({time_elapsed_train = tostring(sd.time_elapsed_train)})  -- strings too (metadata)
  check.eq(resumed:time_elapsed("train"), 30)
  local tr = fit(resumed)
  check.eq(tr.global_step, 7)
  check.eq(resumed:time_elapsed("train"), 102)
  raises("ValueError", function() resumed:load_state_dict({}) end, "time_elapsed_train")
end

function tests.timer_state_travels_in_a_trainer_checkpoint_and_a_resumed_fit_counts_on()
  local dir = tmpdir()
  local function callbacks(timer)
    return {timer, L.ModelCheckpoint{dirpath = dir, every_n_train_steps = 3, save_top_k = 0, save_last = true}}
  end
  local first = tc.Timer{duration = 100, clock = clock, verbose = false}
  fit(first, {max_steps = 3, num_sanity_val_steps = 0, callbacks = callbacks(first)})
  check.eq(first:time_elapsed("train"), 30)
  -- resumed at step 3 (batch 3 of 4): +10 s a step and +2 s per validation (steps 4 and 8) reach 100 at step 10
  local resumed = tc.Timer{duration = 100, clock = clock, verbose = false}
  clock_t = 0
  local tr = trainer{max_epochs = 3, num_sanity_val_steps = 0, callbacks = callbacks(resumed)}
  tc.manual_seed(1)
  tr:fit(Reg(), loader(16, 4), loader(8, 4), {ckpt_path = dir .. "/last.safetensors"})
  check.eq(tr.global_step, 10)
  check.eq(resumed:time_elapsed("train"), 104)
end

function tests.timer_whose_time_is_spent_stops_the_fit_at_its_start()
  local out = {}
  local sink = {write = function(_, ...) for _, s in ipairs({...}) do out[#out + 1] = s end end, flush = function() end}
  local timer = tc.Timer{duration = 50, clock = clock}
  timer:load_state_dict({time_elapsed_train = 60})
  clock_t = 0
  local tr = tc.Trainer{max_epochs = 3, num_sanity_val_steps = 0, callbacks = {timer}, logger = false,
                        enable_progress_bar = false, progress_out = sink}
  tr:fit(Reg(), loader(16, 4))
  -- no batch runs, as in Lightning
  check.eq(tr.global_step, 0)
  local text = table.concat(out)
  assert(text:find("Timer: time limit reached. Elapsed time is 0:01:", 1, true), text)
end

-- ---- TensorBoard event files ---------------------------------------------------------------------------
function tests.crc32c_matches_the_published_test_vectors()
  check.eq(X.crc32c("123456789"), 0xE3069283)
  check.eq(X.crc32c(("\0"):rep(32)), 0x8A9136AA)    -- RFC 3720, B.4
  check.eq(X.crc32c(("\255"):rep(32)), 0x62A8AB43)
  local inc = {}
  for i = 0, 31 do inc[#inc + 1] = string.char(i) end
  check.eq(X.crc32c(table.concat(inc)), 0x46DD794E)
end

local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end

function tests.a_tfrecord_is_framed_as_tensorflow_writes_it()
  -- length 9 (uint64 LE), masked CRC32C of those bytes, the data, masked CRC32C of the data
  check.eq(hex(X.tfrecord("123456789")), "090000000000000037f97139313233343536373839e5b08ac7")
end

function tests.an_event_is_encoded_with_the_proto_field_numbers()
  -- Event{wall_time = 1.5 (field 1, fixed64), step = 300 (field 2, varint), summary = 5 {value = 1 {tag = 1
  -- "a", simple_value = 2 (fixed32) 0.25}}}
  local ev = X.event(1.5, 300, {values = {X.scalar_value("a", 0.25)}})
  check.eq(hex(ev), "09" .. "000000000000f83f" .. "10" .. "ac02" .. "2a" .. "0a" .. "0a" .. "08" .. "0a01" .. "61"
    .. "15" .. "0000803e")
  check.eq(hex(X.event(2, 0, {file_version = "brain.Event:2"})), "090000000000000040" .. "1a0d" .. hex("brain.Event:2"))
  -- a negative step is ten varint bytes, as protobuf writes an int64
  check.eq(hex(X.pb.int(2, -1)), "10ffffffffffffffffff01")
end

-- a reader: TFRecord framing with both CRCs checked, then protobuf fields by wire type
local function records(path)
  local s, recs, pos = read(path), {}, 1
  while pos <= #s do
    local len_bytes = s:sub(pos, pos + 7)
    local len = string.unpack("<I8", len_bytes)
    check.eq(string.unpack("<I4", s, pos + 8), X.masked_crc32c(len_bytes), "length CRC of record " .. #recs + 1)
    local body = s:sub(pos + 12, pos + 11 + len)
    check.eq(#body, len, "record " .. #recs + 1 .. " is complete")
    check.eq(string.unpack("<I4", s, pos + 12 + len), X.masked_crc32c(body), "data CRC of record " .. #recs + 1)
    recs[#recs + 1] = body
    pos = pos + 16 + len
  end
  return recs
end
local function decode(s)
  local out, pos = {}, 1
  local function varint()
    local n, shift, b = 0, 0, nil
    repeat
      b = s:byte(pos); pos = pos + 1
      n = n | ((b & 0x7F) << shift); shift = shift + 7
    until b < 0x80
    return n
  end
  while pos <= #s do
    local k = varint()
    local field, wire, v = k >> 3, k & 7, nil
    if wire == 0 then v = varint()
    elseif wire == 1 then v = string.unpack("<d", s, pos); pos = pos + 8
    elseif wire == 5 then v = string.unpack("<f", s, pos); pos = pos + 4
    elseif wire == 2 then local n = varint(); v = s:sub(pos, pos + n - 1); pos = pos + n
    else error("unexpected wire type " .. wire) end
    out[field] = out[field] or {}
    table.insert(out[field], v)
  end
  return out
end
-- events as {wall_time, step, file_version, scalars = {tag = value}, texts = {tag = text}}
local function events(path)
  local out = {}
  for _, r in ipairs(records(path)) do
    local e = decode(r)
    local ev = {wall_time = e[1][1], step = e[2] and e[2][1] or 0, file_version = e[3] and e[3][1], scalars = {}, texts = {}}
    if e[5] then
      for _, vb in ipairs(decode(e[5][1])[1] or {}) do
        local v = decode(vb)
        if v[2] then ev.scalars[v[1][1]] = v[2][1] end
        if v[8] then
          local plugin = decode(decode(v[9][1])[1][1])[1][1]
          local t = decode(v[8][1])
          check.eq(plugin, "text"); check.eq(t[1][1], 7, "DT_STRING")
          ev.texts[v[1][1]] = t[8][1]
        end
      end
    end
    out[#out + 1] = ev
  end
  return out
end
local function f32(x) return string.unpack("<f", string.pack("<f", x)) end

function tests.tensorboard_logger_writes_each_logged_metric_as_a_scalar_event()
  local dir = tmpdir()
  local tb = tc.TensorBoardLogger(dir)
  local calls = {}
  local log_metrics = tb.log_metrics
  tb.log_metrics = function(self, m, step, epoch)
    local copy = {}
    for k, v in pairs(m) do copy[k] = v end
    calls[#calls + 1] = {metrics = copy, step = step, epoch = epoch}
    return log_metrics(self, m, step, epoch)
  end
  local tr = trainer{max_epochs = 2, num_sanity_val_steps = 0, log_every_n_steps = 1, logger = tb}
  tc.manual_seed(1)
  tr:fit(Reg(), loader(16, 4), loader(8, 4))
  check.same(ls(dir), {"lightning_logs"})
  check.same(ls(dir .. "/lightning_logs"), {"version_0"})
  local files = ls(dir .. "/lightning_logs/version_0")
  check.eq(#files, 1)
  assert(files[1]:match("^events%.out%.tfevents%.%d+%.[%w%.%-_]+$"), files[1])
  check.eq(tb.path, dir .. "/lightning_logs/version_0/" .. files[1])
  local evs = events(tb.path)
  check.eq(evs[1].file_version, "brain.Event:2")
  check.eq(#evs, #calls + 1, "one event per log_metrics call after the file version")
  assert(#calls >= 10, "8 step rows, 2 validation and 2 training epoch rows: " .. #calls)
  local saw_val = false
  for i, c in ipairs(calls) do
    local ev = evs[i + 1]
    assert(ev.wall_time > 1.6e9 and ev.wall_time >= evs[i].wall_time, "wall time in seconds since 1970, not decreasing")
    check.eq(ev.step, c.step, "step of event " .. i + 1)
    local n = 0
    for k, v in pairs(c.metrics) do check.eq(ev.scalars[k], f32(v), k .. " of event " .. i + 1); n = n + 1 end
    check.eq(ev.scalars.epoch, c.epoch, "epoch of event " .. i + 1)
    local m = 0
    for _ in pairs(ev.scalars) do m = m + 1 end
    check.eq(m, n + 1, "the metrics and epoch, nothing else")
    saw_val = saw_val or ev.scalars.val_loss ~= nil
  end
  assert(saw_val, "val_loss was written")
end

function tests.tensorboard_logger_takes_the_next_free_version_or_the_one_given()
  local dir = tmpdir()
  for _ = 1, 2 do
    local tb = tc.TensorBoardLogger(dir, {name = "runs"})
    tb:log_metrics({a = 1}, 0, 0)
    tb:close()
  end
  check.same(ls(dir .. "/runs"), {"version_0", "version_1"})
  local named = tc.TensorBoardLogger(dir, {name = "", version = "baseline"})
  check.eq(named:log_dir(), dir .. "/baseline")
  check.eq(tc.TensorBoardLogger(dir, {version = 7}):log_dir(), dir .. "/lightning_logs/version_7")
  raises("ValueError", function() tc.TensorBoardLogger(dir, {versoin = 1}) end, "unknown option 'versoin'")
  raises("ValueError", function() tc.TensorBoardLogger(dir):log_metrics({a = "x"}, 1, 0) end, "'a' must be a number")
end

function tests.tensorboard_logger_writes_hyperparameters_as_text_and_yaml()
  local dir = tmpdir()
  local tb = tc.TensorBoardLogger(dir, {version = 0})
  tb:log_hyperparams({lr = 0.001, model = "gpt", opt = {betas = 2}})
  tb:log_metrics({loss = tc.tensor(0.5)}, 3, 0)
  tb:log_metrics({}, 4, 0)  -- nothing to write: no event (not even the epoch)
  tb:save()
  local evs = events(tb.path)
  check.eq(#evs, 3)
  check.eq(evs[2].texts.hparams, "|parameter|value|\n|-|-|\n|lr|0.001|\n|model|gpt|\n|opt.betas|2|")
  check.eq(evs[3].step, 3)
  check.eq(evs[3].scalars.loss, 0.5)
  check.eq(read(dir .. "/lightning_logs/version_0/hparams.yaml"), 'lr: 0.001\nmodel: "gpt"\nopt.betas: 2\n')
end

return tests
