-- tc.nn constructors bind PyTorch's positional arguments, the options table and mixes of both to
-- one signature per layer; a wrong argument is an error naming the layer and the argument at the
-- caller's line. (The walk over every layer's PyTorch signature is test_nn_signatures.lua.)
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local check = require "check"

local T = {}

-- Each wrong call raises `kind` with a message naming the layer and `names`, at the caller's line.
local function expect(kind, f, ...)
  local line = debug.getinfo(2, "l").currentline
  local e = check.raises(kind, f)
  for _, word in ipairs {...} do
    if not e.message:find(word, 1, true) then
      error(("message %q does not name %q"):format(e.message, word), 2)
    end
  end
  check.eq(e.line, line, "error line")
  assert(e.file:match("test_nn_arguments%.lua$"), "error file " .. tostring(e.file))
  return e
end

function T.maxpool2d_takes_kernel_stride_padding_positionally()
  local m = nn.MaxPool2d(3, 2, 1)
  check.same({m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode}, {3, 2, 1, 1, false})
  local x = tc.randn(1, 2, 7, 7)
  check.values(m(x), F.max_pool2d(x, 3, 2, 1):tolist(), 0, "forward")
  check.shape(m(x), {1, 2, 4, 4})
end

function T.conv2d_positional_equals_options_and_mixed()
  tc.manual_seed(1)
  local a = nn.Conv2d(3, 8, 3, 2, 1)
  tc.manual_seed(1)
  local b = nn.Conv2d(3, 8, 3, {stride = 2, padding = 1})
  tc.manual_seed(1)
  local c = nn.Conv2d(3, 8, 3, 2, {padding = 1})
  for _, m in ipairs {b, c} do
    check.same({m.stride, m.padding, m.dilation, m.groups}, {a.stride, a.padding, a.dilation, a.groups})
    check.values(m.weight, a.weight:tolist(), 0)
  end
  local x = tc.randn(1, 3, 8, 8)
  check.shape(a(x), {1, 8, 4, 4})
  check.values(c(x), a(x):tolist(), 0)
end

function T.common_positional_forms()
  check.eq(nn.LayerNorm(64, 1e-6).eps, 1e-6)
  check.eq(nn.Dropout(0.1).p, 0.1)
  check.eq(nn.Linear(4, 5, false).bias, nil)
  check.eq(nn.Softmax(1).dim, 1)
  check.eq(nn.LeakyReLU(0.2).negative_slope, 0.2)
  check.eq(nn.GELU("tanh").approximate, "tanh")
  check.eq(nn.BatchNorm2d(4, 1e-3, 0.01).momentum, 0.01)
  check.eq(nn.Embedding(10, 3, 1).padding_idx, 1)
  check.eq(nn.Embedding(10, 3, -1).padding_idx, 10)  -- negative ids count from the end
  check.eq(nn.CrossEntropyLoss(nil, nil, 5).ignore_index, 5)
  check.eq(nn.MultiheadAttention(8, 2, 0.0, true, false, false, nil, nil, true).batch_first, true)
  check.eq(nn.Linear(2, 3, true, "cpu", tc.float64).weight.dtype, tc.float64)
  check.eq(nn.Linear(2, 3, {dtype = "float64"}).bias.dtype, tc.float64)
  -- keyword-only use of required arguments, as in PyTorch's nn.Linear(in_features=2, out_features=3)
  check.shape(nn.Linear({in_features = 2, out_features = 3}).weight, {3, 2})
end

-- Lua's `/` gives floats: integral ones are integers, as in tc.zeros(4 / 2).
function T.integral_floats_bind_as_integers()
  local l = nn.Linear(8 / 2, 6.0)
  check.eq(math.type(l.in_features), "integer")
  check.shape(l.weight, {6, 4})
  local c = nn.Conv2d(4, 6, {6 / 2, 3.0}, 2.0)
  check.eq(math.type(c.kernel_size[1]), "integer")
  check.eq(math.type(c.stride), "integer")
  check.eq(math.type(nn.Embedding(10, 3, -1.0).padding_idx), "integer")
  expect("ValueError", function() return nn.Linear(4.5, 6) end, "nn.Linear", "in_features", "4.5")
end

function T.containers_take_their_tables()
  check.eq(#nn.ModuleList({}), 0)
  check.eq(#nn.ModuleList({nn.ReLU(), nn.Tanh()}), 2)
  local d = nn.ModuleDict({b = nn.ReLU(), a = nn.Tanh()})
  local names = {}
  for name in d:named_children() do names[#names + 1] = name end
  check.same(names, {"a", "b"})
  check.eq(#nn.Sequential(nn.ReLU(), nn.Tanh()), 2)
  check.eq(nn.Identity(54, {unused = 0.1})(7), 7)
end

function T.inplace_activations_write_their_input()
  local x = tc.tensor {-1.0, 2.0}
  local y = nn.ReLU(true)(x)
  assert(rawequal(x, y), "ReLU(true) returns its input")
  check.values(x, {0, 2})
  local z = tc.tensor {-1.0, 2.0}
  nn.ReLU()(z)
  check.values(z, {-1, 2}, 0, "ReLU() leaves its input")
  local w = tc.tensor {-1.0, 2.0}
  nn.LeakyReLU(0.5, true)(w)
  check.values(w, {-0.5, 2})
  local d = tc.ones(4)
  assert(rawequal(nn.Dropout(1.0, true)(d), d), "Dropout(p, true) returns its input")
  check.values(d, {0, 0, 0, 0})
  local s = tc.tensor {1.0}
  nn.SiLU({inplace = true})(s)
  check.values(s, {0.7310586}, 1e-6)
end

function T.transformer_encoder_layer_without_bias_has_no_bias_parameters()
  local m = nn.TransformerEncoderLayer(8, 2, 16, 0.0, "relu", 1e-5, false, false, false)
  for name in m:named_parameters() do
    assert(not name:match("bias$"), "unexpected parameter " .. name)
  end
  check.shape(m(tc.randn(3, 2, 8)), {3, 2, 8})
end

function T.wrong_arguments_name_the_layer_and_argument_at_the_callers_line()
  expect("ValueError", function() return nn.MaxPool2d(-3) end, "nn.MaxPool2d", "kernel_size", "-3")
  expect("ValueError", function() return nn.Linear(-1, 3) end, "nn.Linear", "in_features")
  expect("ValueError", function() return nn.Linear(4, "5") end, "nn.Linear", "out_features", '"5"')
  expect("ValueError", function() return nn.Conv2d(3, 8, 3, {strides = 2}) end, "nn.Conv2d", "unexpected option 'strides'")
  expect("ValueError", function() return nn.Dropout(0.1, false, 3) end, "nn.Dropout", "at most 2", "got 3")
  expect("ValueError", function() return nn.Sigmoid(1) end, "nn.Sigmoid", "no arguments")
  expect("ValueError", function() return nn.Conv2d(3, 8) end, "nn.Conv2d", "missing", "kernel_size")
  expect("ValueError", function() return nn.Linear(4, 5, false, {bias = true}) end, "nn.Linear", "multiple values", "bias")
  expect("ValueError", function() return nn.Dropout(1.5) end, "nn.Dropout", "'p'", "1.5")
  expect("ValueError", function() return nn.Conv2d(3, 8, {3, 3, 3}) end, "nn.Conv2d", "kernel_size")
  expect("ValueError", function() return nn.Conv2d(3, 8, 3, 1, 0, 1, 2) end, "nn.Conv2d", "in_channels", "groups")
  expect("ValueError", function() return nn.Conv2d(3, 8, 3, 2, "same") end, "nn.Conv2d", "same")
  expect("ValueError", function() return nn.GroupNorm(4, 6) end, "nn.GroupNorm", "num_channels")
  expect("ValueError", function() return nn.MultiheadAttention(8, 3) end, "nn.MultiheadAttention", "embed_dim")
  expect("ValueError", function() return nn.Embedding(10, 3, 11) end, "nn.Embedding", "padding_idx")
  expect("ValueError", function() return nn.GELU("fast") end, "nn.GELU", "approximate")
  expect("ValueError", function() return nn.CrossEntropyLoss({reduction = "avg"}) end, "nn.CrossEntropyLoss", "reduction")
  expect("ValueError", function() return nn.Linear(2, 3, {dtype = "int9"}) end, "nn.Linear", "dtype")
  expect("ValueError", function() return nn.Linear(2, 3, {device = "tpu"}) end, "nn.Linear", "device")
  expect("ValueError", function() return nn.Sequential(nn.ReLU(), 3) end, "nn.Sequential", "argument 2")
  expect("ValueError", function() return nn.ModuleList({nn.ReLU(), 3}) end, "nn.ModuleList", "modules")
  expect("ShapeError", function() return nn.Embedding(10, 3, {_weight = tc.zeros(3, 10)}) end, "nn.Embedding", "_weight")
end

function T.pytorch_arguments_tc_lacks_are_not_implemented_errors()
  expect("NotImplementedError", function() return nn.Conv2d(3, 8, 3, {padding_mode = "reflect"}) end,
    "nn.Conv2d", "padding_mode", "reflect")
  expect("NotImplementedError", function() return nn.MaxPool2d(2, 2, 0, 1, true) end, "nn.MaxPool2d", "return_indices")
  expect("NotImplementedError", function() return nn.MSELoss(true) end, "nn.MSELoss", "size_average")
  expect("NotImplementedError", function() return nn.MultiheadAttention(8, 2, {kdim = 4}) end, "nn.MultiheadAttention", "kdim")
  -- a value that is no padding mode at all is a ValueError
  expect("ValueError", function() return nn.Conv2d(3, 8, 3, {padding_mode = "mirror"}) end, "padding_mode")
end

-- A layer made inside a user's own module: the error names the user's line in __init.
function T.errors_from_a_submodule_name_the_users_init_line()
  local Block = nn.Module:extend("Block")
  local line
  function Block:__init(d)
    line = debug.getinfo(1, "l").currentline + 1
    self.proj = nn.Linear(d, "wide")
  end
  local e = check.raises("ValueError", function() return Block(4) end)
  check.eq(e.line, line)
  assert(e.message:find("nn.Linear", 1, true) and e.message:find("out_features", 1, true), e.message)
end

return T
