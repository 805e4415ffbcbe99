-- The standard layers, containers and losses of tc.nn (PyTorch names, argument order and
-- default initialisation). Loaded by tc.nn: returns a function that fills the nn table.
return function(nn, tc, F)
  local Module = nn.Module
  local raise = tc._C.raise
  local sqrt = math.sqrt

  local function opt(o, k, default)
    if o == nil or o[k] == nil then return default end
    return o[k]
  end
  local function pair(v) return type(v) == "table" and v or {v, v} end
  -- Creation options {dtype=, device=} from a layer's options table, or nil when neither is set.
  local function factory(o)
    if o == nil or (o.dtype == nil and o.device == nil) then return nil end
    return {dtype = o.dtype, device = o.device}
  end
  local function new(ctor, shape, o)
    local f = factory(o)
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
  local Linear = Module:extend("Linear")
  nn.Linear = Linear
  function Linear:__init(in_features, out_features, o)
    self.in_features, self.out_features = in_features, out_features
    self.weight = nn.Parameter(init_uniform(new(tc.empty, {out_features, in_features}, o), in_features))
    if opt(o, "bias", true) then
      self.bias = nn.Parameter(init_uniform(new(tc.empty, {out_features}, o), in_features))
    end
  end
  function Linear:forward(x) return F.linear(x, self.weight, self.bias) end
  function Linear:extra_repr()
    return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features, tostring(self.bias ~= nil))
  end

  local Bilinear = Module:extend("Bilinear")
  nn.Bilinear = Bilinear
  function Bilinear:__init(in1, in2, out, o)
    self.in1_features, self.in2_features, self.out_features = in1, in2, out
    self.weight = nn.Parameter(init_uniform(tc.empty(out, in1, in2), in1))
    if opt(o, "bias", true) then self.bias = nn.Parameter(init_uniform(tc.empty(out), in1)) end
  end
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
  local function conv_class(name, nd, transposed)
    local C = Module:extend(name)
    function C:__init(cin, cout, k, o)
      k = type(k) == "table" and k or (nd == 1 and {k} or {k, k})
      self.in_channels, self.out_channels, self.kernel_size = cin, cout, k
      self.stride = opt(o, "stride", 1)
      self.padding = opt(o, "padding", 0)
      self.dilation = opt(o, "dilation", 1)
      self.groups = opt(o, "groups", 1)
      self.output_padding = opt(o, "output_padding", 0)
      local ksize = 1
      for _, v in ipairs(k) do ksize = ksize * v end
      local shape = transposed and {cin, cout // self.groups} or {cout, cin // self.groups}
      for _, v in ipairs(k) do shape[#shape + 1] = v end
      -- PyTorch computes fan_in from weight dim 2 (in/groups for conv, out/groups for transposed)
      local fan_in = shape[2] * ksize
      self.weight = nn.Parameter(init_uniform(tc.empty(shape), fan_in))
      if opt(o, "bias", true) then self.bias = nn.Parameter(init_uniform(tc.empty(cout), fan_in)) end
    end
    return C
  end
  nn.Conv1d = conv_class("Conv1d", 1)
  function nn.Conv1d:forward(x)
    return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
  end
  nn.Conv2d = conv_class("Conv2d", 2)
  function nn.Conv2d:forward(x)
    return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
  end
  function nn.Conv2d:extra_repr()
    return string.format("%d, %d, kernel_size=(%d, %d)", self.in_channels, self.out_channels, self.kernel_size[1], self.kernel_size[2])
  end
  nn.ConvTranspose2d = conv_class("ConvTranspose2d", 2, true)
  function nn.ConvTranspose2d:forward(x)
    return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups, self.dilation)
  end

  -- Normalisation ----------------------------------------------------------------------------------
  local function batchnorm_class(name)
    local B = Module:extend(name)
    function B:__init(num_features, o)
      self.num_features = num_features
      self.eps = opt(o, "eps", 1e-5)
      self.momentum = opt(o, "momentum", 0.1)
      self.affine = opt(o, "affine", true)
      self.track_running_stats = opt(o, "track_running_stats", true)
      if self.affine then
        self.weight = nn.Parameter(tc.ones(num_features))
        self.bias = nn.Parameter(tc.zeros(num_features))
      end
      if self.track_running_stats then
        self:register_buffer("running_mean", tc.zeros(num_features))
        self:register_buffer("running_var", tc.ones(num_features))
        self:register_buffer("num_batches_tracked", tc.tensor(0, {dtype = tc.int64}))
      end
    end
    local dims = name == "BatchNorm1d" and {[2] = true, [3] = true} or {[4] = true}
    function B:forward(x)
      if not dims[x:dim()] then
        raise("ValueError", ("%s: expected %s input (got %dD input)"):format(name,
          name == "BatchNorm1d" and "2D or 3D" or "4D", x:dim()))
      end
      local use_batch = self.training or not self.track_running_stats
      if self.training and self.track_running_stats then
        self.num_batches_tracked:add_(1)
      end
      return F.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var, use_batch,
        self.momentum, self.eps)
    end
    return B
  end
  nn.BatchNorm1d = batchnorm_class("BatchNorm1d")
  nn.BatchNorm2d = batchnorm_class("BatchNorm2d")

  local LayerNorm = Module:extend("LayerNorm")
  nn.LayerNorm = LayerNorm
  function LayerNorm:__init(shape, o)
    self.normalized_shape = type(shape) == "table" and shape or {shape}
    self.eps = opt(o, "eps", 1e-5)
    if opt(o, "elementwise_affine", true) then
      self.weight = nn.Parameter(tc.ones(self.normalized_shape))
      if opt(o, "bias", true) then self.bias = nn.Parameter(tc.zeros(self.normalized_shape)) end
    end
  end
  function LayerNorm:forward(x) return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps) end

  local GroupNorm = Module:extend("GroupNorm")
  nn.GroupNorm = GroupNorm
  function GroupNorm:__init(num_groups, num_channels, o)
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, opt(o, "eps", 1e-5)
    if opt(o, "affine", true) then
      self.weight = nn.Parameter(tc.ones(num_channels))
      self.bias = nn.Parameter(tc.zeros(num_channels))
    end
  end
  function GroupNorm:forward(x) return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps) end

  local RMSNorm = Module:extend("RMSNorm")
  nn.RMSNorm = RMSNorm
  function RMSNorm:__init(shape, o)
    self.normalized_shape = type(shape) == "table" and shape or {shape}
    self.eps = opt(o, "eps")
    if opt(o, "elementwise_affine", true) then self.weight = nn.Parameter(tc.ones(self.normalized_shape)) end
  end
  function RMSNorm:forward(x) return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end

  -- Embedding, dropout, activations ------------------------------------------------------------------
  local Embedding = Module:extend("Embedding")
  nn.Embedding = Embedding
  function Embedding:__init(num, dim, o)
    self.num_embeddings, self.embedding_dim = num, dim
    self.padding_idx = opt(o, "padding_idx")
    self.weight = nn.Parameter(tc.randn(num, dim))
    if self.padding_idx then self.weight[self.padding_idx] = 0 end
  end
  function Embedding:forward(ids) return F.embedding(ids, self.weight, self.padding_idx) end

  local Dropout = Module:extend("Dropout")
  nn.Dropout = Dropout
  function Dropout:__init(p) self.p = p or 0.5 end
  function Dropout:forward(x) return F.dropout(x, self.p, self.training) end

  local function activation(name, fn)
    local A = Module:extend(name)
    nn[name] = A
    A.forward = fn
    return A
  end
  activation("ReLU", function(_, x) return tc.relu(x) end)
  activation("SiLU", function(_, x) return tc.silu(x) end)
  activation("Sigmoid", function(_, x) return tc.sigmoid(x) end)
  activation("Tanh", function(_, x) return tc.tanh(x) end)
  activation("Identity", function(_, x) return x end)
  local GELU = activation("GELU", function(self, x) return tc.gelu(x, {approximate = self.approximate}) end)
  function GELU:__init(o) self.approximate = opt(o, "approximate", "none") end
  local Softmax = activation("Softmax", function(self, x) return tc.softmax(x, self.dim) end)
  function Softmax:__init(dim) self.dim = dim or -1 end
  local LeakyReLU = activation("LeakyReLU", function(self, x) return tc.leaky_relu(x, self.negative_slope) end)
  function LeakyReLU:__init(slope) self.negative_slope = slope or 0.01 end
  local Flatten = activation("Flatten", function(self, x) return x:flatten(self.start_dim, self.end_dim) end)
  function Flatten:__init(s, e) self.start_dim, self.end_dim = s or 2, e or -1 end

  -- Pooling -------------------------------------------------------------------------------------------
  local MaxPool2d = Module:extend("MaxPool2d")
  nn.MaxPool2d = MaxPool2d
  function MaxPool2d:__init(k, o)
    self.kernel_size, self.stride = k, opt(o, "stride", k)
    self.padding, self.dilation, self.ceil_mode = opt(o, "padding", 0), opt(o, "dilation", 1), opt(o, "ceil_mode", false)
  end
  function MaxPool2d:forward(x)
    return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
  end

  local AvgPool2d = Module:extend("AvgPool2d")
  nn.AvgPool2d = AvgPool2d
  function AvgPool2d:__init(k, o)
    self.kernel_size, self.stride = k, opt(o, "stride", k)
    self.padding, self.ceil_mode = opt(o, "padding", 0), opt(o, "ceil_mode", false)
    self.count_include_pad = opt(o, "count_include_pad", true)
  end
  function AvgPool2d:forward(x)
    return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)
  end

  local AdaptiveAvgPool2d = Module:extend("AdaptiveAvgPool2d")
  nn.AdaptiveAvgPool2d = AdaptiveAvgPool2d
  function AdaptiveAvgPool2d:__init(size) self.output_size = pair(size) end
  function AdaptiveAvgPool2d:forward(x) return F.adaptive_avg_pool2d(x, self.output_size) end

  -- Containers ----------------------------------------------------------------------------------------
  -- Sequential(m1, m2, ...) names children "1", "2", ...; add_module(name, m) adds named ones
  -- (torchvision-style "conv0", "denseblock1"); forward runs them in insertion order.
  local Sequential = Module:extend("Sequential")
  nn.Sequential = Sequential
  function Sequential:__init(...)
    rawset(self, "_list", {})
    for _, m in ipairs {...} do self:add(m) end
  end
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

  local ModuleList = Module:extend("ModuleList")
  nn.ModuleList = ModuleList
  function ModuleList:__init(list)
    self._n = 0
    for _, m in ipairs(list or {}) do self:append(m) end
  end
  function ModuleList:append(m)
    self._n = self._n + 1
    self:add_module(tostring(self._n), m)
    rawset(self, self._n, m)
    return self
  end
  function ModuleList:__len() return self._n end

  local ModuleDict = Module:extend("ModuleDict")
  nn.ModuleDict = ModuleDict
  function ModuleDict:__init(dict)
    local keys = {}
    for k in pairs(dict or {}) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do self:add_module(k, dict[k]) end
  end

  -- Attention -------------------------------------------------------------------------------------------
  local MultiheadAttention = Module:extend("MultiheadAttention")
  nn.MultiheadAttention = MultiheadAttention
  function MultiheadAttention:__init(embed_dim, num_heads, o)
    assert(embed_dim % num_heads == 0, "embed_dim must be divisible by num_heads")
    self.embed_dim, self.num_heads = embed_dim, num_heads
    self.batch_first = opt(o, "batch_first", false)
    self.dropout = opt(o, "dropout", 0)
    -- xavier_uniform_ for the packed projection, zeros for its bias (PyTorch's _reset_parameters)
    local bound = sqrt(6 / (embed_dim + 3 * embed_dim))
    self.in_proj_weight = nn.Parameter(tc.empty(3 * embed_dim, embed_dim):uniform_(-bound, bound))
    self.in_proj_bias = nn.Parameter(tc.zeros(3 * embed_dim))
    self.out_proj = nn.Linear(embed_dim, embed_dim)
    self.out_proj.bias:zero_()
  end
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
    local b = self.in_proj_bias:chunk(3, 1)
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

  local TransformerEncoderLayer = Module:extend("TransformerEncoderLayer")
  nn.TransformerEncoderLayer = TransformerEncoderLayer
  function TransformerEncoderLayer:__init(d_model, nhead, o)
    local ff = opt(o, "dim_feedforward", 2048)
    local p = opt(o, "dropout", 0.1)
    self.self_attn = nn.MultiheadAttention(d_model, nhead, {dropout = p, batch_first = opt(o, "batch_first", false)})
    self.linear1 = nn.Linear(d_model, ff)
    self.dropout = nn.Dropout(p)
    self.linear2 = nn.Linear(ff, d_model)
    self.norm_first = opt(o, "norm_first", false)
    self.norm1 = nn.LayerNorm(d_model, {eps = opt(o, "layer_norm_eps", 1e-5)})
    self.norm2 = nn.LayerNorm(d_model, {eps = opt(o, "layer_norm_eps", 1e-5)})
    self.dropout1 = nn.Dropout(p)
    self.dropout2 = nn.Dropout(p)
    self.activation = opt(o, "activation", "relu")
  end
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
  local function loss_class(name, fn, fields)
    local L = Module:extend(name)
    nn[name] = L
    function L:__init(o)
      self.reduction = opt(o, "reduction", "mean")
      for k, d in pairs(fields or {}) do self[k] = opt(o, k, d) end
      if o and o.weight then self:register_buffer("weight", o.weight) end
      if o and o.pos_weight then self:register_buffer("pos_weight", o.pos_weight) end
    end
    L.forward = fn
  end
  loss_class("CrossEntropyLoss", function(self, input, target)
    return F.cross_entropy(input, target, self.weight, self.reduction, self.ignore_index, self.label_smoothing)
  end, {ignore_index = -100, label_smoothing = 0})
  loss_class("NLLLoss", function(self, input, target)
    return F.nll_loss(input, target, self.weight, self.reduction, self.ignore_index)
  end, {ignore_index = -100})
  loss_class("MSELoss", function(self, input, target) return F.mse_loss(input, target, self.reduction) end)
  loss_class("L1Loss", function(self, input, target) return F.l1_loss(input, target, self.reduction) end)
  loss_class("BCEWithLogitsLoss", function(self, input, target)
    return F.binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)
  end)
end
