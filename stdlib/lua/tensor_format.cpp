// tostring(x): PyTorch's tensor repr (torch/_tensor_str.py of 1.13: precision 4, threshold 1000,
// edge items 3, line width 80 unless tc.set_printoptions says otherwise; int/fixed/scientific mode
// chosen from all printed values, or forced by sci_mode), then a footer line with dtype, size and
// device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lua_binding.h"

namespace tc::lua {
namespace {

// PyTorch's PRINT_OPTS (tc.set_printoptions); sci_mode -1 is None (chosen from the values).
struct PrintOptions {
  int precision = 4;
  int64_t threshold = 1000, edgeitems = 3, linewidth = 80;
  int sci_mode = -1;
};
PrintOptions g_opts;

// Python's float formatting for the cases PyTorch uses ("{:.4f}", "{:.4e}", "{:.0f}").
std::string fixed(double v, int prec) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}
std::string sci(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*e", g_opts.precision, v);
  return buf;
}

// Reads elements of a CPU tensor as double / int64 / bool.
struct Elements {
  const char* base;
  DType dtype;
  double real(int64_t off) const {
    return visit_dtype(dtype, [&]<typename T>() {
      return (double)static_cast<opmath_t<T>>(reinterpret_cast<const T*>(base)[off]);
    });
  }
  int64_t integer(int64_t off) const {
    return visit_dtype(dtype, [&]<typename T>() {
      return (int64_t)static_cast<opmath_t<T>>(reinterpret_cast<const T*>(base)[off]);
    });
  }
};

struct Formatter {
  bool floating = false, boolean = false, int_mode = true, sci_mode = false;
  size_t max_width = 1;
  const Elements* el = nullptr;

  std::string raw(int64_t off) const {
    if (boolean) return el->integer(off) ? "True" : "False";
    if (!floating) return std::to_string(el->integer(off));
    double v = el->real(off);
    if (sci_mode) return sci(v);
    if (int_mode) return fixed(v, 0) + (std::isfinite(v) ? "." : "");
    return fixed(v, g_opts.precision);
  }
  std::string format(int64_t off) const {
    std::string s = raw(off);
    return s.size() < max_width ? std::string(max_width - s.size(), ' ') + s : s;
  }

  void init(const std::vector<int64_t>& offs) {
    if (!floating) {
      for (int64_t o : offs) max_width = std::max(max_width, raw(o).size());
      return;
    }
    std::vector<double> vals;
    for (int64_t o : offs) {
      double v = el->real(o);
      if (std::isfinite(v) && v != 0) vals.push_back(v);
    }
    if (vals.empty()) return;
    double mn = INFINITY, mx = 0;
    for (double v : vals) {
      mn = std::min(mn, std::fabs(v));
      mx = std::max(mx, std::fabs(v));
      if (v != std::ceil(v)) int_mode = false;
    }
    if (int_mode) {
      sci_mode = mx / mn > 1000.0 || mx > 1.0e8;
      for (double v : vals) max_width = std::max(max_width, sci_mode ? sci(v).size() : fixed(v, 0).size() + 1);
    } else {
      sci_mode = mx / mn > 1000.0 || mx > 1.0e8 || mn < 1.0e-4;
      for (double v : vals) max_width = std::max(max_width, sci_mode ? sci(v).size() : fixed(v, g_opts.precision).size());
    }
    if (g_opts.sci_mode >= 0) sci_mode = g_opts.sci_mode == 1;  // after the widths, as PyTorch
  }
};

struct Printer {
  const Tensor& t;
  bool summarize;
  Formatter f;

  bool cut(int64_t d) const { return summarize && t.sizes()[d] > 2 * g_opts.edgeitems; }

  // Offsets of the printed elements, in print order (PyTorch's get_summarized_data).
  void collect(int64_t d, int64_t off, std::vector<int64_t>& out) const {
    if (d == t.dim()) {
      out.push_back(off);
      return;
    }
    int64_t n = t.sizes()[d];
    for (int64_t i = 0; i < n; i++) {
      if (cut(d) && i == g_opts.edgeitems) i = n - g_opts.edgeitems;
      collect(d + 1, off + i * t.strides()[d], out);
    }
  }

  std::string vec(int64_t off, int indent) const {
    int64_t n = t.sizes().back(), st = t.strides().back();
    std::vector<std::string> data;
    for (int64_t i = 0; i < n; i++) {
      if (cut(t.dim() - 1) && i == g_opts.edgeitems) {
        data.push_back(" ...");
        i = n - g_opts.edgeitems;
      }
      data.push_back(f.format(off + i * st));
    }
    size_t per_line = std::max<int64_t>(1, (int64_t)std::floor((g_opts.linewidth - indent) / (double)(f.max_width + 2)));
    std::string s = "[";
    for (size_t i = 0; i < data.size(); i++) {
      if (i > 0) s += i % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : ", ";
      s += data[i];
    }
    return s + "]";
  }

  std::string str(int64_t d, int64_t off, int indent) const {
    if (t.dim() == 0) return f.format(off);
    if (d == t.dim() - 1) return vec(off, indent);
    int64_t n = t.sizes()[d];
    std::string sep = "," + std::string(t.dim() - d - 1, '\n') + std::string(indent + 1, ' ');
    std::string s = "[";
    for (int64_t i = 0; i < n; i++) {
      if (i > 0) s += sep;
      if (cut(d) && i == g_opts.edgeitems) {
        s += "..." + sep;
        i = n - g_opts.edgeitems;
      }
      s += str(d + 1, off + i * t.strides()[d], indent + 1);
    }
    return s + "]";
  }
};

std::string size_tuple(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

std::string add_suffixes(std::string s, const std::vector<std::string>& suffixes, int indent) {
  size_t nl = s.rfind('\n');
  size_t last = nl == std::string::npos ? s.size() + 2 : s.size() - nl + 1;  // as _add_suffixes
  for (const std::string& x : suffixes) {
    if (int64_t(last + x.size() + 2) > g_opts.linewidth) {
      s += ",\n" + std::string(indent, ' ') + x;
      last = indent + x.size();
    } else {
      s += ", " + x;
      last += x.size() + 2;
    }
  }
  return s + ")";
}

}  // namespace


// A device tensor's elements on the host for printing: the span of its storage that the view
// covers, copied once and viewed with the same sizes and strides, so a broadcast view
// (ones(1):expand(2^62)) copies one element rather than materialising every one.
static Tensor host_view(const Tensor& x) {
  int64_t span = 1;
  for (size_t d = 0; d < x.sizes().size(); d++) {
    if (x.strides()[d] < 0) {  // (no such views today; copy the elements as they are)
      Tensor t = Tensor::empty(x.sizes(), x.dtype());
      t.copy_from(x);
      return t;
    }
    span = checked_add(span, checked_mul(x.sizes()[d] - 1, x.strides()[d], "printing"), "printing");
  }
  Tensor host = Tensor::empty({span}, x.dtype());
  host.copy_from(x.as_strided({span}, {1}, x.offset()));
  return host.as_strided(x.sizes(), x.strides(), 0);
}

std::string format_tensor(const Tensor& x) {
  const std::string prefix = "tensor(";
  const int indent = (int)prefix.size();
  std::vector<std::string> suffixes;
  if (x.device().type != default_device().type || (x.device().is_cuda() && x.device().index != 0))
    suffixes.push_back("device='" + x.device().str() + "'");
  std::string body;
  std::string dt = std::string("dtype=tc.") + dtype_name(x.dtype());
  if (x.is_fake()) {
    body = "...";
    suffixes.push_back("size=" + size_tuple(x.sizes()));
    suffixes.push_back(dt);
  } else if (x.numel() == 0) {
    if (x.dim() != 1) suffixes.push_back("size=" + size_tuple(x.sizes()));
    if (x.dtype() != default_dtype()) suffixes.push_back(dt);
    body = "[]";
  } else {
    if (x.dtype() != default_dtype() && x.dtype() != DType::Int64 && x.dtype() != DType::Bool) suffixes.push_back(dt);
    Tensor t = x;
    if (!t.device().is_cpu()) t = host_view(x);
    Elements el{static_cast<const char*>(t.data_ptr()), t.dtype()};
    Printer p{t, t.numel() > g_opts.threshold, {}};
    p.f.floating = is_floating(t.dtype());
    p.f.boolean = t.dtype() == DType::Bool;
    p.f.el = &el;
    std::vector<int64_t> offs;
    p.collect(0, 0, offs);
    p.f.init(offs);
    body = p.str(0, 0, indent);
  }
  if (x.requires_grad()) suffixes.push_back("requires_grad=True");
  return add_suffixes(prefix + body, suffixes, indent);
}

// tc._C.printoptions([opts]): sets the numeric fields of opts that are present and sci_mode (a
// boolean, or nil for None), as checked by tc._tensor.lua's tc.set_printoptions; returns the
// options as a table (threshold math.huge when unbounded, sci_mode absent when None).
int l_printoptions(lua_State* L) {
  if (lua_istable(L, 1)) {
    int64_t precision = g_opts.precision;
    for (auto [name, lo, out] : {std::tuple{"precision", int64_t(0), &precision}, {"threshold", 0, &g_opts.threshold},
                                 {"edgeitems", 0, &g_opts.edgeitems}, {"linewidth", 1, &g_opts.linewidth}}) {
      if (lua_getfield(L, 1, name) == LUA_TNUMBER) {
        double v = lua_tonumber(L, -1);
        *out = v >= 9.0e18 ? INT64_MAX : std::max<int64_t>(lo, (int64_t)v);
      }
      lua_pop(L, 1);
    }
    g_opts.precision = (int)std::min<int64_t>(precision, 200);  // snprintf's buffers hold 512 characters
    lua_getfield(L, 1, "sci_mode");
    g_opts.sci_mode = lua_isboolean(L, -1) ? lua_toboolean(L, -1) : -1;
    lua_pop(L, 1);
  }
  lua_createtable(L, 0, 5);
  for (auto [name, v] : {std::pair{"precision", int64_t(g_opts.precision)}, {"threshold", g_opts.threshold},
                         {"edgeitems", g_opts.edgeitems}, {"linewidth", g_opts.linewidth}}) {
    if (v == INT64_MAX)
      lua_pushnumber(L, HUGE_VAL);
    else
      lua_pushinteger(L, v);
    lua_setfield(L, -2, name);
  }
  if (g_opts.sci_mode >= 0) {
    lua_pushboolean(L, g_opts.sci_mode);
    lua_setfield(L, -2, "sci_mode");
  }
  return 1;
}

std::string tensor_footer(const Tensor& t) {
  std::string size;
  for (size_t i = 0; i < t.sizes().size(); i++) size += (i ? "x" : "") + std::to_string(t.sizes()[i]);
  if (t.dim() == 0) size = "()";
  return std::string("[tc.") + dtype_name(t.dtype()) + " of size " + size + " on " + t.device().str() + "]";
}

}  // namespace tc::lua
