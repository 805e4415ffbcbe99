-- The standard layers, containers and losses of tc.nn (PyTorch names, argument order and
-- default initialisation). Loaded by tc.nn: returns a function that fills the nn table. Each layer
-- is declared with its PyTorch signature as data (tc._args binds positional arguments and the
-- options table to it); its init function receives the bound arguments by name.
return function(nn, tc, F)
  local Module = nn.Module
  local raise = tc._C.raise
  local sqrt = math.sqrt
  local args = tc._C.args
  local K, None, factory = args.kinds, args.None, args.factory
  local DEVICE, DTYPE = {"device", K.device, None}, {"dtype", K.dtype, None}

  -- layer("Conv2d", rows, init): the class nn.Conv2d whose constructor binds its arguments to
  -- rows (see tc._args) and calls init(self, bound).
  local function layer(name, rows, init)
    local cls = Module:extend(name)
    local sig = args.signature("nn." .. name, rows)
    function cls:__init(...) init(self, sig:bind(...)) end
    nn[name] = cls
    return cls
  end
  -- A ValueError about a layer's arguments that no single row can check.
  local function invalid(name, fmt, ...) raise("ValueError", ("nn.%s(): " .. fmt):format(name, ...)) end

  local function opt(o, k, default)
    if o == nil or o[k] == nil then return default end
    return o[k]
  end
  local function pair(v) return type(v) == "table" and v or {v, v} end
  -- ctor(shape) with the layer's dtype and device arguments.
  local function new(ctor, shape, a)
    local f = factory(a)
    if f then return ctor(shape, f) end
    return ctor(shape)
  end

  -- kaiming_uniform_(a = sqrt(5)) and the matching bias bound: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  local function init_uniform(t, fan_in)
    local bound = fan_in > 0 and 1 / sqrt(fan_in) or 0
    t:uniform_(-bound, bound)
    return t
  end

  -- Linear ---------------------------------------------------------------------------------------
  local Linear = layer("Linear", {
    {"in_features", K.natural}, {"out_features", K.natural}, {"bias", K.bool, true}, DEVICE, DTYPE,
  }, function(self, a)
    local fan_in = a.in_features
    self.in_features, self.out_features = a.in_features, a.out_features
    self.weight = nn.Parameter(init_uniform(new(tc.empty, {a.out_features, a.in_features}, a), fan_in))
    if a.bias then self.bias = nn.Parameter(init_uniform(new(tc.empty, {a.out_features}, a), fan_in)) end
  end)
  function Linear:forward(x) return F.linear(x, self.weight, self.bias) end
  function Linear:extra_repr()
    return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features, tostring(self.bias ~= nil))
  end

  local Bilinear = layer("Bilinear", {
    {"in1_features", K.natural}, {"in2_features", K.natural}, {"out_features", K.natural}, {"bias", K.bool, true},
    DEVICE, DTYPE,
  }, function(self, a)
    local in1, in2, out = a.in1_features, a.in2_features, a.out_features
    self.in1_features, self.in2_features, self.out_features = in1, in2, out
    self.weight = nn.Parameter(init_uniform(new(tc.empty, {out, in1, in2}, a), in1))
    if a.bias then self.bias = nn.Parameter(init_uniform(new(tc.empty, {out}, a), in1)) end
  end)
  function Bilinear:forward(x1, x2)
    -- y[..., o] = x1 W[o] x2^T + b[o], over any leading dims
    local lead = {}
    for d = 1, x1:dim() - 1 do lead[d] = x1:size(d) end
    local a, b = x1:reshape(-1, self.in1_features), x2:reshape(-1, self.in2_features)
    -- (B, in1) @ (in1, out*in2) -> (B, out, in2), then a row-wise dot with x2
    local w = self.weight:permute(2, 1, 3):reshape(self.in1_features, -1)
    local y = (a:matmul(w):view(-1, self.out_features, self.in2_features) * b:unsqueeze(2)):sum(3)
    if self.bias then y = y + self.bias end
    lead[#lead + 1] = self.out_features
    return y:reshape(lead)
  end

  -- Convolutions -----------------------------------------------------------------------------------
  local PADDING_MODE = {"padding_mode", K.choice("zeros", "reflect", "replicate", "circular"), "zeros", only_default = true}
  local function conv_class(name, nd, transposed)
    local size, size0 = K.size(nd), K.size(nd, 0)
    local rows = transposed and {
      {"in_channels", K.natural}, {"out_channels", K.natural}, {"kernel_size", size}, {"stride", size, 1},
      {"padding", K.padding(nd, false), 0}, {"output_padding", size0, 0}, {"groups", K.count, 1},
      {"bias", K.bool, true}, {"dilation", size, 1}, PADDING_MODE, DEVICE, DTYPE,
    } or {
      {"in_channels", K.natural}, {"out_channels", K.natural}, {"kernel_size", size}, {"stride", size, 1},
      {"padding", K.padding(nd, true), 0}, {"dilation", size, 1}, {"groups", K.count, 1},
      {"bias", K.bool, true}, PADDING_MODE, DEVICE, DTYPE,
    }
    return layer(name, rows, function(self, a)
      local cin, cout, k = a.in_channels, a.out_channels, a.kernel_size
      if cin % a.groups ~= 0 then invalid(name, "in_channels (%d) must be divisible by groups (%d)", cin, a.groups) end
      if cout % a.groups ~= 0 then invalid(name, "out_channels (%d) must be divisible by groups (%d)", cout, a.groups) end
      if a.padding == "same" then
        for _, s in ipairs(type(a.stride) == "table" and a.stride or {a.stride}) do
          if s ~= 1 then invalid(name, 'padding="same" is not supported for strided convolutions') end
        end
      end
      k = type(k) == "table" and k or (nd == 1 and {k} or {k, k})
      self.in_channels, self.out_channels, self.kernel_size = cin, cout, k
      self.stride, self.padding, self.dilation, self.groups = a.stride, a.padding, a.dilation, a.groups
      self.output_padding, self.padding_mode = a.output_padding or 0, a.padding_mode
      local ksize = 1
      for _, v in ipairs(k) do ksize = ksize * v end
      local shape = transposed and {cin, cout // self.groups} or {cout, cin // self.groups}
      for _, v in ipairs(k) do shape[#shape + 1] = v end
      -- PyTorch computes fan_in from weight dim 2 (in/groups for conv, out/groups for transposed)
      local fan_in = shape[2] * ksize
      self.weight = nn.Parameter(init_uniform(new(tc.empty, shape, a), fan_in))
      if a.bias then self.bias = nn.Parameter(init_uniform(new(tc.empty, {cout}, a), fan_in)) end
    end)
  end
  conv_class("Conv1d", 1)
  function nn.Conv1d:forward(x)
    return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
  end
  conv_class("Conv2d", 2)
  function nn.Conv2d:forward(x)
    return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
  end
  function nn.Conv2d:extra_repr()
    return string.format("%d, %d, kernel_size=(%d, %d)", self.in_channels, self.out_channels, self.kernel_size[1], self.kernel_size[2])
  end
  conv_class("ConvTranspose2d", 2, true)
  function nn.ConvTranspose2d:forward(x)
    return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups, self.dilation)
  end

  -- Normalisation ----------------------------------------------------------------------------------
  -- momentum = false is PyTorch's momentum=None: the running statistics are the cumulative
  -- average of the batches' (factor 1/num_batches_tracked).
  local MOMENTUM = {what = "a number or false (a cumulative average)",
    ok = function(v) return type(v) == "number" or v == false end}
  local function batchnorm_class(name)
    local B = layer(name, {
      {"num_features", K.natural}, {"eps", K.nonnegative, 1e-5}, {"momentum", MOMENTUM, 0.1},
      {"affine", K.bool, true}, {"track_running_stats", K.bool, true}, DEVICE, DTYPE,
    }, function(self, a)
      local n = a.num_features
      self.num_features, self.eps, self.momentum = n, a.eps, a.momentum
      self.affine, self.track_running_stats = a.affine, a.track_running_stats
      if self.affine then
        self.weight = nn.Parameter(new(tc.ones, {n}, a))
        self.bias = nn.Parameter(new(tc.zeros, {n}, a))
      end
      if self.track_running_stats then
        self:register_buffer("running_mean", new(tc.zeros, {n}, a))
        self:register_buffer("running_var", new(tc.ones, {n}, a))
        self:register_buffer("num_batches_tracked", tc.tensor(0, {dtype = tc.int64, device = a.device}))
      end
    end)
    local dims = name == "BatchNorm1d" and {[2] = true, [3] = true} or {[4] = true}
    function B:forward(x)
      if not dims[x:dim()] then
        raise("ValueError", ("%s: expected %s input (got %dD input)"):format(name,
          name == "BatchNorm1d" and "2D or 3D" or "4D", x:dim()))
      end
      local use_batch = self.training or not self.track_running_stats
      local momentum, counter = self.momentum, nil
      if self.training and self.track_running_stats then
        if momentum == false then
          self.num_batches_tracked:add_(1)
          momentum = 1 / self.num_batches_tracked:item()
        else
          counter = self.num_batches_tracked  -- incremented by batch_norm's own kernel
        end
      end
      if counter then
        return F.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var, use_batch,
          momentum, self.eps, {num_batches_tracked = counter})
      end
      return F.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var, use_batch,
        momentum or 0, self.eps)
    end
    return B
  end
  batchnorm_class("BatchNorm1d")
  batchnorm_class("BatchNorm2d")

  local function shape_of(v) return type(v) == "table" and v or {v} end
  local LayerNorm = layer("LayerNorm", {
    {"normalized_shape", K.shape}, {"eps", K.nonnegative, 1e-5}, {"elementwise_affine", K.bool, true},
    {"bias", K.bool, true}, DEVICE, DTYPE,
  }, function(self, a)
    self.normalized_shape, self.eps = shape_of(a.normalized_shape), a.eps
    if a.elementwise_affine then
      self.weight = nn.Parameter(new(tc.ones, self.normalized_shape, a))
      if a.bias then self.bias = nn.Parameter(new(tc.zeros, self.normalized_shape, a)) end
    end
  end)
  function LayerNorm:forward(x) return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps) end

  local GroupNorm = layer("GroupNorm", {
    {"num_groups", K.count}, {"num_channels", K.natural}, {"eps", K.nonnegative, 1e-5}, {"affine", K.bool, true},
    DEVICE, DTYPE,
  }, function(self, a)
    if a.num_channels % a.num_groups ~= 0 then
      invalid("GroupNorm", "num_channels (%d) must be divisible by num_groups (%d)", a.num_channels, a.num_groups)
    end
    self.num_groups, self.num_channels, self.eps = a.num_groups, a.num_channels, a.eps
    if a.affine then
      self.weight = nn.Parameter(new(tc.ones, {a.num_channels}, a))
      self.bias = nn.Parameter(new(tc.zeros, {a.num_channels}, a))
    end
  end)
  function GroupNorm:forward(x) return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps) end

  local RMSNorm = layer("RMSNorm", {
    {"normalized_shape", K.shape}, {"eps", K.nonnegative, None}, {"elementwise_affine", K.bool, true}, DEVICE, DTYPE,
  }, function(self, a)
    self.normalized_shape, self.eps = shape_of(a.normalized_shape), a.eps
    if a.elementwise_affine then self.weight = nn.Parameter(new(tc.ones, self.normalized_shape, a)) end
  end)
  function RMSNorm:forward(x) return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end

  -- Embedding, dropout, activations ------------------------------------------------------------------
  local Embedding = layer("Embedding", {
    {"num_embeddings", K.natural}, {"embedding_dim", K.natural}, {"padding_idx", K.dim, None},
    {"max_norm", K.number, None, only_default = true}, {"norm_type", K.number, 2.0},
    {"scale_grad_by_freq", K.bool, false, only_default = true}, {"sparse", K.bool, false, only_default = true},
    {"_weight", K.tensor, None}, {"_freeze", K.bool, false}, DEVICE, DTYPE,
  }, function(self, a)
    local num, dim, pad = a.num_embeddings, a.embedding_dim, a.padding_idx
    -- padding_idx is an id (1-based); a negative one counts from the end, as in PyTorch
    if pad ~= nil and (pad > num or pad < -num) then
      invalid("Embedding", "padding_idx (%d) must be within num_embeddings (%d)", pad, num)
    end
    if pad ~= nil and pad < 0 then pad = num + pad + 1 end
    self.num_embeddings, self.embedding_dim, self.padding_idx = num, dim, pad
    self.norm_type = a.norm_type
    if a._weight ~= nil then
      if a._weight.shape ~= tc.Size {num, dim} then
        raise("ShapeError", ("nn.Embedding(): _weight has shape %s, expected (%d, %d) (num_embeddings, embedding_dim)"):format(
          tostring(a._weight.shape), num, dim))
      end
      self.weight = nn.Parameter(a._weight, not a._freeze)
      return
    end
    self.weight = nn.Parameter(new(tc.randn, {num, dim}, a), not a._freeze)
    if pad then self.weight[pad] = 0 end
  end)
  function Embedding:forward(ids) return F.embedding(ids, self.weight, self.padding_idx) end

  -- inplace = true: the layer writes its result into its input, x:copy_(forward(x)), as PyTorch's
  -- in-place kernels do. It is chosen once, as the instance's forward, so the usual out-of-place
  -- forward reads no extra field (no extra guard per layer under compilation).
  local inplace_forms = setmetatable({}, {__mode = "k"})  -- a class's forward -> its in-place form
  local function set_inplace(self, inplace)
    self.inplace = inplace
    if not inplace then return end
    local forward = getmetatable(self).forward
    inplace_forms[forward] = inplace_forms[forward] or function(m, x) return x:copy_(forward(m, x)) end
    rawset(self, "forward", inplace_forms[forward])
  end

  local Dropout = layer("Dropout", {{"p", K.probability, 0.5}, {"inplace", K.bool, false}}, function(self, a)
    self.p = a.p
    set_inplace(self, a.inplace)
  end)
  function Dropout:forward(x) return F.dropout(x, self.p, self.training) end

  -- activation(name, rows, init, forward): a layer without parameters.
  local function activation(name, rows, init, fn)
    local A = layer(name, rows, init or function() end)
    A.forward = fn
    return A
  end
  local INPLACE = {{"inplace", K.bool, false}}
  local function init_inplace(self, a) set_inplace(self, a.inplace) end
  activation("ReLU", INPLACE, init_inplace, function(_, x) return tc.relu(x) end)
  activation("SiLU", INPLACE, init_inplace, function(_, x) return tc.silu(x) end)
  activation("Sigmoid", {}, nil, function(_, x) return tc.sigmoid(x) end)
  activation("Tanh", {}, nil, function(_, x) return tc.tanh(x) end)
  -- nn.Identity(...) accepts and ignores any arguments, as PyTorch's does.
  activation("Identity", {{"*args", K.any}, {"**kwargs", K.any}}, nil, function(_, x) return x end)
  activation("GELU", {{"approximate", K.choice("none", "tanh"), "none"}}, function(self, a)
    self.approximate = a.approximate
  end, function(self, x) return tc.gelu(x, {approximate = self.approximate}) end)
  -- dim defaults to the last dimension (PyTorch's dim=None picks one by the input's rank, with a warning)
  activation("Softmax", {{"dim", K.dim, None}}, function(self, a) self.dim = a.dim or -1 end,
    function(self, x) return tc.softmax(x, self.dim) end)
  activation("LeakyReLU", {{"negative_slope", K.number, 0.01}, {"inplace", K.bool, false}}, function(self, a)
    self.negative_slope = a.negative_slope
    set_inplace(self, a.inplace)
  end, function(self, x) return tc.leaky_relu(x, self.negative_slope) end)
  -- start_dim defaults to 2: tc's dims are 1-based (PyTorch's start_dim=1)
  activation("Flatten", {{"start_dim", K.dim, 2}, {"end_dim", K.dim, -1}}, function(self, a)
    self.start_dim, self.end_dim = a.start_dim, a.end_dim
  end, function(self, x) return x:flatten(self.start_dim, self.end_dim) end)

  -- Pooling -------------------------------------------------------------------------------------------
  local MaxPool2d = layer("MaxPool2d", {
    {"kernel_size", K.size(2)}, {"stride", K.size(2), None}, {"padding", K.size(2, 0), 0}, {"dilation", K.size(2), 1},
    {"return_indices", K.bool, false, only_default = true}, {"ceil_mode", K.bool, false},
  }, function(self, a)
    self.kernel_size, self.stride = a.kernel_size, a.stride or a.kernel_size
    self.padding, self.dilation, self.ceil_mode = a.padding, a.dilation, a.ceil_mode
  end)
  function MaxPool2d:forward(x)
    return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
  end

  local AvgPool2d = layer("AvgPool2d", {
    {"kernel_size", K.size(2)}, {"stride", K.size(2), None}, {"padding", K.size(2, 0), 0}, {"ceil_mode", K.bool, false},
    {"count_include_pad", K.bool, true}, {"divisor_override", K.count, None, only_default = true},
  }, function(self, a)
    self.kernel_size, self.stride = a.kernel_size, a.stride or a.kernel_size
    self.padding, self.ceil_mode, self.count_include_pad = a.padding, a.ceil_mode, a.count_include_pad
  end)
  function AvgPool2d:forward(x)
    return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)
  end

  local AdaptiveAvgPool2d = layer("AdaptiveAvgPool2d", {{"output_size", K.size(2)}}, function(self, a)
    self.output_size = pair(a.output_size)
  end)
  function AdaptiveAvgPool2d:forward(x) return F.adaptive_avg_pool2d(x, self.output_size) end

  -- Containers ----------------------------------------------------------------------------------------
  -- Sequential(m1, m2, ...) names children "1", "2", ...; add_module(name, m) adds named ones
  -- (torchvision-style "conv0", "denseblock1"); forward runs them in insertion order.
  local Sequential = layer("Sequential", {{"*args", K.module}}, function(self, a)
    rawset(self, "_list", {})
    for _, m in ipairs(a["*args"]) do self:add(m) end
  end)
  -- Every child is also reachable by position (seq[1], ipairs(seq)), named ones included.
  function Sequential:add_module(name, m)
    Module.add_module(self, name, m)
    local list = rawget(self, "_list")
    list[#list + 1] = m
    rawset(self, #list, m)
    return self
  end
  function Sequential:add(m)
    return self:add_module(tostring(#rawget(self, "_list") + 1), m)
  end
  Sequential.append = Sequential.add
  function Sequential:forward(x)
    local list = rawget(self, "_list")
    for i = 1, #list do x = list[i](x) end
    return x
  end
  function Sequential:__len() return #rawget(self, "_list") end

  local ModuleList = layer("ModuleList", {{"modules", K.module_list, None}}, function(self, a)
    self._n = 0
    for _, m in ipairs(a.modules or {}) do self:append(m) end
  end)
  function ModuleList:append(m)
    self._n = self._n + 1
    self:add_module(tostring(self._n), m)
    rawset(self, self._n, m)
    return self
  end
  function ModuleList:__len() return self._n end

  -- Children in the order of their sorted names (a Lua table has no insertion order).
  layer("ModuleDict", {{"modules", K.module_dict, None}}, function(self, a)
    local dict, keys = a.modules or {}, {}
    for k in pairs(dict) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do self:add_module(k, dict[k]) end
  end)

  -- Attention -------------------------------------------------------------------------------------------
  -- kdim and vdim other than embed_dim (separate key/value projections) are not implemented.
  local MultiheadAttention = layer("MultiheadAttention", {
    {"embed_dim", K.count}, {"num_heads", K.count}, {"dropout", K.probability, 0.0}, {"bias", K.bool, true},
    {"add_bias_kv", K.bool, false, only_default = true}, {"add_zero_attn", K.bool, false, only_default = true},
    {"kdim", K.count, None}, {"vdim", K.count, None}, {"batch_first", K.bool, false}, DEVICE, DTYPE,
  }, function(self, a)
    local embed_dim, num_heads = a.embed_dim, a.num_heads
    if embed_dim % num_heads ~= 0 then
      invalid("MultiheadAttention", "embed_dim (%d) must be divisible by num_heads (%d)", embed_dim, num_heads)
    end
    for _, name in ipairs {"kdim", "vdim"} do
      if a[name] ~= nil and a[name] ~= embed_dim then
        raise("NotImplementedError", ("nn.MultiheadAttention(): %s = %d is not supported by tc (only embed_dim, %d)"):format(
          name, a[name], embed_dim))
      end
    end
    self.embed_dim, self.num_heads = embed_dim, num_heads
    self.batch_first = a.batch_first
    self.dropout = a.dropout
    -- xavier_uniform_ for the packed projection, zeros for its bias (PyTorch's _reset_parameters)
    local bound = sqrt(6 / (embed_dim + 3 * embed_dim))
    self.in_proj_weight = nn.Parameter(new(tc.empty, {3 * embed_dim, embed_dim}, a):uniform_(-bound, bound))
    if a.bias then self.in_proj_bias = nn.Parameter(new(tc.zeros, {3 * embed_dim}, a)) end
    self.out_proj = nn.Linear(embed_dim, embed_dim, a.bias, a.device, a.dtype)
    if a.bias then self.out_proj.bias:zero_() end
  end)
  -- query/key/value: [L, N, E] (or [N, L, E] with batch_first; [L, E] unbatched). Options:
  -- attn_mask ([L, S] or [N*heads, L, S]; bool: true = masked out, as in PyTorch; float: added),
  -- key_padding_mask ([N, S]; bool true = ignore that key), is_causal, need_weights (default true),
  -- average_attn_weights (default true). Returns the output and the attention weights (nil
  -- unless need_weights).
  function MultiheadAttention:forward(q, k, v, o)
    local unbatched = q:dim() == 2
    if unbatched then
      q, k, v = q:unsqueeze(2), k:unsqueeze(2), v:unsqueeze(2)
    elseif self.batch_first then
      q, k, v = q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2)
    end
    -- now [L, N, E]
    local L, N, E, S, h = q:size(1), q:size(2), self.embed_dim, k:size(1), self.num_heads
    local hd = E // h
    local w = self.in_proj_weight:chunk(3, 1)
    local b = self.in_proj_bias and self.in_proj_bias:chunk(3, 1) or {}
    -- [len, N, E] -> [N, h, len, hd]
    local function heads(x, wi, bi, len) return F.linear(x, wi, bi):view(len, N, h, hd):permute(2, 3, 1, 4) end
    local qh, kh, vh = heads(q, w[1], b[1], L), heads(k, w[2], b[2], S), heads(v, w[3], b[3], S)
    local mask = opt(o, "attn_mask")
    if mask ~= nil and mask:dim() == 3 then mask = mask:view(N, h, L, S) end
    if mask ~= nil and mask.dtype == tc.bool then
      mask = tc.zeros(mask.shape, {dtype = qh.dtype, device = qh.device}):masked_fill(mask, -math.huge)
    end
    local kpm = opt(o, "key_padding_mask")
    if kpm ~= nil then
      if kpm.dtype == tc.bool then
        kpm = tc.zeros(kpm.shape, {dtype = qh.dtype, device = qh.device}):masked_fill(kpm, -math.huge)
      end
      kpm = kpm:view(N, 1, 1, S)
      mask = mask and mask + kpm or kpm
    end
    if opt(o, "is_causal", false) and mask == nil then
      mask = tc.zeros(L, S, {dtype = qh.dtype, device = qh.device}):masked_fill(
        tc.ones(L, S, {dtype = tc.bool, device = qh.device}):triu(1), -math.huge)
    end
    local p = self.training and self.dropout or 0
    local need_weights = opt(o, "need_weights", true)
    local attn, weights
    if need_weights or p > 0 then
      local scores = qh:matmul(kh:transpose(3, 4)) * (1 / math.sqrt(hd))
      if mask ~= nil then scores = scores + mask end
      weights = scores:softmax(-1)
      attn = F.dropout(weights, p, p > 0):matmul(vh)
    else
      attn = F.scaled_dot_product_attention(qh, kh, vh, mask)
    end
    -- [N, h, L, hd] -> [L, N, E]
    local out = self.out_proj(attn:permute(3, 1, 2, 4):reshape(L, N, E))
    if unbatched then
      out = out:squeeze(2)
    elseif self.batch_first then
      out = out:transpose(1, 2)
    end
    if not need_weights then return out, nil end
    if opt(o, "average_attn_weights", true) then weights = weights:mean(2) end
    if unbatched then weights = weights:squeeze(1) end
    return out, weights
  end

  local TransformerEncoderLayer = layer("TransformerEncoderLayer", {
    {"d_model", K.count}, {"nhead", K.count}, {"dim_feedforward", K.count, 2048}, {"dropout", K.probability, 0.1},
    {"activation", K.activation, "relu"}, {"layer_norm_eps", K.nonnegative, 1e-5}, {"batch_first", K.bool, false},
    {"norm_first", K.bool, false}, {"bias", K.bool, true}, DEVICE, DTYPE,
  }, function(self, a)
    local d, p, bias, f = a.d_model, a.dropout, a.bias, factory(a) or {}
    self.self_attn = nn.MultiheadAttention(d, a.nhead, {dropout = p, bias = bias, batch_first = a.batch_first,
                                                        device = f.device, dtype = f.dtype})
    self.linear1 = nn.Linear(d, a.dim_feedforward, bias, f.device, f.dtype)
    self.dropout = nn.Dropout(p)
    self.linear2 = nn.Linear(a.dim_feedforward, d, bias, f.device, f.dtype)
    self.norm_first = a.norm_first
    self.norm1 = nn.LayerNorm(d, a.layer_norm_eps, true, bias, f.device, f.dtype)
    self.norm2 = nn.LayerNorm(d, a.layer_norm_eps, true, bias, f.device, f.dtype)
    self.dropout1 = nn.Dropout(p)
    self.dropout2 = nn.Dropout(p)
    self.activation = a.activation
  end)
  function TransformerEncoderLayer:_sa(x, mask, causal, kpm)
    return self.dropout1((self.self_attn(x, x, x, {attn_mask = mask, is_causal = causal, key_padding_mask = kpm,
      need_weights = false})))
  end
  function TransformerEncoderLayer:_ff(x)
    local act = self.activation
    if type(act) == "string" then act = act == "gelu" and tc.gelu or tc.relu end
    return self.dropout2(self.linear2(self.dropout(act(self.linear1(x)))))
  end
  function TransformerEncoderLayer:forward(src, o)
    local mask, causal = opt(o, "src_mask"), opt(o, "is_causal", false)
    local kpm = opt(o, "src_key_padding_mask")
    local x = src
    if self.norm_first then
      x = x + self:_sa(self.norm1(x), mask, causal, kpm)
      x = x + self:_ff(self.norm2(x))
    else
      x = self.norm1(x + self:_sa(x, mask, causal, kpm))
      x = self.norm2(x + self:_ff(x))
    end
    return x
  end

  -- Losses ------------------------------------------------------------------------------------------------
  -- size_average and reduce are PyTorch's deprecated spellings of reduction: only their default.
  local WEIGHT, POS_WEIGHT = {"weight", K.tensor, None}, {"pos_weight", K.tensor, None}
  local SIZE_AVERAGE = {"size_average", K.bool, None, only_default = true}
  local REDUCE = {"reduce", K.bool, None, only_default = true}
  local REDUCTION = {"reduction", K.choice("none", "mean", "sum"), "mean"}
  local IGNORE_INDEX = {"ignore_index", K.int, -100}
  local function loss_class(name, rows, fn)
    local L = layer(name, rows, function(self, a)
      self.reduction, self.ignore_index, self.label_smoothing = a.reduction, a.ignore_index, a.label_smoothing
      if a.weight then self:register_buffer("weight", a.weight) end
      if a.pos_weight then self:register_buffer("pos_weight", a.pos_weight) end
    end)
    L.forward = fn
  end
  loss_class("CrossEntropyLoss", {WEIGHT, SIZE_AVERAGE, IGNORE_INDEX, REDUCE, REDUCTION, {"label_smoothing", K.probability, 0.0}},
    function(self, input, target)
      return F.cross_entropy(input, target, self.weight, self.reduction, self.ignore_index, self.label_smoothing)
    end)
  loss_class("NLLLoss", {WEIGHT, SIZE_AVERAGE, IGNORE_INDEX, REDUCE, REDUCTION}, function(self, input, target)
    return F.nll_loss(input, target, self.weight, self.reduction, self.ignore_index)
  end)
  loss_class("MSELoss", {SIZE_AVERAGE, REDUCE, REDUCTION}, function(self, input, target)
    return F.mse_loss(input, target, self.reduction)
  end)
  loss_class("L1Loss", {SIZE_AVERAGE, REDUCE, REDUCTION}, function(self, input, target)
    return F.l1_loss(input, target, self.reduction)
  end)
  loss_class("BCEWithLogitsLoss", {WEIGHT, SIZE_AVERAGE, REDUCE, REDUCTION, POS_WEIGHT}, function(self, input, target)
    return F.binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)
  end)
end
