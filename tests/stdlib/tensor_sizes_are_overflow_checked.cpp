// The C++ tensor core's size arithmetic (issue 32): numel, strides and byte counts past int64
// are errors, never a wrapped count. Before, Tensor::empty({2^62}, Float32) returned a tensor
// over a 0-byte storage (2^64 bytes wrapped to 0) and every write through it hit other memory.
#include <gtest/gtest.h>

#include <functional>

#include "error_kind.h"
#include "tc/ops.h"

using namespace tc;

namespace {

constexpr int64_t k62 = int64_t(1) << 62, kMax = INT64_MAX;

TEST(SizeArithmetic, CheckedHelpersThrowInsteadOfWrapping) {
  EXPECT_EQ(checked_mul(k62, 1, "x"), k62);
  EXPECT_EQ(checked_add(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(kind_of([] { checked_mul(k62, 2, "x"); }), ErrorKind::ShapeError);
  EXPECT_EQ(kind_of([] { checked_add(kMax, 1, "x"); }), ErrorKind::ShapeError);
  EXPECT_EQ(kind_of([] { checked_mul(-k62, 4, "x"); }), ErrorKind::ShapeError);
  EXPECT_EQ(shape_numel({k62, 1}), k62);
  EXPECT_EQ(shape_numel({k62, k62, 0}), 0) << "no element: no overflow";
  EXPECT_EQ(kind_of([] { shape_numel({int64_t(1) << 31, int64_t(1) << 31, int64_t(1) << 31}); }), ErrorKind::ShapeError);
  EXPECT_EQ(kind_of([] { contiguous_strides({2, k62, 4}); }), ErrorKind::ShapeError);
  EXPECT_EQ(contiguous_strides({k62, 2})[0], 2);
}

TEST(SizeArithmetic, StorageBytesPastInt64AreOutOfMemory) {
  EXPECT_EQ(storage_nbytes({3, 4}, {4, 1}, 0, DType::Float32), 48);
  EXPECT_EQ(storage_nbytes({3, 4}, {0, 1}, 2, DType::Float64), 48) << "a stride-0 dim spans one row, after the offset";
  EXPECT_EQ(storage_nbytes({k62}, {0}, 0, DType::Float32), 4) << "a huge expand spans one element";
  EXPECT_EQ(storage_nbytes({k62}, {1}, 0, DType::UInt8), k62);
  EXPECT_EQ(kind_of([] { storage_nbytes({k62}, {1}, 0, DType::Float32); }), ErrorKind::OutOfMemoryError);
  EXPECT_EQ(kind_of([] { storage_nbytes({4, k62}, {k62, 1}, 0, DType::UInt8); }), ErrorKind::ShapeError);
}

TEST(SizeArithmetic, HugeTensorsAreErrorsNotEmptyStorages) {
  EXPECT_EQ(kind_of([] { Tensor::empty({k62}, DType::Float32); }), ErrorKind::OutOfMemoryError);
  EXPECT_EQ(kind_of([] { Tensor::empty({int64_t(1) << 30, int64_t(1) << 32}, DType::Float32); }),
            ErrorKind::OutOfMemoryError);
  EXPECT_EQ(kind_of([] { Tensor::empty({k62}, DType::UInt8); }), ErrorKind::OutOfMemoryError)
      << "representable, but no address space maps 2^62 bytes";
  EXPECT_EQ(kind_of([] { Tensor::empty({int64_t(1) << 31, int64_t(1) << 31, int64_t(1) << 31}, DType::Bool); }),
            ErrorKind::ShapeError);
  EXPECT_EQ(kind_of([] { Tensor::fake({k62}, {1}, DType::Float64); }), ErrorKind::OutOfMemoryError);
  EXPECT_EQ(kind_of([] { Storage::allocate(SIZE_MAX, Device{}); }), ErrorKind::OutOfMemoryError);
  Tensor one = Tensor::empty({1}, DType::Float32);
  Tensor view = one.as_strided({k62}, {0}, 0);  // a legal stride-0 view
  EXPECT_EQ(view.numel(), k62);
  EXPECT_EQ(kind_of([&] { one.as_strided({k62, k62}, {0, 0}, 0); }), ErrorKind::ShapeError);
  EXPECT_EQ(kind_of([&] { (void)view.clone(); }), ErrorKind::OutOfMemoryError);
}

TEST(SizeArithmetic, EveryOpsResultIsChecked) {
  Tensor x = call1(Op::expand, {Tensor::empty({1}, DType::Float32), Value(IntList{k62})});
  EXPECT_EQ(x.numel(), k62);
  EXPECT_EQ(kind_of([&] { call1(Op::cat, {Value(TensorList{x, x})}); }), ErrorKind::ShapeError);
  EXPECT_EQ(kind_of([&] { call1(Op::zeros, {Value(IntList{k62})}); }), ErrorKind::OutOfMemoryError);
  EXPECT_EQ(kind_of([&] { call1(Op::expand, {x, Value(IntList{4, k62})}); }), ErrorKind::ShapeError);
}

}  // namespace
