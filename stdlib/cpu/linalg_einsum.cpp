// einsum: parses the equation (letters, "...", optional "->"), then contracts the operands left
// to right, each pairwise contraction a batched matrix product (the bmm op) over permuted views;
// labels no later operand or the output needs are summed out first (the sum op). Built from ops,
// so the same code serves every device (stdlib/cuda/einsum.cpp calls einsum_by_ops).
#include <algorithm>
#include <string>

#include "cpu/linalg.h"

namespace tc {
namespace {

constexpr int kLetters = 52;  // labels 0..51 are A-Z a-z; kLetters + i is the i-th ellipsis dim

int letter_label(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : -1; }
char label_char(int l) { return l < 26 ? char('A' + l) : char('a' + l - 26); }

struct Equation {
  std::vector<std::vector<int>> inputs;  // the label of each dim of each operand
  std::vector<int> output;
  std::vector<int64_t> sizes;  // per label, after broadcasting (-1: unused)
};

// One side of a term: the labels before and after its "..." (if any).
struct Term {
  std::vector<int> before, after;
  bool ellipsis = false;
};

Term parse_term(const std::string& s, size_t at) {
  Term t;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '.') {
      TC_CHECK(!t.ellipsis && s.compare(i, 3, "...") == 0, ValueError,
               "einsum(): found '.' for operand %zu that is not part of any ellipsis", at + 1);
      t.ellipsis = true;
      i += 2;
      continue;
    }
    int l = letter_label(s[i]);
    TC_CHECK(l >= 0, ValueError, "einsum(): invalid subscript '%c' in the equation, subscripts must be in [a-zA-Z]", s[i]);
    (t.ellipsis ? t.after : t.before).push_back(l);
  }
  return t;
}

Equation parse(std::string eq, const TensorList& ops) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  TC_CHECK(!ops.empty(), ValueError, "einsum(): must provide at least one operand");
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<Term> terms;
  size_t start = 0;
  for (;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma - start), terms.size()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  TC_CHECK(terms.size() == ops.size(), ValueError, "einsum(): the equation names %zu operands but %zu were given",
           terms.size(), ops.size());
  int64_t E = 0;
  std::vector<int64_t> ell(ops.size());
  for (size_t k = 0; k < ops.size(); k++) {
    int64_t named = (int64_t)(terms[k].before.size() + terms[k].after.size());
    ell[k] = ops[k].dim() - named;
    TC_CHECK(ell[k] == 0 || (terms[k].ellipsis && ell[k] > 0), ShapeError,
             "einsum(): the number of subscripts in the equation (%lld) does not match the number of dimensions (%lld) for operand %zu%s",
             (long long)named, (long long)ops[k].dim(), k + 1, terms[k].ellipsis ? "" : " and no ellipsis was given");
    E = std::max(E, ell[k]);
  }
  Equation q;
  q.sizes.assign(kLetters + E, -1);
  std::vector<int> count(kLetters + E, 0);
  for (size_t k = 0; k < ops.size(); k++) {
    std::vector<int> labels = terms[k].before;
    for (int64_t i = 0; i < ell[k]; i++) labels.push_back(kLetters + (int)(E - ell[k] + i));
    labels.insert(labels.end(), terms[k].after.begin(), terms[k].after.end());
    for (size_t d = 0; d < labels.size(); d++) {
      int l = labels[d];
      int64_t s = ops[k].size(d);
      for (size_t e = 0; e < d; e++)
        TC_CHECK(labels[e] != l || ops[k].size(e) == s, ShapeError,
                 "einsum(): subscript %c is repeated for operand %zu but the sizes don't match, %lld != %lld", label_char(l),
                 k + 1, (long long)ops[k].size(e), (long long)s);
      int64_t& g = q.sizes[l];
      TC_CHECK(g == -1 || g == s || g == 1 || s == 1, ShapeError,
               "einsum(): subscript %c has size %lld for operand %zu which does not broadcast with previously seen size %lld",
               l < kLetters ? label_char(l) : '.', (long long)s, k + 1, (long long)g);
      if (g == -1 || g == 1) g = s;
      count[l]++;
    }
    q.inputs.push_back(std::move(labels));
  }
  if (arrow == std::string::npos) {
    for (int64_t i = 0; i < E; i++) q.output.push_back(kLetters + (int)i);
    for (int l = 0; l < kLetters; l++)
      if (count[l] == 1) q.output.push_back(l);
    return q;
  }
  Term out = parse_term(eq.substr(arrow + 2), ops.size());
  q.output = out.before;
  if (out.ellipsis)
    for (int64_t i = 0; i < E; i++) q.output.push_back(kLetters + (int)i);
  q.output.insert(q.output.end(), out.after.begin(), out.after.end());
  for (size_t i = 0; i < q.output.size(); i++) {
    int l = q.output[i];
    if (l >= kLetters) continue;
    TC_CHECK(count[l] > 0, ValueError, "einsum(): output subscript %c does not appear in the equation for any input operand", label_char(l));
    TC_CHECK(std::count(q.output.begin(), q.output.end(), l) == 1, ValueError,
             "einsum(): output subscript %c appears more than once in the output", label_char(l));
  }
  return q;
}

// A tensor whose dims carry distinct labels.
struct Labeled {
  Tensor t;
  std::vector<int> labels;
};

bool has(const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); }

// The view of an operand with repeated labels as diagonals and size-1 dims broadcast.
Labeled prepare(const Tensor& t, const std::vector<int>& labels, const std::vector<int64_t>& sizes) {
  Labeled x;
  Shape sz, st;
  for (size_t d = 0; d < labels.size(); d++) {
    auto it = std::find(x.labels.begin(), x.labels.end(), labels[d]);
    if (it != x.labels.end()) {
      st[it - x.labels.begin()] += t.stride(d);
      continue;
    }
    x.labels.push_back(labels[d]);
    sz.push_back(t.size(d));
    st.push_back(t.stride(d));
  }
  for (size_t j = 0; j < sz.size(); j++)
    if (sz[j] != sizes[x.labels[j]]) {
      sz[j] = sizes[x.labels[j]];
      st[j] = 0;
    }
  x.t = t.as_strided(sz, st, t.offset());
  return x;
}

// x permuted to the labels of `groups` (concatenated), as one dim per group: a view when each
// group's dims are contiguous with each other, else a contiguous copy.
Tensor grouped(const Labeled& x, const std::vector<std::vector<int>>& groups) {
  Shape sz, st;
  for (auto& g : groups)
    for (int l : g) {
      int64_t d = std::find(x.labels.begin(), x.labels.end(), l) - x.labels.begin();
      sz.push_back(x.t.size(d));
      st.push_back(x.t.stride(d));
    }
  Tensor p = x.t.as_strided(sz, st, x.t.offset());
  Shape gs, gst;
  size_t d = 0;
  bool ok = true;
  for (auto& g : groups) {
    int64_t size = 1, stride = 0;  // stride 0: not set yet
    for (size_t i = 0; i < g.size(); i++, d++) {
      if (sz[d] == 1) continue;
      if (size > 1 && st[d] * sz[d] != stride) ok = false;
      size *= sz[d];
      stride = st[d];
    }
    gs.push_back(size);
    gst.push_back(stride == 0 && size <= 1 ? 1 : stride);
  }
  if (ok && std::find(gst.begin(), gst.end(), 0) == gst.end()) return p.as_strided(gs, gst, p.offset());
  Tensor c = p.clone();
  return c.as_strided(gs, contiguous_strides(gs), 0);
}

Shape label_sizes(const std::vector<int>& labels, const std::vector<int64_t>& sizes) {
  Shape s;
  for (int l : labels) s.push_back(sizes[l]);
  return s;
}

// Sums out the labels of x that are not in `keep` (a row sum over the grouped view, in x's dtype).
Labeled sum_out(const Labeled& x, const std::vector<int>& keep, const std::vector<int64_t>& sizes) {
  std::vector<int> kept, dropped;
  for (int l : x.labels) (has(keep, l) ? kept : dropped).push_back(l);
  if (dropped.empty()) return x;
  Tensor m = grouped(x, {kept, dropped});
  Tensor r = call1(Op::sum, {m, IntList{2}}, {{"dtype", x.t.dtype()}});
  Shape s = label_sizes(kept, sizes);
  return {r.as_strided(s, contiguous_strides(s), r.offset()), kept};
}

// a and b contracted over their shared labels that are not in `keep`.
Labeled contract(const Labeled& a, const Labeled& b, const std::vector<int>& keep, const std::vector<int64_t>& sizes) {
  std::vector<int> batch, m, n, k;
  for (int l : a.labels) {
    if (!has(b.labels, l)) m.push_back(l);
    else (has(keep, l) ? batch : k).push_back(l);
  }
  for (int l : b.labels)
    if (!has(a.labels, l)) n.push_back(l);
  Tensor a3 = grouped(a, {batch, m, k}), b3 = grouped(b, {batch, k, n});
  Tensor r = call1(Op::bmm, {a3, b3});
  std::vector<int> labels = batch;
  labels.insert(labels.end(), m.begin(), m.end());
  labels.insert(labels.end(), n.begin(), n.end());
  Shape s = label_sizes(labels, sizes);
  return {r.as_strided(s, contiguous_strides(s), r.offset()), labels};
}

void check_dtypes(const TensorList& ops) {
  for (const Tensor& t : ops) {
    TC_CHECK(t.dtype() == ops[0].dtype(), DTypeError, "einsum(): expected scalar type %s but found %s",
             dtype_name(ops[0].dtype()), dtype_name(t.dtype()));
    TC_CHECK(t.dtype() != DType::Bool, DTypeError, "einsum(): bool operands are not supported");
  }
}

}  // namespace

Metas meta_einsum(const Stack& a) {
  const TensorList& ops = a[1].tensors();
  Equation q = parse(a[0].str(), ops);
  check_dtypes(ops);
  return {contiguous_meta(label_sizes(q.output, q.sizes), ops[0].dtype(), ops[0].device())};
}

Stack cpu_einsum(const Stack& a, const Metas& metas) { return einsum_by_ops(a, metas); }

Stack einsum_by_ops(const Stack& a, const Metas& metas) {
  const TensorList& ops = a[1].tensors();
  Equation q = parse(a[0].str(), ops);
  Labeled cur = prepare(ops[0], q.inputs[0], q.sizes);
  for (size_t i = 1; i < ops.size(); i++) {
    std::vector<int> keep = q.output;  // labels the output or a later operand needs
    for (size_t j = i + 1; j < ops.size(); j++) keep.insert(keep.end(), q.inputs[j].begin(), q.inputs[j].end());
    Labeled next = prepare(ops[i], q.inputs[i], q.sizes);
    std::vector<int> keep_cur = keep, keep_next = keep;
    keep_cur.insert(keep_cur.end(), next.labels.begin(), next.labels.end());
    keep_next.insert(keep_next.end(), cur.labels.begin(), cur.labels.end());
    cur = contract(sum_out(cur, keep_cur, q.sizes), sum_out(next, keep_next, q.sizes), keep, q.sizes);
  }
  cur = sum_out(cur, q.output, q.sizes);
  Tensor out = empty_from_meta(metas[0]);
  if (out.numel() == 0) return {Value(out)};
  Shape st;
  for (int l : q.output) st.push_back(cur.t.stride(std::find(cur.labels.begin(), cur.labels.end(), l) - cur.labels.begin()));
  out.copy_from(cur.t.as_strided(out.sizes(), st, cur.t.offset()));
  return {Value(out)};
}

}  // namespace tc
