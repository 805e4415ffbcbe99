// The graph IR: building nodes, and the two listings (fx-style table and readable code).
#include "tc/capture/graph.h"

#include <algorithm>
#include <sstream>

namespace tc::capture {
namespace {

std::string unique_name(Graph& g, std::string base) {
  for (char& c : base)
    if (!isalnum((unsigned char)c) && c != '_') c = '_';
  if (base.empty() || isdigit((unsigned char)base[0])) base = "v" + base;
  int& n = g.names[base];  // references into an unordered_map survive rehashing
  if (n++ == 0) return base;
  std::string name;
  do name = base + "_" + std::to_string(n++);
  while (g.names.count(name));
  g.names[name] = 1;
  return name;
}

std::string format_value(const Value& v) {
  std::ostringstream o;
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.to_bool() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.to_int());
  if (v.is_double()) {
    o << v.to_double();
    return o.str();
  }
  if (v.is_string()) return "'" + v.str() + "'";
  if (v.is_dtype()) return std::string("tc.") + dtype_name(v.dtype());
  if (v.is_device()) return "'" + v.device().str() + "'";
  auto list = [&](const auto& xs) {
    o << "[";
    for (size_t i = 0; i < xs.size(); i++) o << (i ? ", " : "") << xs[i];
    o << "]";
    return o.str();
  };
  if (v.is_int_list()) return list(v.ints());
  if (v.is_float_list()) return list(v.floats());
  if (v.is_tensor()) {
    const Tensor& t = v.tensor();
    if (t.dim() == 0 && !t.is_fake()) {
      if (is_floating(t.dtype())) {
        o << t.item_double();
        return o.str();
      }
      return std::to_string(t.item_int());
    }
    return "<tensor " + t.meta_string() + ">";
  }
  return "?";
}

}  // namespace

Ref Graph::add_input(const std::string& name, const std::string& source, const Tensor& fake) {
  Node n;
  n.kind = NodeKind::Input;
  n.name = unique_name(*this, name);
  n.source = source;
  n.fakes.emplace_back(fake);
  nodes.push_back(std::move(n));
  inputs.push_back(int(nodes.size()) - 1);
  return {int(nodes.size()) - 1, 0, -1};
}

std::vector<Ref> Graph::add_op(Op op, std::vector<NodeArg> args, Stack fakes, int line) {
  Node n;
  n.kind = NodeKind::Op;
  n.op = op;
  n.args = std::move(args);
  n.fakes = std::move(fakes);
  n.name = unique_name(*this, op_name(op));
  n.line = line;
  nodes.push_back(std::move(n));
  const int id = int(nodes.size()) - 1;
  std::vector<Ref> refs;
  const Stack& f = nodes.back().fakes;
  for (int i = 0; i < int(f.size()); i++) {
    if (f[i].is_tensor_list()) {
      for (int e = 0; e < int(f[i].tensors().size()); e++) refs.push_back({id, i, e});
    } else {
      refs.push_back({id, i, -1});
    }
  }
  return refs;
}

std::vector<Ref> Graph::add_external(std::shared_ptr<const ExternalFn> fn,
                                     std::vector<NodeArg> args, Stack fakes, int line) {
  Node n;
  n.kind = NodeKind::External;
  n.name = unique_name(*this, "external");
  n.ext = std::move(fn);
  n.args = std::move(args);
  n.fakes = std::move(fakes);
  n.line = line;
  nodes.push_back(std::move(n));
  const int id = int(nodes.size()) - 1;
  std::vector<Ref> refs;
  for (int i = 0; i < int(nodes.back().fakes.size()); i++) refs.push_back({id, i, -1});
  return refs;
}

int Graph::view_root(Ref r) const {
  for (;;) {
    const Node& n = nodes[size_t(r.node)];
    if (n.kind != NodeKind::Op || schema(n.op).kind != OpKind::View || n.args.empty() ||
        n.args[0].kind != NodeArg::Kind::Ref)
      return r.node;
    r = n.args[0].refs[0];
  }
}

const Tensor& Graph::fake(Ref r) const {
  const Value& v = nodes[r.node].fakes[r.out];
  return r.elem >= 0 ? v.tensors()[r.elem] : v.tensor();
}

std::vector<std::string> Graph::op_names() const {
  std::vector<std::string> out;
  for (const Node& n : nodes)
    if (n.kind != NodeKind::Input) out.push_back(n.target());
  return out;
}

std::string Graph::ref_name(Ref r) const {
  std::string s = nodes[r.node].name;
  const Node& n = nodes[r.node];
  if (n.fakes.size() > 1 || r.elem >= 0) s += "[" + std::to_string(r.out + 1) + "]";
  if (r.elem >= 0) s += "[" + std::to_string(r.elem + 1) + "]";
  return s;
}

std::string Graph::meta_string(Ref r) const {
  const Tensor& t = fake(r);
  std::string s = std::string(dtype_name(t.dtype())) + "[";
  int input = -1;
  for (int i = 0; i < int(inputs.size()); i++)
    if (inputs[i] == r.node) input = i;
  for (int d = 0; d < t.dim(); d++) {
    if (d) s += ", ";
    int sym = -1;
    for (int k = 0; k < int(dynamic_dims.size()); k++)
      if (dynamic_dims[k].first == input && dynamic_dims[k].second == d) sym = k;
    s += sym >= 0 ? "s" + std::to_string(sym) : std::to_string(t.sizes()[d]);
  }
  return s + "]";
}

static std::string args_string(const Graph& g, const Node& n) {
  const OpSchema* s = n.kind == NodeKind::Op ? &schema(n.op) : nullptr;
  std::string out;
  for (size_t i = 0; i < n.args.size(); i++) {
    const NodeArg& a = n.args[i];
    if (i) out += ", ";
    if (s && i < s->args.size() && s->args[i].kwonly) out += s->args[i].name + "=";
    if (a.kind == NodeArg::Kind::Ref) {
      out += g.ref_name(a.refs[0]);
    } else if (a.kind == NodeArg::Kind::RefList) {
      out += "[";
      for (size_t k = 0; k < a.refs.size(); k++) out += (k ? ", " : "") + g.ref_name(a.refs[k]);
      out += "]";
    } else {
      out += format_value(a.constant);
    }
  }
  return out;
}

std::string Graph::print_tabular() const {
  struct Row {
    std::string opcode, name, target, args;
  };
  std::vector<Row> rows;
  for (const Node& n : nodes) {
    if (n.kind == NodeKind::Input)
      rows.push_back({"placeholder", n.name, n.source, "()"});
    else
      rows.push_back({"call_function", n.name, n.target(),
                      "(" + args_string(*this, n) + (n.args.size() == 1 ? ",)" : ")")});
  }
  std::string outs;
  for (size_t i = 0; i < outputs.size(); i++) outs += (i ? ", " : "") + ref_name(outputs[i]);
  rows.push_back(
      {"output", "output", "output", "((" + outs + (outputs.size() == 1 ? ",)" : ")") + ",)"});
  size_t w[4] = {6, 4, 6, 4};
  for (const Row& r : rows) {
    w[0] = std::max(w[0], r.opcode.size());
    w[1] = std::max(w[1], r.name.size());
    w[2] = std::max(w[2], r.target.size());
    w[3] = std::max(w[3], r.args.size());
  }
  auto pad = [](const std::string& s, size_t n) { return s + std::string(n - s.size(), ' '); };
  std::string out =
      pad("opcode", w[0]) + "  " + pad("name", w[1]) + "  " + pad("target", w[2]) + "  args\n";
  out += std::string(w[0], '-') + "  " + std::string(w[1], '-') + "  " + std::string(w[2], '-') +
         "  " + std::string(w[3], '-') + "\n";
  for (const Row& r : rows)
    out += pad(r.opcode, w[0]) + "  " + pad(r.name, w[1]) + "  " + pad(r.target, w[2]) + "  " +
           r.args + "\n";
  return out;
}

std::string Graph::print_code() const {
  std::string out = "graph(";
  for (size_t i = 0; i < inputs.size(); i++) {
    const Node& n = nodes[inputs[i]];
    out += (i ? ", " : "") + ("%" + n.name) + ": " + meta_string({inputs[i], 0, -1});
  }
  out += "):\n";
  for (int id = 0; id < int(nodes.size()); id++) {
    const Node& n = nodes[id];
    if (n.kind == NodeKind::Input) {
      out += "  # %" + n.name + " = " + n.source + "\n";
      continue;
    }
    std::string metas;
    for (int i = 0; i < int(n.fakes.size()); i++) {
      if (i) metas += ", ";
      if (n.fakes[i].is_tensor_list()) {
        metas += "[";
        for (int e = 0; e < int(n.fakes[i].tensors().size()); e++)
          metas += (e ? ", " : "") + meta_string({id, i, e});
        metas += "]";
      } else {
        metas += meta_string({id, i, -1});
      }
    }
    out +=
        "  %" + n.name + " : " + metas + " = " + n.target() + "(" + args_string(*this, n) + ")";
    if (n.line >= 0) out += "  # line " + std::to_string(n.line);
    out += "\n";
  }
  out += "  return (";
  for (size_t i = 0; i < outputs.size(); i++) out += (i ? ", " : "") + ("%" + ref_name(outputs[i]));
  return out + ")\n";
}

}  // namespace tc::capture
