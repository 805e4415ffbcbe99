// The optimizer-step ops (_fused_sgd_, _fused_adam_, _fused_adamw_, _fused_rmsprop_,
// _fused_adagrad_): argument checks (the meta rule) and the CPU kernel, one pass over every
// tensor of the lists, cut into chunks that the thread pool shares, each chunk a plain loop over
// contiguous memory (see optim.h for the arithmetic).
#include "cpu/optim.h"

#include <algorithm>

#include "cpu/nn.h"

namespace tc::cpu {

double step_value(const Tensor& t) {
  return t.item_double();
}

void OptimStep::set_step(double step) {
  h.step = step;
  if (alg == OptimAlg::Adam || alg == OptimAlg::AdamW) {
    h.c = h.lr / (1 - std::pow(h.a, step));
    h.d = std::sqrt(1 - std::pow(h.b, step));
  } else if (alg == OptimAlg::Adagrad) {
    h.c = h.lr / (1 + (step - 1) * h.a);
  }
}

OptimStep describe_optim(Op op, const Stack& a) {
  const char* name = op_name(op);
  OptimStep s;
  auto list = [&](int i) { return &a[i].tensors(); };
  auto num = [&](int i) { return a[i].to_double(); };
  auto flag = [&](int i) { return a[i].to_bool() ? 1 : 0; };
  auto lr = [&](int i) {  // a number, or a 0-dim tensor (ops.def's float|Tensor)
    if (a[i].is_tensor())
      s.lr = &a[i].tensor();
    else
      s.h.lr = a[i].to_double();
  };
  std::vector<bool> required;  // per state list
  switch (op) {
    case Op::_fused_sgd_:
      s.alg = OptimAlg::SGD;
      s.lists = {list(0), list(1), list(2)};
      lr(3);
      s.h.a = num(4), s.h.b = num(5), s.h.weight_decay = num(6);
      s.h.flag1 = flag(7), s.h.maximize = flag(8), s.h.flag2 = flag(9);
      required = {s.h.a != 0};
      break;
    case Op::_fused_adam_:
    case Op::_fused_adamw_:
      s.alg = op == Op::_fused_adam_ ? OptimAlg::Adam : OptimAlg::AdamW;
      s.lists = {list(0), list(1), list(2), list(3), list(4)};
      s.step = &a[5].tensor();
      lr(6);
      s.h.a = num(7), s.h.b = num(8), s.h.eps = num(9), s.h.weight_decay = num(10);
      s.h.flag1 = flag(11), s.h.maximize = flag(12);
      required = {true, true, s.h.flag1 != 0};
      break;
    case Op::_fused_rmsprop_:
      s.alg = OptimAlg::RMSprop;
      s.lists = {list(0), list(1), list(2), list(3), list(4)};
      lr(5);
      s.h.a = num(6), s.h.eps = num(7), s.h.weight_decay = num(8), s.h.b = num(9);
      s.h.flag1 = flag(10), s.h.maximize = flag(11);
      required = {true, s.h.b > 0, s.h.flag1 != 0};
      break;
    case Op::_fused_adagrad_:
      s.alg = OptimAlg::Adagrad;
      s.lists = {list(0), list(1), list(2)};
      s.step = &a[3].tensor();
      lr(4);
      s.h.a = num(5), s.h.weight_decay = num(6), s.h.eps = num(7), s.h.maximize = flag(8);
      required = {true};
      break;
    default:
      TC_ASSERT(false, "not an optimizer-step op");
  }
  s.h.alg = int(s.alg);
  const TensorList& ps = *s.lists[0];
  TC_CHECK(!ps.empty(), ValueError, "%s(): expected at least one parameter", name);
  const Tensor& first = ps[0];
  TC_CHECK(is_floating(first.dtype()), DTypeError, "%s(): parameters must be floating point, got %s", name,
           dtype_name(first.dtype()));
  const OpSchema& sc = schema(op);
  for (size_t l = 1; l < s.lists.size(); l++) {
    const TensorList& ts = *s.lists[l];
    const char* what = sc.args[l].name.c_str();
    bool needed = l == 1 || required[l - 2];
    if (ts.empty() && !needed) continue;
    if (!needed) s.lists[l] = nullptr;  // given but unused by these options: not touched
    TC_CHECK(ts.size() == ps.size(), ValueError, "%s(): %s has %zu tensors, params has %zu%s", name, what, ts.size(),
             ps.size(), needed ? "" : " (or give an empty list)");
  }
  for (size_t l = 0; l < s.lists.size(); l++) {
    if (s.lists[l] == nullptr || (l >= 2 && s.lists[l]->empty())) continue;
    const TensorList& ts = *s.lists[l];
    const char* what = sc.args[l].name.c_str();
    for (size_t i = 0; i < ts.size(); i++) {
      const Tensor& t = ts[i];
      TC_CHECK(t.defined(), ValueError, "%s(): %s[%zu] is nil", name, what, i + 1);
      TC_CHECK(t.dtype() == first.dtype(), DTypeError,
               "%s(): every tensor must have the dtype of the parameters (%s), but %s[%zu] is %s", name,
               dtype_name(first.dtype()), what, i + 1, dtype_name(t.dtype()));
      TC_CHECK(t.device() == first.device(), DeviceError,
               "%s(): every tensor must be on the parameters' device (%s), but %s[%zu] is on %s", name,
               first.device().str().c_str(), what, i + 1, t.device().str().c_str());
      TC_CHECK(t.sizes() == ps[i].sizes(), ShapeError, "%s(): %s[%zu] has shape %s, params[%zu] has shape %s", name,
               what, i + 1, shape_string(t.sizes()).c_str(), i + 1, shape_string(ps[i].sizes()).c_str());
    }
  }
  // state lists past the end (unused by these options) read as absent
  for (size_t l = 2; l < s.lists.size(); l++)
    if (s.lists[l] && s.lists[l]->empty()) s.lists[l] = nullptr;
  if (s.step)
    TC_CHECK(s.step->numel() == 1, ShapeError, "%s(): 'step' must hold one number, got shape %s", name,
             shape_string(s.step->sizes()).c_str());
  if (s.lr) {
    TC_CHECK(s.lr->dtype() != DType::Bool, DTypeError, "%s(): 'lr' must be a number or a 0-dim tensor, got a bool tensor",
             name);
    TC_CHECK(s.lr->device().is_cpu() || s.lr->device() == first.device(), DeviceError,
             "%s(): 'lr' must be on the CPU or on the parameters' device (%s), got %s", name, first.device().str().c_str(),
             s.lr->device().str().c_str());
  }
  return s;
}

TensorMeta fused_optim_meta(Op op, const Stack& a) {
  OptimStep s = describe_optim(op, a);
  const Tensor& p = (*s.lists[0])[0];
  return TensorMeta{p.sizes(), p.strides(), p.offset(), p.dtype(), p.device(), 0};
}

namespace {

constexpr int kMaxLists = 5;
constexpr int64_t kChunk = 1 << 14;

template <typename T>
struct Ptrs {
  T* t[kMaxLists] = {};
};

// One contiguous range of one parameter (and the same range of its grad and states).
template <typename T>
void update_range(const OptimHyper& h, const Ptrs<T>& P, int64_t b, int64_t e) {
  using A = opmath_t<T>;
  T *p = P.t[0], *gr = P.t[1], *s0 = P.t[2], *s1 = P.t[3], *s2 = P.t[4];
  const A wd = A(h.weight_decay), eps = A(h.eps);
  const bool has_wd = h.weight_decay != 0, maximize = h.maximize != 0;
  switch (OptimAlg(h.alg)) {
    case OptimAlg::SGD: {
      const A mom = A(h.a), damp1 = A(1 - h.b), neg_lr = A(-h.lr);
      const bool use_mom = h.a != 0, nesterov = h.flag1 != 0, first = h.flag2 != 0;
      for (int64_t i = b; i < e; i++) {
        A g = A(gr[i]);
        if (maximize) g = -g;
        if (has_wd) g = g + wd * A(p[i]);
        if (use_mom) {
          A buf = first ? g : A(T(A(s0[i]) * mom)) + damp1 * g;
          s0[i] = T(buf);
          buf = A(s0[i]);
          g = nesterov ? g + mom * buf : buf;
        }
        p[i] = T(A(p[i]) + neg_lr * g);
      }
      break;
    }
    case OptimAlg::Adam:
    case OptimAlg::AdamW: {
      const bool decoupled = OptimAlg(h.alg) == OptimAlg::AdamW, amsgrad = h.flag1 != 0;
      const A b1 = A(h.a), b2 = A(h.b), b1c = A(1 - h.a), b2c = A(1 - h.b), decay = A(1 - h.lr * h.weight_decay);
      const A neg_step = A(-h.c), bc2 = A(h.d);
      for (int64_t i = b; i < e; i++) {
        A g = A(gr[i]), pv = A(p[i]);
        if (maximize) g = -g;
        if (has_wd) {
          if (decoupled)
            pv = A(T(pv * decay));
          else
            g = g + wd * pv;
        }
        A m = A(T(A(s0[i]) * b1)) + b1c * g;
        A v = A(T(A(s1[i]) * b2)) + b2c * A(T(g * g));
        s0[i] = T(m), s1[i] = T(v);
        m = A(s0[i]), v = A(s1[i]);
        if (amsgrad) {
          A mx = A(s2[i]);
          v = (mx > v || mx != mx) ? mx : v;
          s2[i] = T(v);
        }
        A denom = A(T(A(T(std::sqrt(v))) / bc2)) + eps;
        p[i] = T(pv + neg_step * A(T(m / A(T(denom)))));
      }
      break;
    }
    case OptimAlg::RMSprop: {
      const A alpha = A(h.a), alpha1 = A(1 - h.a), mom = A(h.b), neg_lr = A(-h.lr);
      const bool use_mom = h.b > 0, centered = h.flag1 != 0;
      for (int64_t i = b; i < e; i++) {
        A g = A(gr[i]);
        if (maximize) g = -g;
        if (has_wd) g = g + wd * A(p[i]);
        A sq = A(T(A(s0[i]) * alpha)) + alpha1 * A(T(g * g));
        s0[i] = T(sq);
        sq = A(s0[i]);
        A avg;
        if (centered) {
          A ga = A(T(A(s2[i]) * alpha)) + alpha1 * g;
          s2[i] = T(ga);
          ga = A(s2[i]);
          avg = std::sqrt(A(T(sq - A(T(ga * ga)))));
        } else {
          avg = std::sqrt(sq);
        }
        avg = A(T(A(T(avg)) + eps));
        if (use_mom) {
          A buf = A(T(A(s1[i]) * mom)) + A(T(g / avg));
          s1[i] = T(buf);
          p[i] = T(A(p[i]) + neg_lr * A(s1[i]));
        } else {
          p[i] = T(A(p[i]) + neg_lr * A(T(g / avg)));
        }
      }
      break;
    }
    case OptimAlg::Adagrad: {
      const A neg_clr = A(-h.c);
      for (int64_t i = b; i < e; i++) {
        A g = A(gr[i]);
        if (maximize) g = -g;
        if (has_wd) g = g + wd * A(p[i]);
        A sum = A(s0[i]) + A(T(g * g));
        s0[i] = T(sum);
        A denom = A(T(A(T(std::sqrt(A(s0[i])))) + eps));
        p[i] = T(A(p[i]) + neg_clr * A(T(g / denom)));
      }
      break;
    }
  }
}

}  // namespace

OptimWork::OptimWork(const OptimStep& s) : s_(s) {
  const size_t nl = s.lists.size(), n = s.lists[0]->size();
  t.assign(nl, std::vector<Tensor>(n));
  for (size_t l = 0; l < nl; l++) {
    if (!s.lists[l]) continue;
    for (size_t i = 0; i < n; i++) {
      const Tensor& x = (*s.lists[l])[i];
      t[l][i] = x.contiguous();
      if (l != 1 && !t[l][i].same(x)) back_.emplace_back(x, t[l][i]);
    }
  }
}

void OptimWork::finish() {
  for (auto& [orig, copy] : back_) orig.copy_from(copy);
  for (size_t l = 0; l < s_.lists.size(); l++) {
    if (!s_.lists[l] || l == 1) continue;
    for (const Tensor& x : *s_.lists[l]) Tensor(x).bump_version();
  }
}

Tensor fused_optim_kernel(Op op, const Stack& a, const TensorMeta&) {
  OptimStep s = describe_optim(op, a);
  if (s.lr) s.h.lr = step_value(*s.lr);
  s.set_step(s.step ? step_value(*s.step) : 0);
  const TensorList& ps = *s.lists[0];
  const size_t nl = s.lists.size(), n = ps.size();
  OptimWork w(s);
  auto& work = w.t;
  visit_floating(ps[0].dtype(), [&]<typename T>() {
    struct Piece {
      Ptrs<T> ptrs;
      int64_t begin, end;
    };
    std::vector<Piece> pieces;
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
      int64_t numel = work[0][i].numel();
      if (numel == 0) continue;
      Ptrs<T> P;
      for (size_t l = 0; l < nl; l++)
        if (s.lists[l]) P.t[l] = work[l][i].template data<T>();
      for (int64_t c = 0; c < numel; c += kChunk) pieces.push_back({P, c, std::min(numel, c + kChunk)});
      total += numel;
    }
    auto body = [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; k++) update_range<T>(s.h, pieces[k].ptrs, pieces[k].begin, pieces[k].end);
    };
    if (total < 4 * kChunk)
      body(0, int64_t(pieces.size()));
    else
      parallel_for(0, int64_t(pieces.size()), 1, body);
  });
  w.finish();
  return ps[0];
}

}  // namespace tc::cpu
