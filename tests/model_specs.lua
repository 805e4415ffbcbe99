-- The models of scripts/models at small inputs, for the tests that run every model (GoogleTest
-- files embed `local specs = dofile("tests/model_specs.lua")`; the working directory is the
-- project's root, as ctest sets it): name -> {make the model, make its input}.
local tc = require "tc"
package.path = "scripts/models/?.lua;" .. package.path
return {
  seed_64_layers = {function() return require("seed_layers").Model() end, function() return tc.randn(10, 10) end},
  my_module = {function() return require("my_module").MyModule() end, function() return tc.randn(10, 100) end},
  resnet18 = {function() return require("resnet").resnet18() end, function() return tc.randn(2, 3, 64, 64) end},
  resnet50 = {function() return require("resnet").resnet50() end, function() return tc.randn(1, 3, 64, 64) end},
  densenet121 = {function() return require("densenet").densenet121() end, function() return tc.randn(1, 3, 64, 64) end},
  inception_v3 = {function() return require("inception").inception_v3() end, function() return tc.randn(1, 3, 299, 299) end},
  gpt2 = {function() return require("gpt2").gpt2({n_layer = 2}) end, function() return tc.randint(1, 50258, {2, 16}) end},
}
