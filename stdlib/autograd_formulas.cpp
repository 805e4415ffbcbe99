// The rows of derivatives.def: parsed once into expression trees, evaluated by calling tc ops
// (through the dispatcher, so they record when the backward builds a graph) and the helpers of
// autograd_helpers.cpp.
#include <algorithm>
#include <cstring>

#include "autograd_internal.h"

namespace tc::autograd {

using Kw = std::vector<std::pair<std::string, Value>>;

struct Expr {
  enum Kind { Call, Name, Int, Float, Str, List, Bool, Nil } kind = Nil;
  std::string name;  // Call, Name, Str
  double num = 0;
  std::vector<Expr> args;
  std::vector<std::string> keys;  // per argument of a Call: "" or its keyword
  // resolved once the row's op is known: a call's helper or op; a name's meaning
  const Helper* helper = nullptr;
  Op op{};
  enum Ref { Grad, Grads, Result, Arg } ref = Arg;
  int index = 0;  // Grad: output; Result: output; Arg: argument
};

struct Formula {
  std::vector<int> inputs;  // argument indices
  Expr expr;
  SaveNeeds reads;  // what expr reads (computed once, after parsing)
};
const std::vector<int>& formula_inputs(const Formula& f) { return f.inputs; }

namespace {
// ---- parsing ------------------------------------------------------------------------------------
struct Parser {
  const char* s;
  const char* row;
  void ws() {
    while (*s == ' ') s++;
  }
  [[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "derivatives.def: %s in \"%s\" at \"%s\"\n", what, row, s);
    TC_ASSERT(false, "bad formula in derivatives.def");
  }
  std::string ident() {
    ws();
    std::string r;
    while (std::isalnum((unsigned char)*s) || *s == '_') r += *s++;
    if (r.empty()) fail("expected a name");
    return r;
  }
  Expr expr() {
    ws();
    Expr e;
    if (*s == '"') {
      e.kind = Expr::Str;
      for (s++; *s && *s != '"'; s++) e.name += *s;
      if (*s++ != '"') fail("unterminated string");
      return e;
    }
    if (*s == '[') {
      e.kind = Expr::List;
      s++;
      ws();
      while (*s != ']') {
        e.args.push_back(expr());
        ws();
        if (*s == ',') s++;
        ws();
      }
      s++;
      return e;
    }
    if (std::isdigit((unsigned char)*s) || *s == '-' || *s == '.') {
      char* end;
      e.num = std::strtod(s, &end);
      std::string text(s, (const char*)end);
      e.kind = text.find_first_of(".eE") == std::string::npos ? Expr::Int : Expr::Float;
      s = end;
      return e;
    }
    e.name = ident();
    ws();
    if (*s != '(') {
      e.kind = e.name == "true" || e.name == "false" ? Expr::Bool : e.name == "nil" ? Expr::Nil : Expr::Name;
      if (e.kind == Expr::Bool) e.num = e.name == "true";
      return e;
    }
    e.kind = Expr::Call;
    s++;
    ws();
    while (*s != ')') {
      const char* save = s;
      std::string key;
      if (std::isalpha((unsigned char)*s)) {
        std::string id = ident();
        ws();
        if (*s == '=') {
          key = id;
          s++;
        } else {
          s = save;
        }
      }
      e.keys.push_back(key);
      e.args.push_back(expr());
      ws();
      if (*s == ',') s++;
      else if (*s != ')') fail("expected ',' or ')'");
      ws();
    }
    s++;
    return e;
  }
};

int arg_index(Op op, const std::string& name) {
  const OpSchema& s = schema(op);
  for (size_t i = 0; i < s.args.size(); i++)
    if (s.args[i].name == name) return (int)i;
  return -1;
}

// Binds the names and calls of a parsed formula of `op` (an unknown one is a tc bug: abort).
void resolve(Expr& e, Op op) {
  if (e.kind == Expr::Name) {
    const std::string& n = e.name;
    // grad_N and result_N are numbered names only: an argument such as _conv2d_weight_backward's
    // grad_out is the argument
    auto numbered = [&](const char* prefix, int* index) {
      size_t k = std::strlen(prefix);
      if (n.size() <= k || n.compare(0, k, prefix) != 0 ||
          n.find_first_not_of("0123456789", k) != std::string::npos)
        return false;
      *index = (int)std::strtol(n.c_str() + k, nullptr, 10);
      return true;
    };
    if (n == "grad") {
      e.ref = Expr::Grad;
    } else if (n == "grads") {
      e.ref = Expr::Grads;
    } else if (numbered("grad_", &e.index)) {
      e.ref = Expr::Grad;
    } else if (n == "result") {
      e.ref = Expr::Result;
      e.index = 0;
    } else if (numbered("result_", &e.index)) {
      e.ref = Expr::Result;
    } else {
      e.ref = Expr::Arg;
      e.index = arg_index(op, n);
      if (e.index < 0) std::fprintf(stderr, "derivatives.def: %s has no argument '%s'\n", op_name(op), n.c_str());
      TC_ASSERT(e.index >= 0, "a derivatives.def formula names an unknown argument");
    }
  }
  if (e.kind == Expr::Call) {
    e.helper = find_helper(e.name);
    if (!e.helper) {
      auto o = op_from_name(e.name);
      if (!o) std::fprintf(stderr, "derivatives.def: unknown op or helper '%s' (row %s)\n", e.name.c_str(), op_name(op));
      TC_ASSERT(o.has_value(), "a derivatives.def formula calls an unknown op or helper");
      e.op = *o;
    }
  }
  for (Expr& a : e.args) resolve(a, op);
}

void collect(const Expr& e, Op op, bool meta, SaveNeeds& n, bool* decompose);

std::vector<OpGrad> build_table() {
  std::vector<OpGrad> t(kNumOps);
  std::vector<bool> seen(kNumOps, false);
  auto row = [&](Op op, Differentiability k, std::initializer_list<const char*> formulas) {
    TC_ASSERT(!seen[(size_t)op], "an op has two rows in derivatives.def");
    seen[(size_t)op] = true;
    OpGrad& g = t[(size_t)op];
    g.kind = k;
    g.differentiable_arg.assign(schema(op).args.size(), false);
    for (const char* text : formulas) {
      auto f = std::make_shared<Formula>();
      const char* colon = std::strchr(text, ':');
      TC_ASSERT(colon, "a derivatives.def formula without 'inputs:'");
      std::string names(text, colon);
      size_t p = 0;
      while (p < names.size()) {
        size_t q = names.find(',', p);
        if (q == std::string::npos) q = names.size();
        std::string n = names.substr(p, q - p);
        n.erase(0, n.find_first_not_of(' '));
        n.erase(n.find_last_not_of(' ') + 1);
        int i = arg_index(op, n);
        if (i < 0) std::fprintf(stderr, "derivatives.def: %s has no argument '%s'\n", op_name(op), n.c_str());
        TC_ASSERT(i >= 0, "derivatives.def names an argument the op does not have");
        f->inputs.push_back(i);
        g.differentiable_arg[i] = true;
        p = q + 1;
      }
      Parser ps{colon + 1, text};
      f->expr = ps.expr();
      ps.ws();
      if (*ps.s) ps.fail("trailing text");
      resolve(f->expr, op);
      bool decompose = false;
      f->reads.args.assign(schema(op).args.size(), 0);
      collect(f->expr, op, false, f->reads, &decompose);
      if (decompose)
        for (auto& a : f->reads.args) a = 2;
      g.formulas.push_back(f);
    }
  };
#define TC_GRAD(op, ...) row(Op::op, Differentiability::Formula, {__VA_ARGS__});
#define TC_NONDIFF(op) row(Op::op, Differentiability::NonDifferentiable, {});
#define TC_NOT_IMPLEMENTED(op) row(Op::op, Differentiability::NotImplemented, {});
#include "tc/derivatives.def"
#undef TC_GRAD
#undef TC_NONDIFF
#undef TC_NOT_IMPLEMENTED
  for (int i = 0; i < kNumOps; i++) {
    if (!seen[i]) std::fprintf(stderr, "derivatives.def: no row for %s\n", op_name((Op)i));
    TC_ASSERT(seen[i], "every op of ops.def needs a row in derivatives.def");
  }
  return t;
}

// ---- what a formula reads ----------------------------------------------------------------------------
void collect(const Expr& e, Op op, bool meta, SaveNeeds& n, bool* decompose) {
  switch (e.kind) {
    case Expr::Name: {
      int level = meta ? 1 : 2;
      if (e.ref == Expr::Result) {
        size_t k = (size_t)e.index;
        if (n.results.size() <= k) n.results.resize(k + 1, 0);
        n.results[k] = std::max(n.results[k], level);
      } else if (e.ref == Expr::Arg) {
        n.args[e.index] = std::max(n.args[e.index], level);
      }
      return;
    }
    case Expr::Call: {
      const Helper* h = e.helper;
      if (h && h->reads_all_args) *decompose = true;
      for (size_t i = 0; i < e.args.size(); i++) collect(e.args[i], op, h && (h->meta_args >> i & 1), n, decompose);
      return;
    }
    case Expr::List:
      for (const Expr& a : e.args) collect(a, op, false, n, decompose);
      return;
    default:
      return;
  }
}

// ---- evaluation --------------------------------------------------------------------------------------
Value lookup(Env& e, const Expr& x) {
  Node& n = e.node;
  switch (x.ref) {
    case Expr::Grad: return Value(e.grads[x.index]);
    case Expr::Grads: return Value(TensorList(e.grads.begin(), e.grads.end()));
    case Expr::Result:
      TC_ASSERT(x.index < (int)n.results.size(), "a formula read an output the op does not have");
      return Value(unpack(n.results[x.index], n, "an output"));
    case Expr::Arg: break;
  }
  int i = x.index;
  if (n.first_slot[i] < 0) return n.args[i];
  if (schema(n.op).args[i].type == ArgType::TensorList) {
    TensorList l;
    for (auto& s : n.saved[i]) l.push_back(unpack(s, n, "an input"));
    return Value(l);
  }
  const SavedVariable& s = n.saved[i][0];
  if (!s.data.defined()) return Value();  // an optional tensor argument given as nil
  std::string what = "argument '" + x.name + "'";
  return Value(unpack(s, n, what.c_str()));
}

Value eval(Env& e, const Expr& x) {
  switch (x.kind) {
    case Expr::Name: return lookup(e, x);
    case Expr::Int: return Value((int64_t)x.num);
    case Expr::Float: return Value(x.num);
    case Expr::Str: return Value(x.name);
    case Expr::Bool: return Value(x.num != 0);
    case Expr::Nil: return Value();
    case Expr::List: {
      IntList l;
      for (const Expr& a : x.args) l.push_back(eval(e, a).to_int());
      return Value(l);
    }
    case Expr::Call: break;
  }
  Stack pos;
  Kw kw;
  for (size_t i = 0; i < x.args.size(); i++) {
    Value v = eval(e, x.args[i]);
    if (x.keys[i].empty())
      pos.push_back(std::move(v));
    else
      kw.emplace_back(x.keys[i], std::move(v));
  }
  if (x.helper) return x.helper->fn(e, pos);
  Stack out = call(x.op, bind(x.op, std::move(pos), std::move(kw)));
  return out[0];
}

}  // namespace

const OpGrad& op_grad(Op op) {
  static const std::vector<OpGrad> table = build_table();
  return table[(size_t)op];
}

Differentiability differentiability(Op op) { return op_grad(op).kind; }

SaveNeeds save_needs(const OpGrad& g, Op op, const std::vector<bool>& active) {
  SaveNeeds n;
  n.args.assign(schema(op).args.size(), 0);
  for (size_t f = 0; f < g.formulas.size(); f++) {
    if (!active[f]) continue;
    const SaveNeeds& r = g.formulas[f]->reads;
    for (size_t i = 0; i < n.args.size(); i++) n.args[i] = std::max(n.args[i], r.args[i]);
    if (n.results.size() < r.results.size()) n.results.resize(r.results.size(), 0);
    for (size_t k = 0; k < r.results.size(); k++) n.results[k] = std::max(n.results[k], r.results[k]);
  }
  return n;
}

std::vector<Tensor> apply_formulas(Node& n, const std::vector<Tensor>& grads, bool create_graph) {
  if (n.custom) return n.custom(n, grads, create_graph);
  const OpGrad& g = *n.rule;
  TC_CHECK(g.kind == Differentiability::Formula, NotImplementedError,
           "the derivative for '%s' is not implemented (it is listed as not implemented in derivatives.def); "
           "compute it under tc.no_grad() or with inputs that do not require grad",
           op_name(n.op));
  std::vector<Tensor> out(n.next.size());
  for (const auto& f : g.formulas) {
    bool active = false;
    for (int a : f->inputs) {
      int first = n.first_slot[a];
      if (first < 0) continue;
      for (int k = 0; k < n.slot_count[a]; k++) active |= n.next[first + k].defined();
    }
    if (!active) continue;
    Env env{n, *f, grads, create_graph};
    Value v = eval(env, f->expr);
    auto put = [&](int arg, const Value& val) {
      int first = n.first_slot[arg];
      if (first < 0 || val.is_none()) return;
      if (val.is_tensor_list()) {
        const TensorList& l = val.tensors();
        for (size_t k = 0; k < l.size() && first + k < out.size(); k++)
          if (n.next[first + k].defined()) out[first + k] = l[k];
      } else if (n.next[first].defined()) {
        out[first] = val.tensor();
      }
    };
    if (f->inputs.size() == 1) {
      put(f->inputs[0], v);
    } else {
      const TensorList& l = v.tensors();
      for (size_t k = 0; k < f->inputs.size() && k < l.size(); k++)
        if (l[k].defined()) put(f->inputs[k], Value(l[k]));
    }
  }
  return out;
}

}  // namespace tc::autograd
