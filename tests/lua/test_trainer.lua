-- tc.Trainer (stdlib/lua/tc.trainer.lua, docs/trainer.md): hook order, gradient accumulation, clipping,
-- validation cadence, early stopping, top-k checkpoints, CSV output, max_steps, fast_dev_run, schedulers,
-- validate/test/predict and a compiled module against eager.
local tc = require "tc"
local nn = require "tc.nn"
local check = require "check"
local T = require "tc.trainer"
local data = tc.utils.data
local F = nn.functional

local tmpdir, ls = check.tmpdir, check.ls
local function exists(p) local f = io.open(p, "rb"); if f then f:close() end; return f ~= nil end

-- a linear regression module; `extra` adds methods
local Reg = T.LightningModule:extend("Reg")
function Reg:__init(opts)
  opts = opts or {}
  self.lin = nn.Linear(4, 1)
  self.lr = opts.lr or 0.1
end
function Reg:forward(x) return self.lin(x) end
function Reg:training_step(b)
  local loss = F.mse_loss(self(b[1]), b[2])
  self:log("train_loss", loss, {prog_bar = true})
  return loss
end
function Reg:validation_step(b)
  self:log("val_loss", F.mse_loss(self(b[1]), b[2]))
end
function Reg:test_step(b) self:log("test_loss", F.mse_loss(self(b[1]), b[2])) end
function Reg:predict_step(b) return self(b[1]) end
function Reg:configure_optimizers() return tc.optim.SGD(self:parameters(), {lr = self.lr}) end

local function loader(n, bs, seed)
  tc.manual_seed(seed or 0)
  local x, y = tc.randn(n, 4), tc.randn(n, 1)
  return data.DataLoader(data.TensorDataset(x, y), {batch_size = bs})
end
local function quiet(opts)
  opts.enable_progress_bar = opts.enable_progress_bar or false
  if opts.logger == nil then opts.logger = false end
  return opts
end
local function fresh(opts) tc.manual_seed(1); return Reg(opts) end

local tests = {}

function tests.tc_Trainer_is_the_trainer_module()
  check.eq(rawequal(tc.Trainer, T.Trainer), true)
end

function tests.hooks_are_called_in_lightnings_order()
  local rec = {}
  local Rec = T.Callback:extend("Rec")
  for _, h in ipairs(T.HOOKS) do Rec[h] = function() rec[#rec + 1] = h end end
  local M = Reg:extend("M")
  M.on_train_epoch_end = function() rec[#rec + 1] = "module:on_train_epoch_end" end
  M.on_fit_start = function() rec[#rec + 1] = "module:on_fit_start" end
  local Stop = T.Callback:extend("Stop")
  Stop.monitoring = true
  function Stop:on_train_epoch_end() rec[#rec + 1] = "monitoring:on_train_epoch_end" end
  local tr = tc.Trainer(quiet{max_epochs = 1, num_sanity_val_steps = 1, limit_train_batches = 2, limit_val_batches = 1,
                              callbacks = {Rec(), Stop()}})
  tc.manual_seed(1)
  tr:fit(M(), loader(16, 4), loader(8, 4))
  local val = {"on_validation_start", "on_validation_epoch_start", "on_validation_batch_start", "on_validation_batch_end",
               "on_validation_epoch_end", "on_validation_end"}
  local batch = {"on_train_batch_start", "on_before_zero_grad", "on_before_backward", "on_after_backward",
                 "on_before_optimizer_step", "on_train_batch_end"}
  local want = {"on_fit_start", "module:on_fit_start", "on_sanity_check_start"}
  for _, h in ipairs(val) do want[#want + 1] = h end
  for _, h in ipairs({"on_sanity_check_end", "on_train_start", "on_train_epoch_start"}) do want[#want + 1] = h end
  for _ = 1, 2 do for _, h in ipairs(batch) do want[#want + 1] = h end end
  for _, h in ipairs(val) do want[#want + 1] = h end
  for _, h in ipairs({"on_train_epoch_end", "module:on_train_epoch_end", "monitoring:on_train_epoch_end",
                      "on_train_end", "on_fit_end"}) do want[#want + 1] = h end
  check.eq(table.concat(rec, "\n"), table.concat(want, "\n"))
end

local function params_after(opts, bs)
  local m = fresh()
  local tr = tc.Trainer(quiet{max_steps = 1, num_sanity_val_steps = 0, accumulate_grad_batches = opts.accumulate})
  tr:fit(m, loader(8, bs))
  check.eq(tr.global_step, 1)
  return m.lin.weight:detach(), m.lin.bias:detach()
end

function tests.accumulating_two_batches_of_4_equals_one_batch_of_8()
  local w1, b1 = params_after({accumulate = 2}, 4)
  local w2, b2 = params_after({accumulate = 1}, 8)
  assert(tc.allclose(w1, w2, 1e-5, 1e-6), "weights differ: " .. tostring(w1 - w2))
  assert(tc.allclose(b1, b2, 1e-5, 1e-6), "bias differs")
  local w0 = fresh().lin.weight:detach()
  assert(not tc.allclose(w0, w1), "a step was taken")
end

local function step_delta(opts)
  local m = fresh({lr = 1.0})
  local w0 = m.lin.weight:detach():clone()
  local tr = tc.Trainer(quiet{max_steps = 1, num_sanity_val_steps = 0, gradient_clip_val = opts.val,
                              gradient_clip_algorithm = opts.algorithm})
  local dl = data.DataLoader(data.TensorDataset(tc.randn(4, 4) * 10, tc.randn(4, 1) * 100), {batch_size = 4})
  tr:fit(m, dl)
  return w0 - m.lin.weight:detach()  -- lr 1: the (clipped) gradient
end

function tests.gradient_clipping_by_norm_and_by_value_is_applied()
  local unclipped = step_delta({})
  assert(unclipped:norm():item() > 1, "the test's gradient is large")
  -- the weight and the bias are clipped together: the weight's part is at most the clip value
  local d = step_delta({val = 0.5, algorithm = "norm"})
  assert(d:norm():item() <= 0.5 + 1e-5, "norm clipped: " .. d:norm():item())
  assert(d:norm():item() > 0.01, "still a step")
  local v = step_delta({val = 0.01, algorithm = "value"})
  check.eq(v:abs():max():item() <= 0.01 + 1e-7, true)
  check.eq(v:abs():max():item() > 0.009, true)
end

local function count_validations(opts)
  local n = 0
  local C = T.Callback:extend("C")
  function C:on_validation_start(tr) if not tr.sanity_checking then n = n + 1 end end
  opts.callbacks, opts.num_sanity_val_steps = {C()}, 0
  local tr = tc.Trainer(quiet(opts))
  tr:fit(fresh(), loader(32, 4), loader(8, 4))  -- 8 training batches an epoch
  return n
end

function tests.validation_runs_every_val_check_interval()
  check.eq(count_validations({max_epochs = 2}), 2)                          -- once an epoch
  check.eq(count_validations({max_epochs = 2, val_check_interval = 2}), 8)  -- every 2 batches
  check.eq(count_validations({max_epochs = 1, val_check_interval = 0.25}), 4)
  check.eq(count_validations({max_epochs = 1, val_check_interval = 0.5, limit_train_batches = 0.5}), 2)
end

function tests.sanity_check_runs_num_sanity_val_steps_batches_without_logging()
  local n = 0
  local C = T.Callback:extend("C")
  function C:on_validation_batch_end(tr) if tr.sanity_checking then n = n + 1 end end
  local tr = tc.Trainer(quiet{max_epochs = 1, callbacks = {C()}, limit_train_batches = 1})
  tr:fit(fresh(), loader(8, 4), loader(16, 4))
  check.eq(n, 2)
  check.eq(tr.current_epoch, 1)
end

function tests.early_stopping_stops_when_the_metric_does_not_improve()
  local M = Reg:extend("M")
  function M:validation_step() self:log("flat", 1.0) end
  local es = T.EarlyStopping("flat", {patience = 2, mode = "min"})
  local tr = tc.Trainer(quiet{max_epochs = 20, num_sanity_val_steps = 0, callbacks = {es}})
  tc.manual_seed(1)
  tr:fit(M(), loader(8, 4), loader(8, 4))
  check.eq(tr.current_epoch, 3)  -- the first check sets the best, two more without improvement stop
  check.eq(es.stopped_epoch, 2)
  check.eq(tr.should_stop, true)
end

function tests.early_stopping_names_a_metric_that_was_not_logged()
  local tr = tc.Trainer(quiet{max_epochs = 2, num_sanity_val_steps = 0, callbacks = {T.EarlyStopping("nope")}})
  local ok, e = pcall(tr.fit, tr, fresh(), loader(8, 4), loader(8, 4))
  check.eq(ok, false)
  assert(tostring(e):find("'nope' was not logged", 1, true) and tostring(e):find("val_loss", 1, true), tostring(e))
end

function tests.model_checkpoint_keeps_the_top_k_and_the_last()
  local dir = tmpdir()
  local M = Reg:extend("M")
  local scores = {5, 3, 4, 1, 2}  -- per epoch; min is best
  function M:validation_step() self:log("score", scores[self.trainer.current_epoch + 1]) end
  local ck = T.ModelCheckpoint{dirpath = dir, monitor = "score", save_top_k = 2, save_last = true}
  local tr = tc.Trainer(quiet{max_epochs = 5, num_sanity_val_steps = 0, callbacks = {ck}, limit_train_batches = 1})
  tc.manual_seed(1)
  local m = M()
  tr:fit(m, loader(8, 4), loader(4, 4))
  local files = ls(dir)
  check.eq(table.concat(files, " "), "epoch=3-step=4-score=1.0000.safetensors epoch=4-step=5-score=2.0000.safetensors last.safetensors")
  check.eq(ck.best_model_path, dir .. "/epoch=3-step=4-score=1.0000.safetensors")
  check.eq(ck.best_model_score, 1)
  -- the files are the module's state_dict at that step; load_checkpoint puts one back
  local m2 = M()
  local ckpt = tr:load_checkpoint(m2, dir .. "/last.safetensors")
  check.eq(ckpt.global_step, 5)
  assert(tc.equal(m2.lin.weight, m.lin.weight), "last.safetensors holds the final weights")
  os.execute("rm -rf '" .. dir .. "'")
end

function tests.model_checkpoint_every_n_train_steps()
  local dir = tmpdir()
  local seen = 0
  local M = Reg:extend("M")
  function M:on_save_checkpoint(ckpt) seen = seen + 1; ckpt.metadata.note = "hi" end
  local ck = T.ModelCheckpoint{dirpath = dir, every_n_train_steps = 3, save_top_k = -1}
  local tr = tc.Trainer(quiet{max_steps = 7, num_sanity_val_steps = 0, callbacks = {ck}})
  tc.manual_seed(1)
  tr:fit(M(), loader(16, 4))
  check.eq(table.concat(ls(dir), " "), "epoch=0-step=3.safetensors epoch=1-step=6.safetensors")
  check.eq(seen, 2)
  local _, meta = tc.load(dir .. "/epoch=1-step=6.safetensors")
  check.eq(meta.note, "hi")
  check.eq(meta.global_step, "6")
  os.execute("rm -rf '" .. dir .. "'")
end

function tests.csv_logger_writes_epoch_means_and_step_values()
  local dir = tmpdir()
  local M = Reg:extend("M")
  function M:training_step(b, i)
    self:log("i", tc.tensor(i * 1.0), {on_step = true, on_epoch = true})
    return F.mse_loss(self(b[1]), b[2])
  end
  local tr = tc.Trainer{max_epochs = 2, num_sanity_val_steps = 0, default_root_dir = dir, log_every_n_steps = 2,
                        enable_progress_bar = false}
  tc.manual_seed(1)
  tr:fit(M(), loader(16, 4), loader(8, 4))
  local lines = {}
  for l in io.lines(dir .. "/metrics.csv") do lines[#lines + 1] = l end
  check.eq(lines[1], "epoch,step,i_epoch,i_step,val_loss")
  check.eq(lines[2], "0,2,,2,")
  check.eq(lines[3], "0,4,,4,")
  assert(lines[4]:match("^0,4,,,[%d.e-]+$"), lines[4])   -- validation at the end of epoch 0
  check.eq(lines[5], "0,4,2.5,,")                       -- mean of i = 1..4
  check.eq(lines[6], "1,6,,2,")
  check.eq(lines[8]:match("^1,8,,,") ~= nil, true)
  check.eq(lines[9], "1,8,2.5,,")
  check.eq(#lines, 9)
  check.eq(tr.callback_metrics.i_epoch, 2.5)
  check.eq(tr.logged_metrics.i_step, 4)
  os.execute("rm -rf '" .. dir .. "'")
end

function tests.logging_off_writes_no_csv()
  local dir = tmpdir()
  local tr = tc.Trainer{max_epochs = 1, default_root_dir = dir, logger = false, enable_progress_bar = false}
  tr:fit(fresh(), loader(8, 4))
  check.eq(exists(dir .. "/metrics.csv"), false)
  os.execute("rm -rf '" .. dir .. "'")
end

function tests.max_steps_stops_across_epochs()
  local tr = tc.Trainer(quiet{max_steps = 5, num_sanity_val_steps = 0})
  tr:fit(fresh(), loader(8, 4))  -- 2 batches an epoch
  check.eq(tr.global_step, 5)
  check.eq(tr.current_epoch, 3)
end

function tests.fast_dev_run_runs_one_batch_each_and_writes_nothing()
  local dir = tmpdir()
  local tb, vb = 0, 0
  local C = T.Callback:extend("C")
  function C:on_train_batch_end() tb = tb + 1 end
  function C:on_validation_batch_end() vb = vb + 1 end
  local tr = tc.Trainer{fast_dev_run = true, default_root_dir = dir, enable_progress_bar = false,
                        callbacks = {C(), T.ModelCheckpoint{dirpath = dir .. "/ck"}}}
  tr:fit(fresh(), loader(32, 4), loader(32, 4))
  check.eq(tb, 1); check.eq(vb, 1)
  check.eq(tr.global_step, 1)
  check.eq(exists(dir .. "/metrics.csv"), false)
  check.eq(#ls(dir .. "/ck"), 0)
  local off = tc.Trainer(quiet{max_epochs = 1, enable_checkpointing = false, callbacks = {T.ModelCheckpoint{dirpath = dir .. "/ck"}}})
  off:fit(fresh(), loader(8, 4))
  check.eq(#ls(dir .. "/ck"), 0)
  os.execute("rm -rf '" .. dir .. "'")
end

function tests.schedulers_step_per_epoch_or_per_step()
  local function lr_after(interval)
    local M = Reg:extend("M")
    function M:configure_optimizers()
      local opt = tc.optim.SGD(self:parameters(), {lr = 1.0})
      local s = tc.optim.lr_scheduler.StepLR(opt, 1, {gamma = 0.5})
      if interval then return {optimizer = opt, lr_scheduler = {scheduler = s, interval = interval}} end
      return {opt, s}
    end
    tc.manual_seed(1)
    local tr = tc.Trainer(quiet{max_epochs = 2, num_sanity_val_steps = 0})
    tr:fit(M(), loader(12, 4))  -- 3 steps an epoch
    return tr.optimizers[1].param_groups[1].lr
  end
  check.eq(lr_after(nil), 0.25)
  check.eq(lr_after("epoch"), 0.25)
  check.eq(lr_after("step"), 0.5 ^ 6)
end

function tests.validate_test_and_predict()
  local tr = tc.Trainer(quiet{})
  local m = fresh()
  local dl = loader(12, 4)
  local v = tr:validate(m, dl)
  assert(type(v.val_loss) == "number", "validate returns the epoch means")
  local t = tr:test(m, dl)
  assert(math.abs(t.test_loss - v.val_loss) < 1e-6, "same data, same loss")
  local p = tr:predict(m, dl)
  check.eq(#p, 3)
  check.eq(p[1].shape[1], 4)
  check.eq(m.training, true)  -- eval() only while evaluating
end

function tests.unknown_trainer_option_is_named()
  local ok, e = pcall(tc.Trainer, {max_epoch = 3})
  check.eq(ok, false)
  assert(tostring(e):find("unknown option 'max_epoch'", 1, true), tostring(e))
end

function tests.several_optimizers_are_refused_clearly()
  local M = Reg:extend("M")
  function M:configure_optimizers()
    return {tc.optim.SGD(self:parameters(), {lr = 0.1}), tc.optim.Adam(self:parameters())}
  end
  local tr = tc.Trainer(quiet{max_epochs = 1})
  local ok, e = pcall(tr.fit, tr, M(), loader(8, 4))
  check.eq(ok, false)
  assert(tostring(e):find("manual optimization", 1, true), tostring(e))
end

-- the progress output of a 1-epoch fit over 2 batches, written to a file
local function progress_text(inplace)
  local path = os.tmpname()
  local out = assert(io.open(path, "w"))
  local tr = tc.Trainer{max_epochs = 1, logger = false, num_sanity_val_steps = 0, progress_out = out,
                        progress_bar_inplace = inplace}
  tr:fit(fresh(), loader(8, 4))
  out:close()
  local text = io.open(path):read("a")
  os.remove(path)
  return text
end

function tests.progress_lines_when_stdout_is_not_a_terminal()
  local text = progress_text(false)
  assert(text:match("^Epoch 0 2/2 %[[%d:]+<[%d:?]+, [%d.]+ it/s%] loss=[%d.e-]+ train_loss=[%d.e-]+\n$"), text)
  assert(not text:find("\r", 1, true))
end

function tests.progress_line_updates_in_place_on_a_terminal()
  local text = progress_text(true)
  assert(text:match("^\rEpoch 0 1/2 .*\r.*Epoch 0 2/2 .*\n$"), text)
end

function tests.a_compiled_module_trains_to_the_eager_losses()
  local function run(compiled)
    local losses = {}
    local C = T.Callback:extend("C")
    function C:on_train_batch_end(_, _, out) losses[#losses + 1] = out:item() end
    tc.manual_seed(1)
    local m = Reg()
    local tr = tc.Trainer(quiet{max_epochs = 2, num_sanity_val_steps = 1, callbacks = {C()}})
    tr:fit(compiled and tc.compile(m) or m, loader(20, 8), loader(8, 4))
    return losses, tr
  end
  local eager = run(false)
  local comp, tr = run(true)
  check.eq(#comp, #eager)
  for i = 1, #eager do assert(math.abs(comp[i] - eager[i]) <= 1e-5 * (1 + math.abs(eager[i])), ("loss %d: %g vs %g"):format(i, comp[i], eager[i])) end
  check.eq(tr.compiled, true)
  assert(type(tr.callback_metrics.val_loss) == "number", "self:log works inside a compiled step")
  assert(tr.compile_stats and tr.compile_stats.recompiles >= 0, "compile statistics are reported")
end

function tests.a_compiled_step_recompiles_only_for_the_ragged_last_batch_and_says_so()
  local M = Reg:extend("M")
  function M:training_step(b) return F.mse_loss(self(b[1]), b[2]) end  -- no batch index: no guard on it
  tc.manual_seed(1)
  local tr = tc.Trainer(quiet{max_epochs = 2, num_sanity_val_steps = 0})
  tr:fit(tc.compile(M()), loader(12, 8))  -- batches of 8 and 4
  local ev = tr.compile_events
  check.eq(#ev, 2)
  check.eq(ev[1].step, "training_step"); check.eq(ev[1].call, 1)          -- the first trace
  check.eq(ev[2].call, 2); check.eq(ev[2].recompiles, 1)
  check.eq(ev[2].shapes, "float32[4, 4], float32[4, 1]")
  check.eq(tr.compile_stats.recompiles, 1)
end

function tests.an_unsized_loader_steps_on_a_partial_accumulation_window()
  local steps = 0
  local C = T.Callback:extend("C")
  function C:on_before_optimizer_step() steps = steps + 1 end
  tc.manual_seed(0)
  local batches = {}
  for i = 1, 3 do batches[i] = {tc.randn(4, 4), tc.randn(4, 1)} end
  local tr = tc.Trainer(quiet{max_epochs = 1, accumulate_grad_batches = 2, callbacks = {C()}})
  local i = 0
  tr:fit(fresh(), function() i = i + 1; return batches[i] end)  -- an iterator: no length
  check.eq(steps, 2)
  check.eq(tr.global_step, 2)
end

function tests.a_val_check_interval_longer_than_the_epoch_is_refused()
  local tr = tc.Trainer(quiet{max_epochs = 1, val_check_interval = 9})
  local ok, e = pcall(tr.fit, tr, fresh(), loader(16, 4), loader(8, 4))
  check.eq(ok, false)
  assert(tostring(e):find("val_check_interval = 9 must be in 1..4", 1, true), tostring(e))
end

function tests.max_time_stops_the_fit()
  local tr = tc.Trainer(quiet{max_time = 0, num_sanity_val_steps = 0})
  tr:fit(fresh(), loader(16, 4))
  check.eq(tr.global_step, 1)
  check.eq(tc.Trainer{max_time = "00:01:00:05"}.max_time, 3605)
end

function tests.learning_rate_monitor_logs_each_epochs_lr()
  local M = Reg:extend("M")
  function M:configure_optimizers()
    local opt = tc.optim.SGD(self:parameters(), {lr = 1.0})
    return {opt, tc.optim.lr_scheduler.StepLR(opt, 1, {gamma = 0.5})}
  end
  local seen = {}
  local C = T.Callback:extend("C")
  function C:on_train_epoch_start(tr) seen[#seen + 1] = tr.logged_metrics["lr-SGD"] end
  tc.manual_seed(1)
  local tr = tc.Trainer(quiet{max_epochs = 3, callbacks = {T.LearningRateMonitor(), C()}})
  tr:fit(M(), loader(8, 4))
  check.eq(table.concat(seen, " "), "1.0 0.5 0.25")
end

-- ---- exact resume ------------------------------------------------------------------------------------
-- tests/lua/trainer_resume_script.lua run three times: uninterrupted; killed (SIGKILL, by itself) at
-- batch `kill`; resumed from its last checkpoint. The resumed run's losses must equal the
-- uninterrupted run's bit for bit (they are written with %a).
local function losses(path)
  local t, order = {}, {}
  for line in io.lines(path) do
    local k, v = line:match("^(%d+) (%S+)$")
    t[#t + 1] = {tonumber(k), v}
  end
  return t
end
local function resume_case(kill, args)
  local full, part = check.tmpdir(), check.tmpdir()
  local script = "tests/lua/trainer_resume_script.lua"
  local out, code = check.run(("%s %s %s full %s"):format(check.TCRUN, script, full, args))
  check.eq(code, 0, out)
  out, code = check.run(("%s %s %s kill:%d %s"):format(check.TCRUN, script, part, kill, args))
  check.eq(code, 137, "the run killed by SIGKILL: " .. out)
  local killed = #losses(part .. "/losses")
  out, code = check.run(("%s %s %s resume %s"):format(check.TCRUN, script, part, args))
  check.eq(code, 0, out)
  local want, got = {}, losses(part .. "/losses")
  for _, e in ipairs(losses(full .. "/losses")) do want[e[1]] = e[2] end
  local n = 0
  for j = killed + 1, #got do
    local k, v = got[j][1], got[j][2]
    if n == 0 then assert(k <= kill, ("the resumed run starts at batch %d, after the killed one (%d)"):format(k, kill)) end
    check.eq(v, want[k], ("loss of batch %d after resuming (batch %d killed)"):format(k, kill))
    n = n + 1
  end
  assert(n >= 50, ("only %d losses after the resume"):format(n))
  os.execute("rm -rf '" .. full .. "' '" .. part .. "'")
  return n
end

function tests.a_run_killed_mid_epoch_resumes_with_the_same_next_50_losses()
  -- dropout, AdamW, a per-step scheduler, shuffling from tc's RNG, a checkpoint at every batch end
  resume_case(30, "1 global x batch")
  -- an unfinished accumulation window (its gradients are in the checkpoint), the loader's own
  -- generator, worker threads
  resume_case(25, "2 workers x batch")
end

function tests.a_run_resumes_exactly_from_a_checkpoint_written_in_validation_or_at_an_epochs_end()
  resume_case(13, "1 global x val")      -- ModelCheckpoint on val_loss: written inside validation
  resume_case(15, "2 seed x epoch")      -- written at epoch 0's end: epoch 1 starts afresh
end

function tests.a_compiled_run_resumes_exactly()
  resume_case(23, "1 global compiled batch")
end

function tests.checkpoints_hold_the_training_state_and_weights_only_ones_cannot_resume()
  local dir = check.tmpdir()
  local ck = T.ModelCheckpoint{dirpath = dir, save_last = true}
  local tr = tc.Trainer(quiet{max_epochs = 2, num_sanity_val_steps = 0, callbacks = {ck}})
  tr:fit(fresh(), loader(8, 4))
  local tensors, meta = tc.load(dir .. "/last.safetensors")
  check.eq(meta.format, "tc.trainer/1")
  check.eq(meta.global_step, "4")
  assert(tensors["lin.weight"] and tensors["trainer/optimizer/1/state/1/momentum_buffer"] == nil, "weights under their own names")
  local st = require("tc.serial").decode(meta.trainer_state)
  check.eq(st.epoch, 1)
  check.eq(st.phase, "train_epoch_end")
  check.eq(st.callbacks.ModelCheckpoint.last_model_path, dir .. "/last.safetensors")
  -- "last" finds it; a fit resumed after its last epoch has nothing left to do
  local tr2 = tc.Trainer(quiet{max_epochs = 2, num_sanity_val_steps = 0, callbacks = {T.ModelCheckpoint{dirpath = dir, save_last = true}}})
  tr2:fit(fresh(), loader(8, 4), {ckpt_path = "last"})
  check.eq(tr2.global_step, 4)
  check.eq(tr2.current_epoch, 2)
  -- weights only: loadable as weights, refused as a resume point
  local w = dir .. "/w.safetensors"
  tr:save_checkpoint(w, {weights_only = true})
  local m = fresh()
  tr:load_checkpoint(m, w)
  local tr3 = tc.Trainer(quiet{max_epochs = 3})
  local e = check.raises("ValueError", tr3.fit, tr3, fresh(), loader(8, 4), {ckpt_path = w})
  assert(e.message:find("holds weights only", 1, true), e.message)
  -- a damaged trainer state is an IOError naming the file, and nothing is loaded
  local t2, meta2 = tc.load(dir .. "/last.safetensors")
  meta2.trainer_state = meta2.trainer_state:sub(1, -10)
  tc.save(dir .. "/bad.safetensors", t2, meta2)
  local m4 = fresh()
  local before = m4.lin.weight:clone()
  local tr4 = tc.Trainer(quiet{max_epochs = 3})
  e = check.raises("IOError", tr4.fit, tr4, m4, loader(8, 4), {ckpt_path = dir .. "/bad.safetensors"})
  assert(e.message:find("bad.safetensors", 1, true) and e.message:find("damaged", 1, true), e.message)
  assert(tc.equal(m4.lin.weight, before), "a refused checkpoint changes no weight")
  e = check.raises("IOError", tr4.fit, tr4, fresh(), loader(8, 4), {ckpt_path = dir .. "/none.safetensors"})
  assert(e.message:find("no checkpoint at", 1, true), e.message)
  os.execute("rm -rf '" .. dir .. "'")
end

function tests.tc_serial_round_trips_exactly_and_refuses_damage()
  local S = require "tc.serial"
  local v = {epoch = 3, lr = 0.1, third = 1 / 3, low = math.mininteger, inf = math.huge, ninf = -math.huge,
             bytes = "a\0b;}{s9:", yes = true, no = false, nest = {1, 2.0, {k = -0.0}}, [7] = "seven", [2.5] = 1}
  local e = S.encode(v)
  local d = S.decode(e)
  check.eq(S.encode(d), e)
  check.eq(d.third, 1 / 3)
  check.eq(math.type(d.nest[2]), "float")
  check.eq(d.low, math.mininteger)
  check.eq(d.bytes, "a\0b;}{s9:")
  check.eq(1 / d.nest[3].k, -math.huge)
  local nan = S.decode(S.encode({x = 0 / 0})).x
  assert(nan ~= nan)
  check.raises("IOError", S.decode, e:sub(1, -2))
  check.raises("IOError", S.decode, "s99:abc")
  check.raises("IOError", S.decode, e .. "i1;")
  local err = check.raises("ValueError", S.encode, {f = print})
  assert(err.message:find("function", 1, true), err.message)
  check.raises("ValueError", S.encode, {t = tc.ones(1)})
  local cyc = {}; cyc.self = cyc
  check.raises("ValueError", S.encode, cyc)
end

function tests.rng_state_round_trips_and_bad_states_are_refused()
  tc.manual_seed(5)
  tc.rand(3)
  local s = tc.get_rng_state()
  check.eq(s.seed, 5)
  local a = tc.randn(4)
  tc.set_rng_state(s)
  assert(tc.equal(tc.randn(4), a), "the same numbers after set_rng_state")
  check.raises("ValueError", tc.set_rng_state, {seed = 1, offset = 3})
  check.raises("ValueError", tc.set_rng_state, {seed = 1})
end

-- ---- strategy = "ddp", devices, precision ----------------------------------------------------------------
-- tests/distributed/trainer_ddp.lua: two gloo ranks equal one process on the whole batch, with and
-- without accumulation; started by tcrun's launcher, or by the Trainer itself (no launcher)
function tests.ddp_trainer_on_two_ranks_equals_one_process_on_the_whole_batch()
  local dir = check.tmpdir()
  local out, code = check.run(("timeout 120 %s --nproc-per-node 2 tests/distributed/trainer_ddp.lua %s 1"):format(check.TCRUN, dir))
  check.eq(code, 0, out)
  check.eq(select(2, out:gsub("trainer ddp ok rank", "")), 2, out)
  assert(out:find("steps 8", 1, true), out)
  -- no launcher: devices = 2 makes the Trainer start `tcrun --nproc-per-node 2` on the script
  out, code = check.run(("timeout 120 %s tests/distributed/trainer_ddp.lua %s 2"):format(check.TCRUN, dir))
  check.eq(code, 0, out)
  assert(out:find("starting 2 processes", 1, true), out)
  check.eq(select(2, out:gsub("trainer ddp ok rank", "")), 2, out)
  assert(out:find("steps 4", 1, true), out)
  os.execute("rm -rf '" .. dir .. "'")
end

function tests.trainer_refuses_precisions_and_devices_it_cannot_honour()
  local e = check.raises("NotImplementedError", tc.Trainer, {precision = "bf16-mixed"})
  assert(e.message:find("mixed precision", 1, true), e.message)
  check.raises("ValueError", tc.Trainer, {precision = "8-true"})
  check.raises("ValueError", tc.Trainer, {accelerator = "tpu"})
  check.raises("ValueError", tc.Trainer, {strategy = "fsdp"})
  check.raises("ValueError", tc.Trainer, {devices = 0})
  local tr = tc.Trainer{precision = "32-true", accelerator = "cpu", devices = 1}
  check.eq(tr.strategy, "single_device")
  check.eq(tr.precision, "32-true")
  check.eq(tc.Trainer{devices = 2}.strategy, "ddp")
end

function tests.accelerator_moves_batches_in_training_and_validation()
  local seen = {}
  local M = Reg:extend("M")
  function M:validation_step(b)
    seen[#seen + 1] = tostring(b[1].device)
    self:log("val_loss", F.mse_loss(self(b[1]), b[2]))
  end
  local tr = tc.Trainer(quiet{max_epochs = 1, accelerator = "cpu", num_sanity_val_steps = 1})
  tr:fit(M(), loader(8, 4), loader(8, 4))
  check.eq(tr.device, "cpu")
  check.eq(#seen, 3, "the sanity check's batch and the epoch's two")
  check.eq(seen[1], "cpu")
  local r = tr:validate(fresh(), loader(8, 4))
  assert(r.val_loss ~= nil, "validate under an accelerator")
end

return tests
