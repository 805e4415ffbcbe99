// scaled_dot_product_attention of the nn group: per (batch..., head) slice, scores = scale * Q K^T
// (OpenBLAS), mask and softmax fused in one pass per row, then out = P V (OpenBLAS). Batch dims of
// query, key, value and the mask broadcast; float16/bfloat16 compute in float32. With dropout_p > 0
// every slice's P is made first and dropped out in one dropout call, which draws the random numbers
// the decomposition (softmax, dropout, matmul) draws: the same seed gives the same mask either way.
#include <cblas.h>

#include <cstring>

#include "cpu/loops.h"
#include "cpu/nn.h"

namespace tc::cpu {
namespace {

const char* kOp = "scaled_dot_product_attention";

Shape batch_of(const Tensor& t) {
  return Shape(t.sizes().begin(), t.sizes().end() - 2);
}

template <typename A>
void gemm(bool trans_b, int64_t m, int64_t n, int64_t k, A alpha, const A* a, const A* b,
          int64_t ldb, A* c) {
  auto tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<A, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, alpha, a, k, b, ldb, 0.0f, c, n);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, alpha, a, k, b, ldb, 0.0, c, n);
}

// Element offset of every flat batch index into `t` (a contiguous tensor broadcast to `batch`).
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch, const Shape& tail) {
  Shape full = batch;
  full.insert(full.end(), tail.begin(), tail.end());
  Shape st = broadcast_byte_strides(t, full);
  int64_t nb = shape_numel(batch), item = (int64_t)t.itemsize();
  std::vector<int64_t> out(nb, 0);
  for (int64_t i = 0; i < nb; i++) {
    int64_t rem = i, off = 0;
    for (int64_t d = (int64_t)batch.size() - 1; d >= 0; d--) {
      off += (rem % batch[d]) * st[d];
      rem /= batch[d];
    }
    out[i] = off / item;
  }
  return out;
}

}  // namespace

TensorMeta scaled_dot_product_attention_meta(const Stack& a) {
  const Tensor &q = a[0].tensor(), &k = a[1].tensor(), &v = a[2].tensor();
  check_floating(kOp, "query", q);
  TC_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), DTypeError,
           "%s(): expected query, key and value to have the same dtype, but got query.dtype: %s, "
           "key.dtype: %s and value.dtype: %s",
           kOp, dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  TC_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, ShapeError,
           "%s(): expected query, key and value with 2 or more dims, got %s, %s and %s", kOp,
           shape_string(q.sizes()).c_str(), shape_string(k.sizes()).c_str(),
           shape_string(v.sizes()).c_str());
  int64_t l = q.sizes().end()[-2], e = q.sizes().back(), s = k.sizes().end()[-2],
          ev = v.sizes().back();
  TC_CHECK(k.sizes().back() == e, ShapeError,
           "%s(): expected key's embedding size (%lld) to match query's (%lld)", kOp,
           (long long)k.sizes().back(), (long long)e);
  TC_CHECK(v.sizes().end()[-2] == s, ShapeError,
           "%s(): expected value's sequence length (%lld) to match key's (%lld)", kOp,
           (long long)v.sizes().end()[-2], (long long)s);
  Shape batch = broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k)), batch_of(v));
  double p = a[4].to_double();
  TC_CHECK(p >= 0 && p <= 1, ValueError,
           "%s(): dropout probability has to be between 0 and 1, but got %g", kOp, p);
  if (!a[3].is_none()) {
    const Tensor& m = a[3].tensor();
    TC_CHECK(m.dtype() == DType::Bool || is_floating(m.dtype()), DTypeError,
             "%s(): expected attn_mask of dtype bool or a floating dtype, got %s", kOp,
             dtype_name(m.dtype()));
    TC_CHECK(!a[5].to_bool(), ValueError,
             "%s(): explicit attn_mask should not be set when is_causal=True", kOp);
    Shape scores = batch;
    scores.push_back(l);
    scores.push_back(s);
    bool ok = m.dim() <= (int64_t)scores.size();
    for (int64_t i = 0; ok && i < m.dim(); i++) {
      int64_t want = scores[scores.size() - m.dim() + i];
      ok = m.sizes()[i] == want || m.sizes()[i] == 1;
    }
    TC_CHECK(ok, ShapeError,
             "%s(): attn_mask of shape %s cannot be broadcast to the attention scores' shape %s",
             kOp, shape_string(m.sizes()).c_str(), shape_string(scores).c_str());
  }
  Shape out = batch;
  out.push_back(l);
  out.push_back(ev);
  return contiguous_meta(out, q.dtype(), q.device());
}

Tensor scaled_dot_product_attention_kernel(const Stack& a, const TensorMeta& m) {
  DType dt = m.dtype, ct = opmath_dtype(dt);
  Tensor q = a[0].tensor().to(ct).contiguous(), k = a[1].tensor().to(ct).contiguous(),
         v = a[2].tensor().to(ct).contiguous();
  int64_t l = q.sizes().end()[-2], e = q.sizes().back(), s = k.sizes().end()[-2],
          ev = v.sizes().back();
  Shape batch(m.sizes.begin(), m.sizes.end() - 2);
  int64_t nb = shape_numel(batch);
  double scale = a[6].is_none() ? 1.0 / std::sqrt((double)e) : a[6].to_double();
  bool causal = a[5].to_bool();
  std::vector<int64_t> qo = batch_offsets(q, batch, {l, e}), ko = batch_offsets(k, batch, {s, e}),
                       vo = batch_offsets(v, batch, {s, ev});
  // The mask is read in place through broadcast strides (elements): bool, or additive in `ct`.
  Tensor mask = a[3].is_none() ? Tensor() : a[3].tensor();
  if (mask.defined() && mask.dtype() != DType::Bool) mask = mask.to(ct);
  Shape mst;
  std::vector<int64_t> mo;
  if (mask.defined()) {
    Shape full = batch;
    full.push_back(l);
    full.push_back(s);
    mst = broadcast_byte_strides(mask, full);
    for (auto& x : mst) x /= (int64_t)mask.itemsize();
    mo = batch_offsets(mask, batch, {l, s});
  }
  double dropout_p = a[4].to_double();
  Tensor out = empty_from_meta(m);
  visit_floating(ct, [&]<typename A>() {
    if constexpr (std::is_same_v<A, float> || std::is_same_v<A, double>) {
      const A *pq = q.data<A>(), *pk = k.data<A>(), *pv = v.data<A>();
      const A* pm = mask.defined() && mask.dtype() != DType::Bool ? mask.data<A>() : nullptr;
      const bool* pb = mask.defined() && mask.dtype() == DType::Bool ? mask.data<bool>() : nullptr;
      // P of slice i into `scores` [l, s]: scale * Q K^T, masked, softmax over each row
      auto probabilities = [&](int64_t i, A* scores) {
        if (e > 0)
          gemm<A>(true, l, s, e, A(scale), pq + qo[i], pk + ko[i], e, scores);
        else
          std::fill(scores, scores + l * s, A(0));
        for (int64_t r = 0; r < l; r++) {  // mask and softmax, one pass over the row after its max
          A* row = scores + r * s;
          A mx = -INFINITY;
          for (int64_t j = 0; j < s; j++) {
            if (causal && j > r) row[j] = -INFINITY;
            if (pb && !pb[mo[i] + r * mst[mst.size() - 2] + j * mst.back()]) row[j] = -INFINITY;
            if (pm) row[j] += pm[mo[i] + r * mst[mst.size() - 2] + j * mst.back()];
            mx = std::max(mx, row[j]);
          }
          A sum = 0;
          for (int64_t j = 0; j < s; j++) sum += row[j] = std::exp(row[j] - mx);
          for (int64_t j = 0; j < s; j++) row[j] /= sum;
        }
      };
      // out of slice i = P V, written to `out` (rounded from `obuf` for float16/bfloat16)
      auto times_v = [&](int64_t i, const A* probs, std::vector<A>& obuf) {
        A* o = dt == ct ? out.data<A>() + i * l * ev : obuf.data();
        if (s > 0)
          gemm<A>(false, l, ev, s, A(1), probs, pv + vo[i], ev, o);
        else
          std::fill(o, o + l * ev, A(0));
        if (dt != ct)
          visit_floating(dt, [&]<typename T>() {
            T* po = out.data<T>() + i * l * ev;
            for (int64_t j = 0; j < l * ev; j++) po[j] = T(opmath_t<T>(o[j]));
          });
      };
      int64_t grain = std::max<int64_t>(1, (1 << 18) / (l * s * (e + ev) + 1));
      if (dropout_p == 0) {
        parallel_for(0, nb, grain, [&](int64_t bb, int64_t be) {
          std::vector<A> scores(l * s), obuf(dt == ct ? 0 : l * ev);
          for (int64_t i = bb; i < be; i++) {
            probabilities(i, scores.data());
            times_v(i, scores.data(), obuf);
          }
        });
        return;
      }
      Shape ps = batch;
      ps.push_back(l);
      ps.push_back(s);
      Tensor probs = Tensor::empty(ps, ct);
      parallel_for(0, nb, grain, [&](int64_t bb, int64_t be) {
        for (int64_t i = bb; i < be; i++) probabilities(i, probs.data<A>() + i * l * s);
      });
      probs = call1(Op::dropout, {probs, dropout_p, true});
      parallel_for(0, nb, grain, [&](int64_t bb, int64_t be) {
        std::vector<A> obuf(dt == ct ? 0 : l * ev);
        for (int64_t i = bb; i < be; i++) times_v(i, probs.data<A>() + i * l * s, obuf);
      });
    }
  });
  return out;
}

}  // namespace tc::cpu
