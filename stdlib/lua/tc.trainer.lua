-- tc.Trainer: a training loop in the spirit of Lightning 2.x (docs/trainer.md). `require "tc.trainer"`
-- returns {Trainer, LightningModule, Callback, EarlyStopping, ModelCheckpoint, CSVLogger}; tc.Trainer is
-- the Trainer. The module protocol: a tc.nn.Module with training_step(batch, i) returning a loss (or a
-- table with .loss), optional validation_step/test_step/predict_step, configure_optimizers() and
-- train_dataloader/val_dataloader/test_dataloader/predict_dataloader; hooks with Lightning's names on
-- the module and on callbacks, called in Lightning's order.
local tc = require "tc"

local M = {}

local function raise(kind, msg)
  if tc._C and tc._C.raise then tc._C.raise(kind, msg) end
  error(kind .. ": " .. msg, 3)
end

local now = tc.utils.perf_counter

-- ---- module base and callbacks ------------------------------------------------------------------
local nn = require "tc.nn"

-- LightningModule: a tc.nn.Module with self:log / self:log_dict (any module works with the Trainer,
-- which gives it a log method when it has none).
local LightningModule = nn.Module:extend("LightningModule")
M.LightningModule = LightningModule
function LightningModule:log(name, value, opts)
  local buf = rawget(self, "_tc_log_buffer")
  if buf then buf[#buf + 1] = {name, value, opts}; return end
  local tr = rawget(self, "trainer")
  if not tr then raise("RuntimeError", "self:log() called outside a tc.Trainer loop") end
  tr:_log(name, value, opts)
end
function LightningModule:log_dict(t, opts) for k, v in pairs(t) do self:log(k, v, opts) end end

local Callback = {__name = "Callback"}
Callback.__index = Callback
M.Callback = Callback
-- `MyCb = Callback:extend("MyCb")`; `MyCb(opts)` calls MyCb:__init(opts).
function Callback:extend(name)
  local cls = setmetatable({__name = name or "Callback"}, {__index = self, __call = function(c, ...)
    local o = setmetatable({}, c); o:__init(...); return o end})
  cls.__index = cls
  cls.super = self
  return cls
end
function Callback:__init() end
setmetatable(Callback, {__call = function(c, ...) local o = setmetatable({}, c); o:__init(...); return o end})

local HOOKS = {"on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end", "on_train_start",
  "on_train_end", "on_train_epoch_start", "on_train_epoch_end", "on_train_batch_start", "on_train_batch_end",
  "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
  "on_validation_start", "on_validation_end", "on_validation_epoch_start", "on_validation_epoch_end",
  "on_validation_batch_start", "on_validation_batch_end", "on_test_start", "on_test_end", "on_test_epoch_start",
  "on_test_epoch_end", "on_test_batch_start", "on_test_batch_end", "on_predict_start", "on_predict_end",
  "on_predict_epoch_start", "on_predict_epoch_end", "on_predict_batch_start", "on_predict_batch_end",
  "on_save_checkpoint", "on_load_checkpoint", "on_exception"}
M.HOOKS = HOOKS
for _, h in ipairs(HOOKS) do Callback[h] = function() end end

local function opt_check(opts, known, what)
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for n in pairs(known) do names[#names + 1] = n end
      table.sort(names)
      raise("ValueError", ("%s: unknown option '%s' (known: %s)"):format(what, tostring(k), table.concat(names, ", ")))
    end
  end
end

local function better(mode, a, b, delta)
  delta = delta or 0
  if mode == "min" then return a < b - delta end
  return a > b + delta
end

-- EarlyStopping(monitor, {patience = 3, mode = "min", min_delta = 0}) or EarlyStopping{monitor = ...}:
-- checked after every validation run; sets trainer.should_stop after `patience` checks without improvement.
local EarlyStopping = Callback:extend("EarlyStopping")
EarlyStopping.monitoring = true
M.EarlyStopping = EarlyStopping
function EarlyStopping:__init(monitor, opts)
  if type(monitor) == "table" then opts, monitor = monitor, monitor.monitor end
  opts = opts or {}
  opt_check(opts, {monitor = true, patience = true, mode = true, min_delta = true, check_finite = true}, "EarlyStopping")
  if type(monitor) ~= "string" then raise("ValueError", "EarlyStopping: monitor must be a metric name") end
  self.monitor, self.patience, self.mode = monitor, opts.patience or 3, opts.mode or "min"
  if self.mode ~= "min" and self.mode ~= "max" then raise("ValueError", "EarlyStopping: mode is 'min' or 'max'") end
  self.min_delta, self.wait_count, self.stopped_epoch = math.abs(opts.min_delta or 0), 0, nil
  self.best_score = self.mode == "min" and math.huge or -math.huge
end
function EarlyStopping:on_validation_end(trainer)
  if trainer.sanity_checking then return end
  local v = trainer.callback_metrics[self.monitor]
  if v == nil then
    raise("ValueError", ("EarlyStopping: monitored metric '%s' was not logged (logged: %s)"):format(self.monitor,
      trainer:_metric_names()))
  end
  if v ~= v then trainer.should_stop = true; self.stopped_epoch = trainer.current_epoch; return end
  if better(self.mode, v, self.best_score, self.min_delta) then
    self.best_score, self.wait_count = v, 0
  else
    self.wait_count = self.wait_count + 1
    if self.wait_count >= self.patience then
      trainer.should_stop = true
      self.stopped_epoch = trainer.current_epoch
    end
  end
end

function EarlyStopping:state_dict()
  return {wait_count = self.wait_count, best_score = self.best_score, stopped_epoch = self.stopped_epoch}
end
function EarlyStopping:load_state_dict(sd)
  self.wait_count, self.best_score, self.stopped_epoch = sd.wait_count, sd.best_score, sd.stopped_epoch
end

-- LearningRateMonitor{logging_interval = "epoch" | "step"}: logs each optimizer group's lr as
-- `lr-<Optimizer>` (`lr-<Optimizer>/pg<k>` for group k > 1) at each epoch's or step's start.
local LearningRateMonitor = Callback:extend("LearningRateMonitor")
M.LearningRateMonitor = LearningRateMonitor
function LearningRateMonitor:__init(opts)
  opts = opts or {}
  opt_check(opts, {logging_interval = true}, "LearningRateMonitor")
  self.logging_interval = opts.logging_interval or "epoch"
  if self.logging_interval ~= "epoch" and self.logging_interval ~= "step" then
    raise("ValueError", "LearningRateMonitor: logging_interval is 'epoch' or 'step', got " .. tostring(self.logging_interval))
  end
end
function LearningRateMonitor:_log(trainer)
  local row = {}
  for _, opt in ipairs(trainer.optimizers or {}) do
    local base = "lr-" .. (getmetatable(opt) and getmetatable(opt).__name or "Optimizer")
    for k, g in ipairs(opt.param_groups) do row[k == 1 and base or ("%s/pg%d"):format(base, k)] = g.lr end
  end
  for k, v in pairs(row) do trainer.logged_metrics[k] = v; trainer.callback_metrics[k] = v end
  if trainer.logger then trainer.logger:log_metrics(row, trainer.global_step, trainer.current_epoch) end
end
function LearningRateMonitor:on_train_epoch_start(trainer) if self.logging_interval == "epoch" then self:_log(trainer) end end
function LearningRateMonitor:on_train_batch_start(trainer)
  if self.logging_interval == "step" and trainer.global_step % trainer.log_every_n_steps == 0 then self:_log(trainer) end
end

local function mkdir(dir) os.execute(("mkdir -p '%s'"):format(dir:gsub("'", "'\\''"))) end
local function exists(p) local f = io.open(p, "rb"); if f then f:close() end; return f ~= nil end

-- ModelCheckpoint{dirpath, monitor, mode = "min", save_top_k = 1, every_n_train_steps, save_last, filename,
-- save_weights_only = false}: trainer:save_checkpoint files (safetensors): the module's state_dict and
-- the training state that fit(model, {ckpt_path = ...}) resumes from exactly; save_weights_only keeps the
-- state_dict (and epoch/step) only.
local ModelCheckpoint = Callback:extend("ModelCheckpoint")
ModelCheckpoint.monitoring = true
M.ModelCheckpoint = ModelCheckpoint
function ModelCheckpoint:__init(opts)
  opts = opts or {}
  opt_check(opts, {dirpath = true, monitor = true, mode = true, save_top_k = true, every_n_train_steps = true,
                   save_last = true, filename = true, save_weights_only = true}, "ModelCheckpoint")
  self.save_weights_only = opts.save_weights_only or false
  self.dirpath, self.monitor, self.mode = opts.dirpath, opts.monitor, opts.mode or "min"
  self.save_top_k = opts.save_top_k or 1
  self.every_n_train_steps, self.save_last = opts.every_n_train_steps, opts.save_last
  self.filename = opts.filename
  self.best_k_models, self.best_model_path, self.best_model_score, self.last_model_path = {}, nil, nil, nil
end
function ModelCheckpoint:_name(trainer, score)
  local s = self.filename or ("epoch=%d-step=%d"):format(trainer.current_epoch, trainer.global_step)
  if not self.filename and self.monitor and score then s = s .. ("-%s=%.4f"):format(self.monitor, score) end
  return (self.dirpath or (trainer.default_root_dir .. "/checkpoints")) .. "/" .. s .. ".safetensors"
end
function ModelCheckpoint:_save(trainer, path)
  mkdir(path:match("^(.*)/[^/]*$") or ".")
  trainer:save_checkpoint(path, {weights_only = self.save_weights_only})
end
function ModelCheckpoint:_check(trainer)
  if trainer.sanity_checking or trainer.fast_dev_run or self._last_step == trainer.global_step then return end
  if not trainer.is_global_zero then return end  -- under ddp, rank 0 writes the files (its state is every rank's)
  self._last_step = trainer.global_step
  local score
  if self.monitor then
    score = trainer.callback_metrics[self.monitor]
    if score == nil then
      raise("ValueError", ("ModelCheckpoint: monitored metric '%s' was not logged (logged: %s)"):format(self.monitor,
        trainer:_metric_names()))
    end
  end
  if self.save_top_k ~= 0 then
    local path = self:_name(trainer, score)
    if not self.monitor or self.save_top_k < 0 then
      if self.save_top_k == 1 and self.best_model_path and self.best_model_path ~= path then os.remove(self.best_model_path) end
      self:_save(trainer, path); self.best_model_path = path
    else
      local n, worst, worst_path = 0, nil, nil
      for p, s in pairs(self.best_k_models) do
        n = n + 1
        if worst == nil or better(self.mode, worst, s) then worst, worst_path = s, p end
      end
      if n < self.save_top_k or better(self.mode, score, worst) then
        if n >= self.save_top_k then self.best_k_models[worst_path] = nil; os.remove(worst_path) end
        self.best_k_models[path] = score
        self:_save(trainer, path)
        local bp, bs
        for p, s in pairs(self.best_k_models) do if bs == nil or better(self.mode, s, bs) then bp, bs = p, s end end
        self.best_model_path, self.best_model_score = bp, bs
      end
    end
  end
  if self.save_last then
    local last = (self.dirpath or (trainer.default_root_dir .. "/checkpoints")) .. "/last.safetensors"
    self:_save(trainer, last); self.last_model_path = last
  end
end
function ModelCheckpoint:state_dict()
  return {best_k_models = self.best_k_models, best_model_path = self.best_model_path, best_model_score = self.best_model_score,
          last_model_path = self.last_model_path, last_step = self._last_step}
end
function ModelCheckpoint:load_state_dict(sd)
  self.best_k_models = sd.best_k_models or {}
  self.best_model_path, self.best_model_score, self.last_model_path = sd.best_model_path, sd.best_model_score, sd.last_model_path
  self._last_step = sd.last_step
end
function ModelCheckpoint:on_train_batch_end(trainer)
  local n = self.every_n_train_steps
  if n and n > 0 and trainer.global_step % n == 0 and trainer._stepped then self:_check(trainer) end
end
function ModelCheckpoint:on_validation_end(trainer)
  if not self.every_n_train_steps and self.monitor then self:_check(trainer) end
end
function ModelCheckpoint:on_train_epoch_end(trainer)
  if not self.every_n_train_steps and not self.monitor then self:_check(trainer) end
end

-- ---- CSV logger ----------------------------------------------------------------------------------
-- CSVLogger(dir): rows of {epoch, step, metrics...} written to dir/metrics.csv (rewritten on each flush,
-- columns the union of the names logged so far, as Lightning's CSVLogger).
local CSVLogger = {}
CSVLogger.__index = CSVLogger
M.CSVLogger = CSVLogger
setmetatable(CSVLogger, {__call = function(c, dir) return setmetatable({dir = dir, rows = {}, keys = {}, seen = {}}, c) end})
function CSVLogger:log_metrics(metrics, step, epoch)
  local row = {step = step, epoch = epoch}
  for k, v in pairs(metrics) do
    row[k] = v
    if not self.seen[k] then self.seen[k] = true; self.keys[#self.keys + 1] = k end
  end
  self.rows[#self.rows + 1] = row
end
function CSVLogger:path() return self.dir .. "/metrics.csv" end
-- a resumed fit keeps the rows the interrupted run wrote up to the checkpoint's step
function CSVLogger:resume(global_step)
  local f = io.open(self:path(), "r")
  if not f then return end
  local header = f:read("l")
  local keys = {}
  for k in (header or ""):gmatch("[^,]+") do keys[#keys + 1] = k end
  for line in f:lines() do
    local row, k = {}, 0
    for cell in (line .. ","):gmatch("([^,]*),") do
      k = k + 1
      if keys[k] and cell ~= "" then row[keys[k]] = math.tointeger(tonumber(cell)) or tonumber(cell) end
    end
    if row.step and row.step <= global_step then
      for name in pairs(row) do
        if name ~= "step" and name ~= "epoch" and not self.seen[name] then self.seen[name] = true; self.keys[#self.keys + 1] = name end
      end
      self.rows[#self.rows + 1] = row
    end
  end
  f:close()
end
function CSVLogger:save()
  mkdir(self.dir)
  local keys = {}
  for i, k in ipairs(self.keys) do keys[i] = k end
  table.sort(keys)
  table.insert(keys, 1, "epoch"); table.insert(keys, 2, "step")
  local f = assert(io.open(self:path(), "w"))
  f:write(table.concat(keys, ","), "\n")
  for _, r in ipairs(self.rows) do
    local cells = {}
    for i, k in ipairs(keys) do
      local v = r[k]
      cells[i] = v == nil and "" or (math.type(v) == "integer" and tostring(v) or ("%.9g"):format(v))
    end
    f:write(table.concat(cells, ","), "\n")
  end
  f:close()
end

-- ---- progress ------------------------------------------------------------------------------------
local tty_cache
local function stdout_is_terminal()
  if tty_cache == nil then
    local term = os.getenv("TERM")
    tty_cache = term ~= nil and term ~= "dumb" and os.execute("test -t 1") == true
  end
  return tty_cache
end

local Progress = {}
Progress.__index = Progress
local function fmt_time(s)
  if s ~= s or s == math.huge then return "?" end
  s = math.floor(s + 0.5)
  if s >= 3600 then return ("%d:%02d:%02d"):format(s // 3600, s % 3600 // 60, s % 60) end
  return ("%02d:%02d"):format(s // 60, s % 60)
end
function Progress.new(inplace, out) return setmetatable({inplace = inplace, out = out or io.stdout}, Progress) end
function Progress:start(label, total)
  self.label, self.total, self.t0, self.n = label, total, now(), 0
  self.last = self.inplace and -math.huge or self.t0
end
function Progress:line(n, extra)
  local el = now() - self.t0
  local rate = n > 0 and el > 0 and n / el or 0
  local tot = self.total and self.total > 0 and tostring(self.total) or "?"
  local eta = (self.total and rate > 0) and fmt_time((self.total - n) / rate) or "?"
  return ("%s %d/%s [%s<%s, %.2f it/s]%s"):format(self.label, n, tot, fmt_time(el), eta, rate, extra or "")
end
function Progress:update(n, extra_fn)
  self.n = n
  local t = now()
  local period = self.inplace and 0.1 or 10
  if t - self.last < period then return end
  self.last = t
  local s = self:line(n, extra_fn and extra_fn() or "")
  if self.inplace then self.out:write("\r", s, "\27[K") else self.out:write(s, "\n") end
  self.out:flush()
end
function Progress:finish(extra)
  local s = self:line(self.n, extra or "")
  if self.inplace then self.out:write("\r", s, "\27[K\n") else self.out:write(s, "\n") end
  self.out:flush()
end

-- ---- Trainer -------------------------------------------------------------------------------------
local Trainer = {}
Trainer.__index = Trainer
Trainer.__name = "Trainer"
M.Trainer = Trainer

local OPTIONS = {max_epochs = true, min_epochs = true, max_steps = true, limit_train_batches = true,
  limit_val_batches = true, limit_test_batches = true, limit_predict_batches = true, val_check_interval = true,
  check_val_every_n_epoch = true, num_sanity_val_steps = true, accumulate_grad_batches = true,
  gradient_clip_val = true, gradient_clip_algorithm = true, seed = true, fast_dev_run = true,
  enable_progress_bar = true, progress_bar_inplace = true, callbacks = true, logger = true, default_root_dir = true,
  log_every_n_steps = true, enable_checkpointing = true, progress_out = true, max_time = true,
  accelerator = true, devices = true, strategy = true, num_nodes = true, precision = true, deterministic = true}

-- ---- devices, strategy, precision -----------------------------------------------------------------
local PRECISIONS = {["32-true"] = true, ["32"] = true, [32] = true}
local MIXED = {["bf16-mixed"] = true, ["16-mixed"] = true, ["bf16-true"] = true, ["16-true"] = true, [16] = true,
               ["16"] = true, ["bf16"] = true, ["64-true"] = true, [64] = true, ["64"] = true}
local function env_int(name)
  local v = os.getenv(name)
  return v and math.tointeger(tonumber(v)) or nil
end

-- accelerator/devices/strategy/num_nodes/precision/deterministic into the trainer; ddp outside a
-- launcher with devices > 1 starts one (see Trainer:_launch)
local function setup_devices(self, opts)
  local acc = opts.accelerator
  if acc == "gpu" then acc = "cuda" end
  if acc == "auto" then acc = tc.cuda.is_available() and "cuda" or "cpu" end
  if acc ~= nil and acc ~= "cpu" and acc ~= "cuda" then
    raise("ValueError", "tc.Trainer: accelerator is 'cpu', 'cuda' (or 'gpu') or 'auto', got " .. tostring(acc))
  end
  self.accelerator = acc
  local strategy = opts.strategy or "auto"
  if strategy ~= "auto" and strategy ~= "ddp" and strategy ~= "single_device" then
    raise("ValueError", "tc.Trainer: strategy is 'auto', 'single_device' or 'ddp', got " .. tostring(strategy))
  end
  local devices = opts.devices or "auto"
  local world = env_int("WORLD_SIZE")
  if devices == "auto" or devices == -1 then
    devices = env_int("LOCAL_WORLD_SIZE") or ((acc == "cuda") and math.max(1, tc.cuda.device_count()) or 1)
  end
  if math.type(devices) ~= "integer" or devices < 1 then
    raise("ValueError", "tc.Trainer: devices is a count >= 1, -1 or 'auto', got " .. tostring(devices))
  end
  self.num_nodes = opts.num_nodes or 1
  if strategy == "auto" then strategy = (devices * self.num_nodes > 1 or (world and world > 1)) and "ddp" or "single_device" end
  self.strategy, self.num_devices = strategy, devices
  if strategy == "ddp" and world and env_int("LOCAL_WORLD_SIZE") and env_int("LOCAL_WORLD_SIZE") ~= devices then
    raise("ValueError", ("tc.Trainer: devices = %d, but tcrun started %d processes on this node (--nproc-per-node)")
      :format(devices, env_int("LOCAL_WORLD_SIZE")))
  end
  self.global_rank, self.local_rank, self.world_size = env_int("RANK") or 0, env_int("LOCAL_RANK") or 0, world or 1
  local prec = opts.precision or "32-true"
  if MIXED[prec] then
    raise("NotImplementedError", ("tc.Trainer: precision = %s needs mixed precision (autocast and GradScaler), which tc does not "
      .. "have yet; use '32-true'"):format(tostring(prec)))
  end
  if not PRECISIONS[prec] then raise("ValueError", "tc.Trainer: precision is '32-true' (mixed precision is not there yet), got " .. tostring(prec)) end
  self.precision = "32-true"
  self.deterministic = opts.deterministic or false
  if self.deterministic ~= false and self.deterministic ~= true and self.deterministic ~= "warn" then
    raise("ValueError", "tc.Trainer: deterministic is true, false or 'warn', got " .. tostring(self.deterministic))
  end
end

-- A duration as Lightning takes it (max_time, Timer's duration): seconds >= 0, "DD:HH:MM:SS" or a
-- table of days/hours/minutes/seconds. nil for nil, false for anything else (the caller names it).
function M._duration_seconds(d)
  if d == nil then return nil end
  if type(d) == "number" and d >= 0 then return d end
  if type(d) == "string" then
    local dd, hh, mm, ss = d:match("^(%d+):(%d%d?):(%d%d?):(%d%d?)$")
    if dd then return ((tonumber(dd) * 24 + tonumber(hh)) * 60 + tonumber(mm)) * 60 + tonumber(ss) end
  elseif type(d) == "table" then
    local total = 0
    for k, v in pairs(d) do
      local mult = ({days = 86400, hours = 3600, minutes = 60, seconds = 1})[k]
      if not mult or type(v) ~= "number" or v < 0 then return false end
      total = total + v * mult
    end
    return total
  end
  return false
end
local function seconds_of(t)
  local s = M._duration_seconds(t)
  if s == false then
    raise("ValueError", 'tc.Trainer: max_time is seconds, "DD:HH:MM:SS" or {days, hours, minutes, seconds}, got ' .. tostring(t))
  end
  return s
end

local function new_trainer(cls, opts)
  opts = opts or {}
  opt_check(opts, OPTIONS, "tc.Trainer")
  local self = setmetatable({}, cls)
  setup_devices(self, opts)
  self.fast_dev_run = opts.fast_dev_run or false
  local fdr = self.fast_dev_run
  local fdr_n = fdr == true and 1 or (math.type(fdr) == "integer" and fdr > 0 and fdr) or nil
  self.max_steps = opts.max_steps or -1
  self.max_epochs = opts.max_epochs or (self.max_steps == -1 and 1000 or -1)
  self.min_epochs = opts.min_epochs or 0
  self.max_time = seconds_of(opts.max_time)
  self.limit_train_batches = opts.limit_train_batches or 1.0
  self.limit_val_batches = opts.limit_val_batches or 1.0
  self.limit_test_batches = opts.limit_test_batches or 1.0
  self.limit_predict_batches = opts.limit_predict_batches or 1.0
  self.val_check_interval = opts.val_check_interval or 1.0
  self.check_val_every_n_epoch = opts.check_val_every_n_epoch or 1
  self.num_sanity_val_steps = opts.num_sanity_val_steps or 2
  self.accumulate_grad_batches = opts.accumulate_grad_batches or 1
  if math.type(self.accumulate_grad_batches) ~= "integer" or self.accumulate_grad_batches < 1 then
    raise("ValueError", "tc.Trainer: accumulate_grad_batches must be an integer >= 1")
  end
  self.gradient_clip_val = opts.gradient_clip_val
  self.gradient_clip_algorithm = opts.gradient_clip_algorithm or "norm"
  if self.gradient_clip_algorithm ~= "norm" and self.gradient_clip_algorithm ~= "value" then
    raise("ValueError", "tc.Trainer: gradient_clip_algorithm is 'norm' or 'value', got " .. tostring(self.gradient_clip_algorithm))
  end
  self.seed = opts.seed
  self.default_root_dir = opts.default_root_dir or "."
  self.log_every_n_steps = opts.log_every_n_steps or 50
  self.callbacks = {}
  for i, cb in ipairs(opts.callbacks or {}) do self.callbacks[i] = cb end
  local enable_ckpt = opts.enable_checkpointing
  if fdr_n then
    self.max_epochs, self.max_steps = 1, fdr_n
    self.limit_train_batches, self.limit_val_batches, self.limit_test_batches, self.limit_predict_batches = fdr_n, fdr_n, fdr_n, fdr_n
    self.num_sanity_val_steps, self.val_check_interval = 0, 1.0
  end
  self.is_global_zero = self.global_rank == 0
  if opts.logger == false or fdr_n or not self.is_global_zero then self.logger = nil
  elseif opts.logger == nil or opts.logger == true then self.logger = CSVLogger(self.default_root_dir)
  else self.logger = opts.logger end
  self.enable_progress_bar = opts.enable_progress_bar ~= false and self.is_global_zero
  local inplace = opts.progress_bar_inplace
  if inplace == nil and self.enable_progress_bar then inplace = stdout_is_terminal() end
  self.progress = Progress.new(inplace, opts.progress_out)
  self.eval_progress = Progress.new(inplace, opts.progress_out)
  -- enable_checkpointing = false drops ModelCheckpoint callbacks; unlike Lightning, none is added by default
  self.enable_checkpointing = enable_ckpt ~= false
  if enable_ckpt == false then
    local kept = {}
    for _, cb in ipairs(self.callbacks) do if getmetatable(cb) ~= ModelCheckpoint then kept[#kept + 1] = cb end end
    self.callbacks = kept
  end
  self.current_epoch, self.global_step, self.should_stop, self.sanity_checking = 0, 0, false, false
  self.callback_metrics, self.logged_metrics, self.progress_bar_metrics = {}, {}, {}
  self.recompiles = 0
  return self
end
setmetatable(Trainer, {__call = new_trainer})

function Trainer:_metric_names()
  local t = {}
  for k in pairs(self.callback_metrics) do t[#t + 1] = k end
  table.sort(t)
  return #t > 0 and table.concat(t, ", ") or "none"
end

-- hooks: callbacks first, then the module (Lightning's order); on_train_epoch_end runs the callbacks that
-- monitor a metric (EarlyStopping, ModelCheckpoint: `monitoring = true`) after the module, as Lightning
-- does, so they see what the module logged there.
function Trainer:_call(hook, ...)
  local m = self.lightning_module
  local split = hook == "on_train_epoch_end"
  for _, cb in ipairs(self.callbacks) do
    local f = cb[hook]
    if f and not (split and cb.monitoring) then f(cb, self, m, ...) end
  end
  if m and type(m[hook]) == "function" then m[hook](m, ...) end
  if split then
    for _, cb in ipairs(self.callbacks) do
      if cb.monitoring then cb[hook](cb, self, m, ...) end
    end
  end
end

-- ---- logging ---------------------------------------------------------------------------------------
local function value_of(v)
  if tc.is_tensor(v) then return v:detach() end
  if type(v) == "number" then return v end
  if type(v) == "boolean" then return v and 1 or 0 end
  raise("ValueError", "self:log(): the value must be a number or a tensor, got " .. type(v))
end
local function to_number(v)
  if tc.is_tensor(v) then return v:float():item() end
  return v
end

function Trainer:_log(name, value, opts)
  opts = opts or {}
  if type(name) ~= "string" then raise("ValueError", "self:log(): the name must be a string") end
  local stage = self._stage or "train"
  local on_step, on_epoch = opts.on_step, opts.on_epoch
  if on_step == nil then on_step = stage == "train" and not self._in_epoch_hook end
  if on_epoch == nil then on_epoch = stage ~= "train" or self._in_epoch_hook == true end
  local v = value_of(value)
  if tc.is_tensor(v) and v:numel() ~= 1 then raise("ValueError", ("self:log('%s'): a tensor value must have one element"):format(name)) end
  if tc.is_tensor(v) and v:dim() > 0 then v = v:reshape({}) end
  if self.sanity_checking then return end
  local step_name = (on_step and on_epoch) and name .. "_step" or name
  local epoch_name = (on_step and on_epoch) and name .. "_epoch" or name
  if on_step then
    self._step_metrics[step_name] = v
    self.callback_metrics[step_name] = v
    if opts.prog_bar then self.progress_bar_metrics[step_name] = v end
  end
  if on_epoch then
    local st = self:_acc(stage)
    local acc = st.acc[epoch_name]
    if not acc then
      acc = {sum = 0, n = 0, prog_bar = opts.prog_bar, sync_dist = opts.sync_dist}
      st.acc[epoch_name] = acc
      st.order[#st.order + 1] = epoch_name
    end
    if tc.is_tensor(v) then v = v:double() end
    acc.sum, acc.n = acc.sum + v, acc.n + 1
  end
end

-- per-stage epoch accumulators (a validation run inside a training epoch keeps its own)
function Trainer:_acc(stage)
  local st = self._epoch[stage]
  if not st then st = {acc = {}, order = {}}; self._epoch[stage] = st end
  return st
end

-- epoch metrics of `stage`: one item() per metric per epoch
function Trainer:_reduce_epoch(stage)
  local out = {}
  local st = self:_acc(stage)
  self._epoch[stage] = nil
  for _, name in ipairs(st.order) do
    local acc = st.acc[name]
    local v = to_number(acc.sum) / acc.n
    if acc.sync_dist and self._ddp then  -- the mean over ranks (every rank logs the same names in the same order)
      local t = tc.tensor({v}, {dtype = tc.float64, device = self.device or "cpu"})
      require("tc.distributed").all_reduce(t, "avg")
      v = t:item()
    end
    out[name] = v
    self.callback_metrics[name] = v
    self.logged_metrics[name] = v
    if acc.prog_bar then self.progress_bar_metrics[name] = v end
  end
  for k, v in pairs(self.callback_metrics) do if tc.is_tensor(v) then self.callback_metrics[k] = to_number(v) end end
  if self.logger and next(out) then self.logger:log_metrics(out, self.global_step, self.current_epoch) end
  return out
end

function Trainer:_flush_step_metrics(force)
  if not next(self._step_metrics) then return end
  if force or self.global_step % self.log_every_n_steps == 0 then
    local row = {}
    for k, v in pairs(self._step_metrics) do
      row[k] = to_number(v); self.logged_metrics[k] = row[k]; self.callback_metrics[k] = row[k]
    end
    if self.logger then self.logger:log_metrics(row, self.global_step, self.current_epoch) end
  end
  self._step_metrics = {}
end

-- ---- helpers -------------------------------------------------------------------------------------
local function loader_len(loader)
  local ok, n = pcall(function() return #loader end)
  if ok and math.type(n) == "integer" then return n end
  return nil
end

local function limit_batches(limit, n, what)
  if math.type(limit) == "integer" then
    if limit < 0 then raise("ValueError", what .. " must be >= 0") end
    return n and math.min(limit, n) or limit
  end
  if type(limit) ~= "number" or limit < 0 or limit > 1 then
    raise("ValueError", what .. " is an integer count or a fraction in [0, 1], got " .. tostring(limit))
  end
  if n == nil then
    if limit == 1.0 then return nil end
    raise("ValueError", what .. " as a fraction needs a loader with a length")
  end
  return math.floor(n * limit)
end

local function iterate(loader)
  if type(loader) == "function" then return loader end
  if type(loader) == "table" and type(loader.iter) == "function" then return loader:iter() end
  if type(loader) == "table" then
    local i = 0
    return function() i = i + 1; return loader[i] end
  end
  raise("ValueError", "a dataloader must be a DataLoader, an array of batches or an iterator function, got " .. type(loader))
end

local function is_scheduler(s) return type(s) == "table" and type(s.step) == "function" and s.get_last_lr ~= nil end
local function is_optimizer(o)
  return type(o) == "table" and type(o.step) == "function" and o.param_groups ~= nil and not is_scheduler(o)
end

local function sched_config(s)
  if is_scheduler(s) then return {scheduler = s, interval = "epoch", frequency = 1} end
  if type(s) == "table" and is_scheduler(s.scheduler) then
    local interval = s.interval or "epoch"
    if interval ~= "epoch" and interval ~= "step" then
      raise("ValueError", "configure_optimizers(): a scheduler's interval is 'epoch' or 'step', got " .. tostring(interval))
    end
    return {scheduler = s.scheduler, interval = interval, frequency = s.frequency or 1}
  end
  raise("ValueError", "configure_optimizers(): expected an lr scheduler or {scheduler = ..., interval = ...}")
end

-- configure_optimizers() forms: opt; {opt, sched}; {optimizer = opt, lr_scheduler = sched | config};
-- {{opt}, {sched}}; {{optimizer = ..., lr_scheduler = ...}}.
local function parse_optimizers(r)
  local opts, scheds = {}, {}
  local function add(x)
    if is_optimizer(x) then opts[#opts + 1] = x
    elseif is_scheduler(x) or (type(x) == "table" and is_scheduler(x.scheduler)) then scheds[#scheds + 1] = sched_config(x)
    elseif type(x) == "table" and is_optimizer(x.optimizer) then  -- (a scheduler has .optimizer too: checked above)
      opts[#opts + 1] = x.optimizer
      if x.lr_scheduler ~= nil then scheds[#scheds + 1] = sched_config(x.lr_scheduler) end
    elseif type(x) == "table" and #x > 0 then for _, y in ipairs(x) do add(y) end
    else raise("ValueError", "configure_optimizers() returned something that is not an optimizer or scheduler: " .. tostring(x)) end
  end
  if r == nil then raise("ValueError", "configure_optimizers() returned nothing") end
  add(r)
  if #opts == 0 then raise("ValueError", "configure_optimizers() returned no optimizer") end
  if #opts > 1 then
    raise("ValueError", "configure_optimizers() returned several optimizers: tc.Trainer has automatic optimization only, "
      .. "which takes one optimizer (manual optimization is not there yet)")
  end
  return opts, scheds
end

local function loss_of(out, what)
  if tc.is_tensor(out) then return out end
  if type(out) == "table" and tc.is_tensor(out.loss) then return out.loss end
  if out == nil then return nil end
  raise("ValueError", what .. " must return a loss tensor, a table with .loss, or nil to skip the batch")
end

-- ---- compiled modules --------------------------------------------------------------------------------
-- tc.compile(model) gives a wrapper with ._orig_mod: the Trainer runs the hooks on the module itself
-- and compiles its *_step methods (the seed's behaviour).
-- The batch index is passed only to
-- a step that declares it (`training_step(batch, i)`): the compiled call guards on it, which costs one
-- recompile (at i = 2, after which it is dynamic); `training_step(batch)` has none.
local function buffered(m, f, batch, cur)
  local logs = {}
  local prev = rawget(m, "_tc_log_buffer")
  rawset(m, "_tc_log_buffer", logs)
  local out
  if cur.pass_index then out = f(m, batch, cur.i) else out = f(m, batch) end
  rawset(m, "_tc_log_buffer", prev)
  return out, logs
end
-- A fresh function (its own code object, so its own compile cache) per step kind and per attach:
-- training and validation do not share a cache, nor do two Trainers or two modules in one process.
-- (The compiler names and caches functions by source and line, so each gets a chunk name of its own.)
local attached = 0
local function step_function(name, m, f, cur)
  attached = attached + 1
  local make = load("local buffered, m, f, cur = ...\nreturn function(batch) return buffered(m, f, batch, cur) end",
                    ("=%s#%d"):format(name, attached))
  return make(buffered, m, f, cur)
end

function Trainer:_attach(model)
  if type(model) ~= "table" then raise("ValueError", "tc.Trainer: expected a module, got " .. type(model)) end
  local m = rawget(model, "_orig_mod") or model
  self.lightning_module, self.compiled = m, rawget(model, "_orig_mod") ~= nil
  rawset(m, "trainer", self)
  if m.log == nil then rawset(m, "log", LightningModule.log); rawset(m, "log_dict", LightningModule.log_dict) end
  self._steps = {}
  for _, name in ipairs({"training_step", "validation_step", "test_step", "predict_step"}) do
    local f = m[name]
    if type(f) == "function" then
      if self.compiled then
        -- self:log inside a compiled step goes to a buffer the step returns (no trainer state is read
        -- while tracing); the trainer logs its entries after the call.
        local info = debug.getinfo(f, "u")
        local cur = {pass_index = info.nparams >= 3 or info.isvararg}
        local cf = tc.compile(step_function(name, m, f, cur))
        local calls = 0
        self._steps[name] = function(batch, i)
          calls = calls + 1
          if calls == 1 then self:_progress_note("compiling " .. name .. " …") end
          local s0, t0 = tc.compiler.stats(), now()
          cur.i = i
          local out, logs = cf(batch)
          local s1 = tc.compiler.stats()
          if s1.traces ~= s0.traces or s1.recompiles ~= s0.recompiles then
            self:_compile_event(name, calls, batch, s1.recompiles - s0.recompiles, now() - t0)
          end
          for _, e in ipairs(logs or {}) do self:_log(e[1], e[2], e[3]) end
          return out
        end
      else
        self._steps[name] = function(batch, i) return f(m, batch, i) end
      end
    end
  end
  self._stats0 = tc.compiler.stats()
  self.compile_events = {}
  self._step_metrics, self._epoch = {}, {}
  return m
end

local function shapes_of(v, out, depth)
  out = out or {}
  if tc.is_tensor(v) then
    local dims = {}
    for d = 1, v:dim() do dims[d] = tostring(v:size(d)) end
    out[#out + 1] = ("%s[%s]"):format(tostring(v.dtype):gsub("^tc%.", ""), table.concat(dims, ", "))
  elseif type(v) == "table" and (depth or 0) < 3 and #out < 8 then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do shapes_of(v[k], out, (depth or 0) + 1) end
  end
  return out
end

-- a compiled step traced (first call) or recompiled: say so, with the batch's shapes as the likely why
function Trainer:_compile_event(name, calls, batch, recompiles, seconds)
  local where = self.sanity_checking and "sanity check" or (self._stage == "train" and ("step %d"):format(self.global_step)
    or self._stage or "?")
  local ev = {step = name, call = calls, recompiles = recompiles, seconds = seconds, at = where,
              shapes = table.concat(shapes_of(batch), ", ")}
  self.compile_events[#self.compile_events + 1] = ev
  if not self.enable_progress_bar then return end
  local what = calls == 1 and ("compiled %s in %.2f s"):format(name, seconds)
    or ("%s recompiled (%.2f s) at %s for batch shapes %s (TC_LOGS=recompiles names the failing guard)"):format(
      name, seconds, where, ev.shapes)
  self:_progress_note(what, true)
end

-- a line about compilation: in place, it replaces the progress line until the next update
function Trainer:_progress_note(text, final)
  if not self.enable_progress_bar then return end
  local p = self._stage == "train" and not self.sanity_checking and self.progress or self.eval_progress
  if p.inplace then p.out:write("\r", p.label or "", " ", text, "\27[K", final and "\n" or "")
  else p.out:write(text, "\n") end
  p.out:flush()
end

function Trainer:_compile_report()
  if not self.compiled then return end
  local s0, s1 = self._stats0 or {}, tc.compiler.stats()
  local rec = (s1.recompiles or 0) - (s0.recompiles or 0)
  local tr = (s1.traces or 0) - (s0.traces or 0)
  local gb = (s1.graph_breaks or 0) - (s0.graph_breaks or 0)
  self.recompiles = rec
  self.compile_stats = {recompiles = rec, traces = tr, graph_breaks = gb,
                        compile_ms = (s1.compile_ms or 0) - (s0.compile_ms or 0)}
  if self.enable_progress_bar then
    io.stdout:write(("tc.Trainer: compiled steps: %d traces, %d recompiles, %d graph breaks, %.0f ms compiling%s\n"):format(
      tr, rec, gb, self.compile_stats.compile_ms,
      rec > 0 and " (recompiles come from new shapes: validation batches or a smaller last batch; "
        .. "tc.compiler.explain or TC_LOGS=recompiles names them)" or ""))
  end
end

-- moves the tensors of a batch (nested tables) to the trainer's device
local function to_device(b, dev, depth)
  if tc.is_tensor(b) then
    if tostring(b.device) == dev then return b end
    -- a pinned batch (DataLoader{pin_memory = true}) is copied without waiting, as Lightning does
    return b:to(dev, {non_blocking = b:is_pinned()})
  end
  if type(b) == "table" and getmetatable(b) == nil and (depth or 0) < 8 then
    local out = {}
    for k, v in pairs(b) do out[k] = to_device(v, dev, (depth or 0) + 1) end
    return out
  end
  return b
end

-- ---- loops ---------------------------------------------------------------------------------------------
function Trainer:_prog_extra(loss)
  local parts = {}
  if loss ~= nil then parts[#parts + 1] = ("loss=%.4g"):format(to_number(loss)) end
  local names = {}
  for k in pairs(self.progress_bar_metrics) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do parts[#parts + 1] = ("%s=%.4g"):format(k, to_number(self.progress_bar_metrics[k])) end
  return #parts > 0 and " " .. table.concat(parts, " ") or ""
end

local EVAL = {
  validate = {step = "validation_step", hook = "validation", limit = "limit_val_batches", label = "Validation"},
  test = {step = "test_step", hook = "test", limit = "limit_test_batches", label = "Testing"},
  predict = {step = "predict_step", hook = "predict", limit = "limit_predict_batches", label = "Predicting"},
}

-- one evaluation run (validation, test or predict) over `loader`, at most `max_batches` batches
function Trainer:_eval_loop(kind, loader, max_batches)
  local e, m = EVAL[kind], self.lightning_module
  local step = self._steps[e.step]
  if not step then
    if kind == "predict" then step = function(batch) return m(batch) end
    else return nil end
  end
  local n = limit_batches(self[e.limit], loader_len(loader), e.limit)
  if max_batches and (n == nil or max_batches < n) then n = max_batches end
  if n == 0 then return nil end
  local was_training = m.training
  m:eval()
  local prev_stage = self._stage
  self._stage = kind
  local outputs = {}
  local _ <close> = tc.no_grad()
  self:_call("on_" .. e.hook .. "_start")
  self:_call("on_" .. e.hook .. "_epoch_start")
  local progress = self.eval_progress
  if self.enable_progress_bar then progress:start(self.sanity_checking and "Sanity Checking" or e.label, n) end
  local it, i = iterate(loader), 0
  while n == nil or i < n do
    local batch = it()
    if batch == nil then break end
    i = i + 1
    if self.device then batch = to_device(batch, self.device) end
    self:_call("on_" .. e.hook .. "_batch_start", batch, i)
    local out = step(batch, i)
    if kind == "predict" then outputs[#outputs + 1] = out end
    self:_call("on_" .. e.hook .. "_batch_end", out, batch, i)
    if self.enable_progress_bar then progress:update(i) end
  end
  self._in_epoch_hook = true
  self:_call("on_" .. e.hook .. "_epoch_end")
  self._in_epoch_hook = nil
  local metrics = kind ~= "predict" and not self.sanity_checking and self:_reduce_epoch(kind) or {}
  self._epoch[kind] = nil
  if self.enable_progress_bar then progress:finish(self:_prog_extra()) end
  self:_call("on_" .. e.hook .. "_end")
  self._stage = prev_stage
  if was_training then m:train() end
  return kind == "predict" and outputs or metrics
end

function Trainer:_seed()
  if self.seed ~= nil then tc.manual_seed(self.seed) end
end

local function module_loader(m, name, given)
  if given ~= nil then return given end
  if type(m[name]) == "function" then return m[name](m) end
  return nil
end

function Trainer:_optimizer_step(params)
  local opt = self.optimizers[1]
  self:_call("on_before_optimizer_step", opt)
  if self.gradient_clip_val and self.gradient_clip_val > 0 then
    if self.gradient_clip_algorithm == "norm" then nn.utils.clip_grad_norm_(params, self.gradient_clip_val)
    else nn.utils.clip_grad_value_(params, self.gradient_clip_val) end
  end
  opt:step()
  self.global_step = self.global_step + 1
  self._stepped = true
  for _, s in ipairs(self.lr_schedulers) do
    if s.interval == "step" and self.global_step % s.frequency == 0 then s.scheduler:step() end
  end
end

-- ---- ddp and devices ----------------------------------------------------------------------------------
-- strategy = "ddp" outside tcrun's launcher (no WORLD_SIZE): run this script again as `tcrun
-- --nproc-per-node devices script args...` (Lightning's subprocess launcher), wait, and exit with its status.
function Trainer:_launch()
  if os.getenv("WORLD_SIZE") or self.strategy ~= "ddp" then return end
  if self.num_nodes > 1 then
    raise("ValueError", ("tc.Trainer: num_nodes = %d: start the script on each node with tcrun --nnodes %d --node-rank R "
      .. "--master-addr A --master-port P --nproc-per-node %d"):format(self.num_nodes, self.num_nodes, self.num_devices))
  end
  local tcrun = arg and arg[-1]
  if not (tcrun and arg[0]) then
    raise("ValueError", "tc.Trainer: strategy = 'ddp' with devices > 1 starts its processes through tcrun: run the script with "
      .. ("tcrun --nproc-per-node %d script.lua"):format(self.num_devices))
  end
  local function q(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end
  local cmd = {q(tcrun), "--nproc-per-node", tostring(self.num_devices), q(arg[0])}
  for k = 1, #arg do cmd[#cmd + 1] = q(arg[k]) end
  io.stdout:write(("tc.Trainer: strategy = 'ddp', devices = %d: starting %d processes (%s)\n"):format(self.num_devices,
    self.num_devices, table.concat(cmd, " ")))
  io.stdout:flush()
  local ok, how, code = os.execute(table.concat(cmd, " "))
  os.exit(ok and 0 or (how == "signal" and 128 + code or code), true)
end

-- a DataLoader whose sampler is a DistributedSampler over the same dataset (Lightning's
-- use_distributed_sampler): each rank takes its share; shuffling follows the loader's
function Trainer:_distributed_loader(loader, shuffle_default)
  local data = tc.utils.data
  if self.world_size <= 1 or type(loader) ~= "table" or getmetatable(loader) ~= data.DataLoader or loader.iterable then
    return loader
  end
  local s = loader.sampler
  if type(s) == "table" and getmetatable(s) and getmetatable(s).__name == "tc.distributed.DistributedSampler" then return loader end
  if loader.batch_size == false or (s and getmetatable(s) ~= data.RandomSampler and getmetatable(s) ~= data.SequentialSampler) then
    raise("ValueError", "tc.Trainer(strategy = 'ddp'): the loader has a sampler of its own; give it a tc.distributed.DistributedSampler")
  end
  local shuffle = getmetatable(s) == data.RandomSampler or (s == nil and shuffle_default)
  local dist = require "tc.distributed"
  local ds = loader.dataset
  local sampler = dist.DistributedSampler(#ds, {shuffle = shuffle, seed = self.seed or 0, drop_last = loader.drop_last})
  return data.DataLoader(ds, {batch_size = loader.batch_size, sampler = sampler, collate_fn = loader.collate_fn,
    num_workers = loader.num_workers, drop_last = loader.drop_last, prefetch_factor = loader.prefetch_factor,
    persistent_workers = loader.persistent_workers or nil, pin_memory = loader.pin_memory or nil})
end

-- the process group, the model on its device, the DDP wrapper (gradient averaging by hooks)
function Trainer:_setup_strategy(m)
  if self.accelerator == "cuda" then
    self.device = "cuda:" .. self.local_rank
    m:to(self.device)
  elseif self.accelerator == "cpu" then
    self.device = "cpu"
    m:to("cpu")
  end
  if self.strategy ~= "ddp" then return end
  local dist = require "tc.distributed"
  if not dist.is_initialized() then dist.init_process_group({backend = self.accelerator == "cuda" and "nccl" or "gloo"}) end
  self.world_size, self.global_rank = dist.get_world_size(), dist.get_rank()
  if not self._ddp or self._ddp.module ~= m then self._ddp = nn.parallel.DistributedDataParallel(m) end
end

-- fit's options table (in place of the loaders): {ckpt_path = path | "last"}
local function is_fit_options(t)
  return type(t) == "table" and getmetatable(t) == nil and #t == 0 and t.ckpt_path ~= nil
end

-- trainer:fit(model, train_loader, val_loader, {ckpt_path = ...}) (the loaders default to
-- model:train_dataloader() / model:val_dataloader(); the options may come in a loader's place).
-- With ckpt_path, the run continues from a checkpoint save_checkpoint wrote (Trainer:_restore).
function Trainer:fit(model, train_loader, val_loader, opts)
  if is_fit_options(train_loader) then opts, train_loader, val_loader = train_loader, nil, nil
  elseif is_fit_options(val_loader) then opts, val_loader = val_loader, nil end
  opts = opts or {}
  opt_check(opts, {ckpt_path = true}, "tc.Trainer:fit")
  self:_launch()
  local m = self:_attach(model)
  self:_seed()
  self:_setup_strategy(m)
  train_loader = module_loader(m, "train_dataloader", train_loader)
  if train_loader == nil then raise("ValueError", "tc.Trainer:fit(): no training data (pass a loader or define train_dataloader)") end
  val_loader = module_loader(m, "val_dataloader", val_loader)
  train_loader = self:_distributed_loader(train_loader, true)
  if val_loader ~= nil then val_loader = self:_distributed_loader(val_loader, false) end
  if not self._steps.training_step then raise("ValueError", "tc.Trainer:fit(): the module has no training_step") end
  if type(m.configure_optimizers) ~= "function" then raise("ValueError", "tc.Trainer:fit(): the module has no configure_optimizers") end
  self.optimizers, self.lr_schedulers = parse_optimizers(m:configure_optimizers())
  self.train_dataloader, self.val_dataloaders = train_loader, val_loader
  self.should_stop = false
  local resume = opts.ckpt_path and self:_restore(m, opts.ckpt_path) or nil
  local has_val = val_loader ~= nil and self._steps.validation_step ~= nil
  local params = m:parameters()
  self._stage = "train"
  self:_call("on_fit_start")
  if has_val and self.num_sanity_val_steps ~= 0 then
    self.sanity_checking = true
    self:_call("on_sanity_check_start")
    self:_eval_loop("validate", val_loader, self.num_sanity_val_steps > 0 and self.num_sanity_val_steps or nil)
    self:_call("on_sanity_check_end")
    self.sanity_checking = false
  end
  m:train()
  self._stage = "train"
  self:_call("on_train_start")
  local accum = self.accumulate_grad_batches
  local done, t_fit = false, now()
  if resume then
    -- the random stream as it was when the checkpoint was written (after the sanity check, which
    -- the interrupted run did not repeat there)
    tc.set_rng_state(resume.rng)
    t_fit = t_fit - (resume.elapsed or 0)
    if self.max_steps >= 0 and self.global_step >= self.max_steps then done = true end
  end
  self._t_fit = t_fit
  -- a stop asked for before the loop (a Timer whose time is spent, a resumed EarlyStopping) runs no
  -- batch, as Lightning's fit loop
  -- (a run resumed inside an epoch finishes that epoch's end first, as the interrupted run would)
  if self.should_stop and self.current_epoch >= self.min_epochs and not (resume and resume.phase ~= "train_epoch_end") then
    done = true
  end
  while not done and (self.max_epochs < 0 or self.current_epoch < self.max_epochs) do
    local rs = resume
    resume = nil
    local n_all = loader_len(train_loader)
    local n = limit_batches(self.limit_train_batches, n_all, "limit_train_batches")
    local vci = self.val_check_interval
    local val_every
    if math.type(vci) == "integer" then
      if vci < 1 or (n and vci > n and has_val) then
        raise("ValueError", ("tc.Trainer: val_check_interval = %d must be in 1..%d, the training batches of an epoch"):format(vci, n or 0))
      end
      val_every = vci
    elseif type(vci) == "number" and vci > 0 and vci <= 1 then
      if n then val_every = math.max(1, math.floor(n * vci)) end
    else
      raise("ValueError", "tc.Trainer: val_check_interval is an integer count of batches or a fraction in (0, 1], got " .. tostring(vci))
    end
    if type(train_loader) == "table" and train_loader.set_epoch then train_loader:set_epoch(self.current_epoch) end
    -- a resumed epoch: the loader gives the batches after the checkpoint's (a loader with
    -- load_state_dict skips them without loading them; an array or iterator is advanced past them)
    local i, at_epoch_end = 0, rs ~= nil and rs.phase == "train_epoch_end"
    local loader_restored = rs ~= nil and rs.loader ~= nil and type(train_loader) == "table"
      and type(train_loader.load_state_dict) == "function"
    if loader_restored then train_loader:load_state_dict(rs.loader, {mid_epoch = not at_epoch_end}) end
    if not at_epoch_end then
      self:_call("on_train_epoch_start")
      if self.enable_progress_bar then self.progress:start(("Epoch %d"):format(self.current_epoch), n) end
    end
    local it, last_loss = not at_epoch_end and iterate(train_loader) or nil, nil
    local validated_at, pending = nil, false
    -- what follows a batch's on_train_batch_end (a resumed run starts there, or after the validation
    -- that followed it): true when the epoch loop ends
    local function after_batch(from_validation)
      if not from_validation then
        self:_flush_step_metrics(false)
        if self.enable_progress_bar then self.progress:update(i, function() return self:_prog_extra(last_loss) end) end
        if self.max_steps >= 0 and self.global_step >= self.max_steps then done = true end
        if self.max_time and now() - t_fit >= self.max_time then done = true end
        if has_val and val_every and i % val_every == 0 and (self.current_epoch + 1) % self.check_val_every_n_epoch == 0 then
          self._pos = {batch = i, phase = "validation", pending = pending}
          self:_eval_loop("validate", val_loader)
          validated_at = i
        end
      else
        validated_at = i
        if self.max_steps >= 0 and self.global_step >= self.max_steps then done = true end
      end
      return done or self.should_stop
    end
    local stop = false
    if rs and not at_epoch_end then
      i = rs.batch
      pending = rs.pending or false
      if not loader_restored then
        for _ = 1, i do if it() == nil then break end end
      end
      if self.enable_progress_bar then self.progress:update(i, function() return "" end) end
      stop = after_batch(rs.phase == "validation")
    end
    while not stop and not at_epoch_end and (n == nil or i < n) do
      local batch = it()
      if batch == nil then break end
      i = i + 1
      self._stepped = false
      self:_call("on_train_batch_start", batch, i)
      if self.device then batch = to_device(batch, self.device) end
      local out = self._steps.training_step(batch, i)
      local loss = loss_of(out, "training_step")
      local last_of_epoch = (n ~= nil and i == n)
      local do_step = (i % accum == 0) or last_of_epoch
      if loss ~= nil then
        if (i - 1) % accum == 0 then
          self:_call("on_before_zero_grad", self.optimizers[1])
          self.optimizers[1]:zero_grad()
        end
        local scaled = accum > 1 and loss / accum or loss
        self:_call("on_before_backward", scaled)
        -- ddp: no all-reduce until the window's last backward (Lightning's no_sync)
        local _ <close> = (self._ddp and not do_step) and self._ddp:no_sync() or nil
        scaled:backward()
        self:_call("on_after_backward")
        last_loss = loss:detach()
        pending = not do_step
        if do_step then self:_optimizer_step(params) end
      end
      self._pos = {batch = i, phase = "train_batch_end", pending = pending}
      self:_call("on_train_batch_end", out, batch, i)
      stop = after_batch(false)
    end
    if not at_epoch_end then
      -- a loader without a length ends an accumulation window early: step on what was accumulated
      if pending and not done and not self.should_stop then self:_optimizer_step(params) end
      if has_val and not validated_at and not val_every and not self.should_stop then
        self._pos = {batch = i, phase = "validation", pending = pending}
        self:_eval_loop("validate", val_loader); validated_at = i
      end
      if self.enable_progress_bar then self.progress:finish(self:_prog_extra(last_loss)) end
      self._in_epoch_hook = true
      self._pos = {batch = i, phase = "train_epoch_end"}
      self:_call("on_train_epoch_end")
      self._in_epoch_hook = nil
    end
    self._pos = nil
    self:_flush_step_metrics(true)
    self:_reduce_epoch("train")
    for _, s in ipairs(self.lr_schedulers) do
      if s.interval == "epoch" and (self.current_epoch + 1) % s.frequency == 0 then s.scheduler:step() end
    end
    self.current_epoch = self.current_epoch + 1
    if self.should_stop and self.current_epoch >= self.min_epochs then done = true end
  end
  self:_call("on_train_end")
  self:_call("on_fit_end")
  if self.logger then self.logger:save() end
  self._stage = nil
  self:_compile_report()
  return self
end

local function run_eval(self, kind, model, loader, getter)
  local m = self:_attach(model)
  if self.accelerator then self.device = self.accelerator == "cuda" and "cuda:" .. self.local_rank or "cpu"; m:to(self.device) end
  loader = module_loader(m, getter, loader)
  if loader == nil then raise("ValueError", ("tc.Trainer:%s(): no data (pass a loader or define %s)"):format(kind, getter)) end
  local r = self:_eval_loop(kind, loader)
  if self.logger and kind ~= "predict" then self.logger:save() end
  self:_compile_report()
  return r
end
-- trainer:validate(model, loader) / test -> {metric = mean}; predict -> array of predict_step outputs
function Trainer:validate(model, loader) return run_eval(self, "validate", model, loader, "val_dataloader") or {} end
function Trainer:test(model, loader) return run_eval(self, "test", model, loader, "test_dataloader") or {} end
function Trainer:predict(model, loader) return run_eval(self, "predict", model, loader, "predict_dataloader") or {} end

-- ---- checkpoints -------------------------------------------------------------------------------------
-- A checkpoint is one safetensors file (written atomically): the module's state_dict under its own
-- names (so tc.load + load_state_dict reads its weights), the training state's tensors under
-- names starting with "trainer/" (optimizer slots, gradients of an unfinished accumulation window),
-- and in the header's metadata: format = "tc.trainer/1", epoch, global_step, and trainer_state, the
-- rest of the state (tc.serial): the loop's position (batch and phase), optimizer hyper-parameters
-- and step counts, schedulers, the RNG stream, the train loader's state, callback states, the
-- epoch's metric accumulators and the fit's elapsed time. weights_only checkpoints hold the
-- state_dict and epoch/global_step only.
local FORMAT = "tc.trainer/1"
local serial = require "tc.serial"

-- tensors inside `v` go to `tensors` (under names from their path); {__tensor, device} takes their place
local function pack(v, name, tensors)
  if tc.is_tensor(v) then
    local key, k = name, 1
    while tensors[key] do k = k + 1; key = name .. "#" .. k end
    tensors[key] = v:detach()
    return {__tensor = key, device = tostring(v.device)}
  end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = pack(x, name .. "/" .. tostring(k), tensors) end
  return out
end
local function unpack_tensors(v, tensors, path)
  if type(v) ~= "table" then return v end
  if v.__tensor ~= nil then
    local t = tensors[v.__tensor]
    if not t then raise("IOError", ("%s: the checkpoint lists tensor '%s', which it does not hold"):format(path, tostring(v.__tensor))) end
    if v.device and v.device ~= tostring(t.device) then t = t:to(v.device) end
    return t
  end
  for k, x in pairs(v) do v[k] = unpack_tensors(x, tensors, path) end
  return v
end
local function plain_numbers(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = to_number(v) end
  return out
end

-- callbacks' keys in a checkpoint: the class name, #k for the k-th of a class
local function callback_keys(callbacks)
  local keys, seen = {}, {}
  for i, cb in ipairs(callbacks) do
    local name = cb.state_key or cb.__name or "Callback"
    seen[name] = (seen[name] or 0) + 1
    keys[i] = seen[name] == 1 and name or ("%s#%d"):format(name, seen[name])
  end
  return keys
end

-- the training state of a fit under way (nil outside fit)
function Trainer:_training_state(tensors)
  local pos = self._pos
  if not pos or not self.optimizers then return nil end
  local m = self.lightning_module
  local st = {version = 1, epoch = self.current_epoch, global_step = self.global_step, batch = pos.batch, phase = pos.phase,
              pending = pos.pending or false, should_stop = self.should_stop, rng = tc.get_rng_state(),
              elapsed = self._t_fit and now() - self._t_fit or 0, optimizers = {}, schedulers = {}, callbacks = {}}
  for k, opt in ipairs(self.optimizers) do st.optimizers[k] = pack(opt:state_dict(), "trainer/optimizer/" .. k, tensors) end
  for k, s in ipairs(self.lr_schedulers) do st.schedulers[k] = s.scheduler:state_dict() end
  local loader = self.train_dataloader
  if type(loader) == "table" and type(loader.state_dict) == "function" then st.loader = loader:state_dict() end
  local keys = callback_keys(self.callbacks)
  for i, cb in ipairs(self.callbacks) do
    if type(cb.state_dict) == "function" then st.callbacks[keys[i]] = cb:state_dict() end
  end
  local acc = self._epoch.train
  if acc then
    st.train_acc = {order = acc.order, acc = {}}
    for name, a in pairs(acc.acc) do st.train_acc.acc[name] = {sum = to_number(a.sum), n = a.n, prog_bar = a.prog_bar} end
  end
  st.step_metrics, st.callback_metrics = plain_numbers(self._step_metrics), plain_numbers(self.callback_metrics)
  if st.pending then
    st.grads = {}
    for name, p in m:named_parameters() do
      if p.grad ~= nil then st.grads[name] = pack(p.grad, "trainer/grad/" .. name, tensors) end
    end
  end
  return st
end

-- trainer:save_checkpoint(path, {weights_only = false}): the module's state_dict and, inside fit, the
-- whole training state, so that fit(model, {ckpt_path = path}) continues exactly. on_save_checkpoint
-- hooks get the checkpoint table {state_dict, epoch, global_step, metadata, trainer_state} first and
-- may add metadata (strings).
function Trainer:save_checkpoint(path, opts)
  opts = opts or {}
  opt_check(opts, {weights_only = true}, "tc.Trainer:save_checkpoint")
  local m = self.lightning_module
  if not m then raise("ValueError", "tc.Trainer:save_checkpoint(): no module is attached (call it during or after fit)") end
  local tensors = {}
  local ckpt = {state_dict = m:state_dict(), epoch = self.current_epoch, global_step = self.global_step, metadata = {}}
  if not opts.weights_only then ckpt.trainer_state = self:_training_state(tensors) end
  self:_call("on_save_checkpoint", ckpt)
  local meta = {epoch = tostring(ckpt.epoch), global_step = tostring(ckpt.global_step)}
  for k, v in pairs(ckpt.metadata) do meta[k] = tostring(v) end
  if ckpt.trainer_state then
    meta.format = FORMAT
    meta.trainer_state = serial.encode(ckpt.trainer_state, "the trainer state")
  end
  for k, t in pairs(ckpt.state_dict) do
    if tensors[k] then raise("ValueError", ("save_checkpoint: the module's state '%s' collides with the trainer's"):format(k)) end
    tensors[k] = t
  end
  tc.save(path, tensors, meta)
end

-- reads a checkpoint: its state_dict (without the trainer's tensors), metadata and trainer state
local function read_checkpoint(path)
  if type(path) ~= "string" then raise("ValueError", "tc.Trainer: a checkpoint path must be a string, got " .. type(path)) end
  local f = io.open(path, "rb")
  if not f then raise("IOError", ("tc.Trainer: no checkpoint at '%s'"):format(path)) end
  f:close()
  local tensors, meta = tc.load(path)
  meta = meta or {}
  local sd, own = {}, {}
  for k, t in pairs(tensors) do
    if k:sub(1, 8) == "trainer/" then own[k] = t else sd[k] = t end
  end
  local st
  if meta.trainer_state then
    if meta.format ~= FORMAT then
      raise("IOError", ("tc.Trainer: the checkpoint '%s' has format '%s'; this tc reads '%s'"):format(path, tostring(meta.format), FORMAT))
    end
    st = unpack_tensors(serial.decode(meta.trainer_state, ("the trainer state of '%s'"):format(path)), own, path)
  end
  return sd, meta, st
end

-- fit's ckpt_path: "last" is the newest last.safetensors of this trainer's ModelCheckpoints
function Trainer:_checkpoint_path(p)
  if p ~= "last" then return p end
  for _, cb in ipairs(self.callbacks) do
    if getmetatable(cb) == ModelCheckpoint then
      local last = (cb.dirpath or (self.default_root_dir .. "/checkpoints")) .. "/last.safetensors"
      if exists(last) then return last end
    end
  end
  raise("IOError", "tc.Trainer:fit(ckpt_path = 'last'): no last.safetensors in the ModelCheckpoint directories (save_last = true writes it)")
end

-- Puts a fit back where the checkpoint was written: module, optimizers, schedulers, callbacks, epoch
-- and step now; the loop position, loader and RNG through the state it returns (fit applies them).
function Trainer:_restore(m, path)
  path = self:_checkpoint_path(path)
  local sd, meta, st = read_checkpoint(path)
  if not st then
    raise("ValueError", ("tc.Trainer:fit(): '%s' holds weights only (save_weights_only or weights_only = true) or was "
      .. "written outside fit: it cannot resume training; load its weights with trainer:load_checkpoint(model, path)"):format(path))
  end
  if #st.optimizers ~= #self.optimizers or #st.schedulers ~= #self.lr_schedulers then
    raise("ValueError", ("tc.Trainer:fit(): the checkpoint '%s' has %d optimizer(s) and %d scheduler(s); configure_optimizers() "
      .. "gave %d and %d"):format(path, #st.optimizers, #st.schedulers, #self.optimizers, #self.lr_schedulers))
  end
  local ckpt = {state_dict = sd, metadata = meta, epoch = st.epoch, global_step = st.global_step, trainer_state = st}
  self:_call("on_load_checkpoint", ckpt)
  m:load_state_dict(ckpt.state_dict)
  for k, opt in ipairs(self.optimizers) do opt:load_state_dict(st.optimizers[k]) end
  for k, s in ipairs(self.lr_schedulers) do s.scheduler:load_state_dict(st.schedulers[k]) end
  local keys = callback_keys(self.callbacks)
  for i, cb in ipairs(self.callbacks) do
    local cs = st.callbacks[keys[i]]
    if cs ~= nil and type(cb.load_state_dict) == "function" then cb:load_state_dict(cs) end
  end
  self.current_epoch, self.global_step, self.should_stop = st.epoch, st.global_step, st.should_stop or false
  if st.train_acc then
    local acc = self:_acc("train")
    acc.order = st.train_acc.order
    for name, a in pairs(st.train_acc.acc) do acc.acc[name] = {sum = a.sum, n = a.n, prog_bar = a.prog_bar} end
  end
  for k, v in pairs(st.step_metrics or {}) do self._step_metrics[k] = v end
  for k, v in pairs(st.callback_metrics or {}) do self.callback_metrics[k] = v end
  if st.grads then
    local _ <close> = tc.no_grad()
    for name, p in m:named_parameters() do
      local g = st.grads[name]
      if g ~= nil then p.grad = g:to(p.device) end
    end
  end
  if self.logger and type(self.logger.resume) == "function" then self.logger:resume(st.global_step) end
  if self.enable_progress_bar then
    self.progress.out:write(("tc.Trainer: resuming from %s (epoch %d, step %d, batch %d %s)\n"):format(path, st.epoch,
      st.global_step, st.batch, st.phase == "train_epoch_end" and "at the epoch's end" or "of the epoch"))
  end
  return st
end

-- trainer:load_checkpoint(model, path): the weights of a checkpoint (any written by save_checkpoint)
-- into model (on_load_checkpoint hooks see it first); returns {state_dict, metadata, epoch, global_step}.
function Trainer:load_checkpoint(model, path)
  local m = rawget(model, "_orig_mod") or model
  self.lightning_module = m
  local sd, meta = read_checkpoint(path)
  local ckpt = {state_dict = sd, metadata = meta, epoch = tonumber(meta.epoch), global_step = tonumber(meta.global_step)}
  self:_call("on_load_checkpoint", ckpt)
  m:load_state_dict(ckpt.state_dict)
  return ckpt
end

-- Timer and TensorBoardLogger (tc.trainer_extras.lua) subclass this module's Callback: added once M is filled
require("tc.trainer_extras").install(M)

return M
