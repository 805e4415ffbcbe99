// Reading and writing safetensors files (the format of PyTorch's and Hugging Face's
// `safetensors` package): an 8-byte little-endian header length, a JSON header mapping names to
// {dtype, shape, data_offsets} plus an optional "__metadata__" string map, then the raw bytes.
//
//   tc::save_safetensors("w.safetensors", {{"weight", w}, {"bias", b}}, {{"format", "pt"}});
//   tc::SafetensorsFile f = tc::load_safetensors("w.safetensors");
//   for (auto& [name, t] : f.tensors) ...      // in file (offset) order
//
// Malformed files are rejected with an IOError naming the file and the rule broken; nothing is
// read out of bounds. Writes go to a temporary file renamed into place, so a crash never leaves
// a truncated file under the real name.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tc/tensor.h"

namespace tc {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);
// Parses an in-memory file image (what load_safetensors does after reading the file).
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& name_for_errors);

}  // namespace tc
