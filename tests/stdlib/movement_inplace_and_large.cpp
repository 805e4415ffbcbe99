// Movement ops beyond the PyTorch fixtures: copy_ writing through views, aliasing results,
// overlapping copies, devices, fake tensors, and large inputs that take the parallel paths.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tc/ops.h"

using namespace tc;

namespace {

// A contiguous tensor holding 0, 1, 2, ... converted to `dt`.
Tensor iota(const Shape& shape, DType dt = DType::Float32) {
  Tensor t = Tensor::empty(shape, DType::Float64);
  for (int64_t i = 0; i < t.numel(); i++) t.data<double>()[i] = (double)i;
  return t.to(dt);
}

// Element at a multi-index of any view, read as double.
double at(const Tensor& t, const Shape& ix) {
  int64_t off = 0;
  for (size_t d = 0; d < ix.size(); d++) off += ix[d] * t.strides()[d];
  Tensor e = t.as_strided({}, {}, t.offset() + off);
  return e.item_double();
}

ErrorKind error_of(Op op, Stack args, std::string* message = nullptr) {
  try {
    call(op, bind(op, std::move(args), {}));
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << op_name(op) << " did not fail";
  return ErrorKind::CompileError;
}

TEST(MovementInplace, CopyWritesThroughAViewIntoItsBase) {
  Tensor base = Tensor::empty({3, 4}, DType::Float32);
  base.copy_from(Tensor::scalar(0.0));
  Tensor col = base.as_strided({3}, {4}, 2);  // column 3
  uint64_t v0 = col.version();
  Tensor r = call1(Op::copy_, {col, iota({3}, DType::Int64)});
  EXPECT_TRUE(r.same(col));
  EXPECT_GT(col.version(), v0);
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 4; j++)
      EXPECT_EQ(at(base, {i, j}), j == 2 ? (double)i : 0.0) << i << "," << j;
}

TEST(MovementInplace, CopyBroadcastsIntoATransposedView) {
  Tensor base = Tensor::empty({4, 3}, DType::Float64);
  Tensor tr = base.as_strided({3, 4}, {1, 3}, 0);
  call1(Op::copy_, {tr, iota({4})});
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 3; j++) EXPECT_EQ(base.data<double>()[i * 3 + j], (double)i);
}

TEST(MovementInplace, CopyFromAnOverlappingViewReadsTheOldValues) {
  Tensor x = iota({10});
  Tensor dst = x.as_strided({9}, {1}, 1), src = x.as_strided({9}, {1}, 0);
  call1(Op::copy_, {dst, src});
  EXPECT_EQ(at(x, {0}), 0.0);
  for (int64_t i = 1; i < 10; i++) EXPECT_EQ(at(x, {i}), (double)(i - 1));
}

TEST(MovementInplace, CopyIntoAnExpandedTensorIsAnError) {
  Tensor row = iota({1, 3});
  Tensor expanded = row.as_strided({2, 3}, {0, 1}, 0);
  EXPECT_EQ(error_of(Op::copy_, {expanded, iota({2, 3})}), ErrorKind::ValueError);
}

TEST(MovementAlias, ContiguousAndToCpuReturnTheSameTensor) {
  Tensor x = iota({2, 3});
  EXPECT_TRUE(call1(Op::contiguous, {x}).same(x));
  EXPECT_TRUE(call1(Op::to_device, {x, "cpu"}).same(x));
  Tensor t = x.as_strided({3, 2}, {1, 3}, 0);
  Tensor c = call1(Op::contiguous, {t});
  EXPECT_FALSE(c.same(t));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(call1(Op::clone, {x}).same(x));
}

TEST(MovementDevice, ToCudaWithoutCudaIsADeviceError) {
  if (device_allocator(DeviceType::CUDA)) GTEST_SKIP() << "CUDA is available";
  EXPECT_EQ(error_of(Op::to_device, {iota({2}), "cuda"}), ErrorKind::DeviceError);
}

TEST(MovementFake, MetaRulesRunOnFakeTensors) {
  Tensor a = Tensor::fake({2, 3}, {3, 1}, DType::Int32),
         b = Tensor::fake({2, 5}, {5, 1}, DType::Float16);
  Tensor c = call1(Op::cat, {TensorList{a, b}, -1});
  EXPECT_TRUE(c.is_fake());
  EXPECT_EQ(c.sizes(), (Shape{2, 8}));
  EXPECT_EQ(c.dtype(), DType::Float16);
  EXPECT_EQ(call1(Op::pad, {a, IntList{1, 2, 3, 4}}).sizes(), (Shape{9, 6}));
  EXPECT_EQ(error_of(Op::nonzero, {a}), ErrorKind::ValueError);  // data dependent
}

TEST(MovementIndex, OutOfRangeMessageNamesTheValueAndTheValidRange) {
  Tensor index = Tensor::empty({2}, DType::Int64);
  index.data<int64_t>()[0] = 1;
  index.data<int64_t>()[1] = 7;
  std::string msg;
  EXPECT_EQ(error_of(Op::index_select, {iota({3, 4}), 2, index}, &msg), ErrorKind::IndexError);
  EXPECT_NE(msg.find("index 7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1..4"), std::string::npos) << msg;
}

TEST(MovementLarge, CatAlongEachDim) {
  Tensor a = iota({300, 500}), b = iota({300, 700}, DType::Int32),
         c = iota({300, 500}).as_strided({300, 500}, {1, 300}, 0);
  Tensor r = call1(Op::cat, {TensorList{a, b}, 2});
  ASSERT_EQ(r.sizes(), (Shape{300, 1200}));
  const float* p = r.data<float>();
  for (int64_t i = 0; i < 300; i++)
    for (int64_t j = 0; j < 1200; j++)
      ASSERT_EQ(p[i * 1200 + j], j < 500 ? (float)(i * 500 + j) : (float)(i * 700 + j - 500))
          << i << "," << j;
  Tensor r0 = call1(Op::cat, {TensorList{a, c}, 1});
  ASSERT_EQ(r0.sizes(), (Shape{600, 500}));
  p = r0.data<float>();
  for (int64_t i = 0; i < 600; i++)
    for (int64_t j = 0; j < 500; j++)
      ASSERT_EQ(p[i * 500 + j], i < 300 ? (float)(i * 500 + j) : (float)(j * 300 + i - 300))
          << i << "," << j;
}

TEST(MovementLarge, ContiguousOfATransposeAndRepeatAndFlip) {
  Tensor x = iota({700, 900}, DType::Float64);
  Tensor t = x.as_strided({900, 700}, {1, 900}, 0);
  Tensor c = call1(Op::contiguous, {t});
  for (int64_t i = 0; i < 900; i++)
    for (int64_t j = 0; j < 700; j++)
      ASSERT_EQ(c.data<double>()[i * 700 + j], (double)(j * 900 + i));
  Tensor rep = call1(Op::repeat, {x, 2, 1, 3});
  ASSERT_EQ(rep.sizes(), (Shape{2, 700, 2700}));
  for (int64_t k : {0, 1})
    for (int64_t i = 0; i < 700; i += 7)
      for (int64_t j = 0; j < 2700; j++) ASSERT_EQ(at(rep, {k, i, j}), (double)(i * 900 + j % 900));
  Tensor f = call1(Op::flip, {x, IntList{1, -1}});
  for (int64_t i = 0; i < 700; i += 3)
    for (int64_t j = 0; j < 900; j++) ASSERT_EQ(at(f, {i, j}), (double)((699 - i) * 900 + 899 - j));
}

TEST(MovementLarge, ContiguousOfPermutedViewsGoesThroughTiles) {
  Tensor x = iota({5, 64, 70}, DType::Int32);
  Tensor p = x.as_strided({5, 70, 64}, {4480, 1, 70}, 0);  // permute(1, 3, 2)
  Tensor c = call1(Op::contiguous, {p});
  for (int64_t b = 0; b < 5; b++)
    for (int64_t i = 0; i < 70; i++)
      for (int64_t j = 0; j < 64; j++) ASSERT_EQ(at(c, {b, i, j}), (double)(b * 4480 + j * 70 + i));
  Tensor y = iota({50, 3, 40}, DType::Float16);
  Tensor q = y.as_strided({40, 3, 50}, {1, 40, 120}, 0);  // permute(3, 2, 1)
  Tensor d = call1(Op::clone, {q});
  for (int64_t i = 0; i < 40; i++)
    for (int64_t k = 0; k < 3; k++)
      for (int64_t j = 0; j < 50; j++)
        ASSERT_EQ(at(d, {i, k, j}), (double)(float)Half((float)(j * 120 + k * 40 + i)));
}

TEST(MovementLarge, GatherScatterAddAndIndexSelect) {
  const int64_t rows = 2000, cols = 300;
  Tensor x = iota({rows, cols});
  Tensor index = Tensor::empty({rows, 50}, DType::Int64);
  for (int64_t i = 0; i < index.numel(); i++) index.data<int64_t>()[i] = (i * 7919) % cols + 1;
  Tensor g = call1(Op::gather, {x, 2, index});
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < 50; j++)
      ASSERT_EQ(g.data<float>()[i * 50 + j],
                (float)(i * cols + index.data<int64_t>()[i * 50 + j] - 1));
  // every row adds 50 ones at its own columns: the counts per row add up to 50
  Tensor ones = Tensor::empty({rows, 50}, DType::Float32);
  ones.copy_from(Tensor::scalar(1.0));
  Tensor zeros = Tensor::empty({rows, cols}, DType::Float32);
  zeros.copy_from(Tensor::scalar(0.0));
  Tensor s = call1(Op::scatter_add, {zeros, 2, index, ones});
  for (int64_t i = 0; i < rows; i++) {
    double sum = 0;
    for (int64_t j = 0; j < cols; j++) sum += s.data<float>()[i * cols + j];
    ASSERT_EQ(sum, 50.0);
  }
  // 1-D scatter_add with many duplicates: one long line must not be split across threads
  Tensor idx1 = Tensor::empty({200000}, DType::Int64),
         one1 = Tensor::empty({200000}, DType::Float32);
  for (int64_t i = 0; i < 200000; i++) idx1.data<int64_t>()[i] = i % 3 + 1;
  one1.copy_from(Tensor::scalar(1.0));
  Tensor z3 = Tensor::empty({3}, DType::Float32);
  z3.copy_from(Tensor::scalar(0.0));
  Tensor s1 = call1(Op::scatter_add, {z3, 1, idx1, one1});
  EXPECT_EQ(s1.data<float>()[0], 66667.0f);
  EXPECT_EQ(s1.data<float>()[1], 66667.0f);
  EXPECT_EQ(s1.data<float>()[2], 66666.0f);
  // scatter_add along the first dim: blocks of columns run in parallel, each sums its own
  Tensor idx0 = Tensor::empty({2000, 3000}, DType::Int64),
         src0 = Tensor::empty({2000, 3000}, DType::Float64);
  std::vector<double> want(4 * 3000, 0.0);
  for (int64_t i = 0; i < 2000; i++)
    for (int64_t j = 0; j < 3000; j++) {
      int64_t v = (i * 31 + j * 17) % 4;
      idx0.data<int64_t>()[i * 3000 + j] = v + 1;
      src0.data<double>()[i * 3000 + j] = (double)(i % 5);
      want[v * 3000 + j] += (double)(i % 5);
    }
  Tensor z0 = Tensor::empty({4, 3000}, DType::Float64);
  z0.copy_from(Tensor::scalar(0.0));
  Tensor s0 = call1(Op::scatter_add, {z0, 1, idx0, src0});
  for (int64_t i = 0; i < 4 * 3000; i++) ASSERT_EQ(s0.data<double>()[i], want[i]) << i;
  Tensor g0 = call1(Op::gather, {s0, 1, idx0});
  for (int64_t i = 0; i < 2000 * 3000; i += 37) {
    int64_t j = i % 3000;
    ASSERT_EQ(g0.data<double>()[i], want[(idx0.data<int64_t>()[i] - 1) * 3000 + j]) << i;
  }
  Tensor sel = Tensor::empty({3000}, DType::Int64);
  for (int64_t i = 0; i < 3000; i++) sel.data<int64_t>()[i] = rows - (i % rows);
  Tensor is = call1(Op::index_select, {x, 1, sel});
  for (int64_t i = 0; i < 3000; i++)
    for (int64_t j = 0; j < cols; j += 13)
      ASSERT_EQ(at(is, {i, j}), (double)((rows - 1 - i % rows) * cols + j));
}

TEST(MovementLarge, NonzeroAndMaskedSelectKeepRowMajorOrder) {
  Tensor x = Tensor::empty({600, 700}, DType::Float32);
  for (int64_t i = 0; i < x.numel(); i++) x.data<float>()[i] = i % 11 == 0 ? 1.0f : 0.0f;
  Tensor nz = call1(Op::nonzero, {x});
  int64_t expected = (x.numel() + 10) / 11;
  ASSERT_EQ(nz.sizes(), (Shape{expected, 2}));
  for (int64_t k = 0; k < expected; k++) {
    int64_t flat = k * 11;
    ASSERT_EQ(nz.data<int64_t>()[2 * k], flat / 700 + 1);
    ASSERT_EQ(nz.data<int64_t>()[2 * k + 1], flat % 700 + 1);
  }
  Tensor mask = x.to(DType::Bool);
  Tensor vals = call1(Op::masked_select, {iota({600, 700}, DType::Int64), mask});
  ASSERT_EQ(vals.numel(), expected);
  for (int64_t k = 0; k < expected; k++) ASSERT_EQ(vals.data<int64_t>()[k], k * 11);
}

}  // namespace
