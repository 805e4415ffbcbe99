-- tc.nn.functional: the functional forms of the layers (PyTorch names), over tc's ops.
local tc = require "tc"
local F = {}

-- Ops of the op table with the same name and argument order as torch.nn.functional.
for _, name in ipairs {
  "linear", "conv1d", "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
  "adaptive_max_pool2d", "batch_norm", "layer_norm", "group_norm", "rms_norm", "embedding",
  "scaled_dot_product_attention", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
  "binary_cross_entropy", "binary_cross_entropy_with_logits", "interpolate", "dropout", "pad",
  "relu", "gelu", "silu", "sigmoid", "tanh", "softplus", "leaky_relu", "elu", "hardtanh",
  "softmax", "log_softmax",
} do
  F[name] = tc[name]
end

function F.relu6(x) return tc.hardtanh(x, 0, 6) end
function F.normalize(x, opts)
  opts = opts or {}
  local p, dim, eps = opts.p or 2, opts.dim or 2, opts.eps or 1e-12
  return x / tc.norm(x, p, dim, true):clamp(eps)
end
return F
