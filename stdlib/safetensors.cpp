// safetensors reader and writer with strict validation of the header.
#include "tc/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tc/error.h"

namespace tc {
namespace {

using ojson = nlohmann::ordered_json;
constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit

const char* st_code(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Float16: return "F16";
    case DType::BFloat16: return "BF16";
    case DType::Int64: return "I64";
    case DType::Int32: return "I32";
    case DType::UInt8: return "U8";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

bool st_dtype(const std::string& code, DType* out) {
  for (int i = 0; i < kNumDTypes; i++)
    if (code == st_code((DType)i)) {
      *out = (DType)i;
      return true;
    }
  return false;
}

[[noreturn]] void corrupt(const std::string& file, const std::string& what) {
  TC_FAIL(IOError, "%s: not a valid safetensors file: %s", file.c_str(), what.c_str());
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  ojson header = ojson::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> cpu;
  uint64_t offset = 0;
  for (auto& [name, t] : tensors) {
    TC_CHECK(name != "__metadata__", ValueError, "tc.save: '__metadata__' cannot be a tensor name");
    TC_CHECK(!header.contains(name), ValueError, "tc.save: duplicate tensor name '%s'", name.c_str());
    TC_CHECK(!t.is_fake(), ValueError, "tc.save: tensor '%s' has no data", name.c_str());
    Tensor c = t;
    if (!c.device().is_cpu()) {
      c = Tensor::empty(t.sizes(), t.dtype());
      c.copy_from(t);
    }
    c = c.contiguous();
    uint64_t n = (uint64_t)c.numel() * c.itemsize();
    header[name] = {{"dtype", st_code(c.dtype())}, {"shape", c.sizes()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    cpu.push_back(c);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  TC_CHECK(f, IOError, "tc.save: cannot open '%s' for writing: %s", path.c_str(), std::strerror(errno));
  uint64_t hl = h.size();
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)(hl >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (const Tensor& c : cpu) {
    size_t n = (size_t)c.numel() * c.itemsize();
    ok = ok && (n == 0 || std::fwrite(c.data_ptr(), 1, n, f) == n);
  }
  ok = (std::fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    TC_FAIL(IOError, "tc.save: writing '%s' failed: %s", path.c_str(), std::strerror(err));
  }
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& file) {
  if (bytes.size() < 8) corrupt(file, "shorter than the 8-byte header length");
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)(unsigned char)bytes[i] << (8 * i);
  if (hl > kMaxHeader) corrupt(file, "header length " + std::to_string(hl) + " exceeds the 100 MB limit");
  if (hl > bytes.size() - 8)
    corrupt(file, "header length " + std::to_string(hl) + " runs past the end of the file (" +
                      std::to_string(bytes.size()) + " bytes)");
  ojson header;
  try {
    header = ojson::parse(bytes.begin() + 8, bytes.begin() + 8 + (std::ptrdiff_t)hl);
  } catch (const std::exception& e) {
    corrupt(file, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) corrupt(file, "header is not a JSON object");
  const char* data = bytes.data() + 8 + hl;
  uint64_t data_size = bytes.size() - 8 - hl;

  SafetensorsFile out;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) corrupt(file, "__metadata__ is not an object of strings");
      for (auto& [k, s] : v.items()) {
        if (!s.is_string()) corrupt(file, "__metadata__ value of '" + k + "' is not a string");
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      corrupt(file, "entry '" + name + "' lacks dtype, shape or data_offsets");
    Entry e{name, DType::Float32, {}, 0, 0};
    if (!v["dtype"].is_string() || !st_dtype(v["dtype"].get<std::string>(), &e.dtype))
      corrupt(file, "entry '" + name + "' has unsupported dtype " + v["dtype"].dump());
    const ojson& sh = v["shape"];
    if (!sh.is_array()) corrupt(file, "entry '" + name + "' shape is not an array");
    for (auto& d : sh) {
      if (!d.is_number_unsigned()) corrupt(file, "entry '" + name + "' shape has a non-integer or negative size");
      uint64_t s = d.get<uint64_t>();
      if (s > (uint64_t)INT64_MAX) corrupt(file, "entry '" + name + "' shape " + sh.dump() + " overflows int64");
      e.shape.push_back((int64_t)s);
    }
    uint64_t nbytes = 0;
    try {  // numel, strides and bytes through tc's checked size arithmetic
      nbytes = (uint64_t)storage_nbytes(e.shape, contiguous_strides(e.shape), 0, e.dtype);
    } catch (const Error& err) {
      corrupt(file, "entry '" + name + "' shape " + sh.dump() + " overflows (" + err.what() + ")");
    }
    const ojson& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      corrupt(file, "entry '" + name + "' data_offsets is not a pair of integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      corrupt(file, "entry '" + name + "' data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                        "] out of range of the " + std::to_string(data_size) + "-byte data section");
    if (e.end - e.begin != nbytes)
      corrupt(file, "entry '" + name + "' has " + std::to_string(e.end - e.begin) + " bytes but shape and dtype need " +
                        std::to_string(nbytes));
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (const Entry& e : entries) {
    if (e.begin < expect) corrupt(file, "entry '" + e.name + "' overlaps the previous tensor's data");
    if (e.begin > expect) corrupt(file, "gap in the data section before entry '" + e.name + "'");
    expect = e.end;
  }
  if (expect != data_size)
    corrupt(file, "data section has " + std::to_string(data_size - expect) + " bytes not covered by any tensor");
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    if (e.dtype == DType::Bool)  // only 0/1 are valid bools
      for (int64_t i = 0; i < t.numel(); i++)
        if (reinterpret_cast<unsigned char*>(t.data_ptr())[i] > 1) corrupt(file, "entry '" + e.name + "' has a bool byte other than 0 or 1");
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TC_CHECK(in, IOError, "tc.load: cannot open '%s': %s", path.c_str(), std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TC_CHECK(!in.bad(), IOError, "tc.load: reading '%s' failed", path.c_str());
  return parse_safetensors(bytes, path);
}

}  // namespace tc
