// The tensor core without kernels: dtypes and half conversions, promotion, broadcasting, dims,
// views sharing storage, copies with conversion, schema binding and its errors.
#include <gtest/gtest.h>

#include <cmath>

#include "error_kind.h"
#include "tc/ops.h"

using namespace tc;

namespace {

Tensor iota(const Shape& s, DType dt = DType::Float32) {
  Tensor t = Tensor::empty(s, DType::Float64);
  for (int64_t i = 0; i < t.numel(); i++) t.data<double>()[i] = (double)i;
  return t.to(dt);
}

TEST(DTypes, HalfRoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);            // rounds to inf
  EXPECT_EQ(Half(5.960464477539063e-08f).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(Half(2.98e-08f).bits, 0x0000);               // below half of it
  EXPECT_EQ(Half(1.0f + 1.0f / 2048).bits, 0x3c00);   // tie -> even
  EXPECT_EQ(Half(1.0f + 3.0f / 2048).bits, 0x3c02);   // tie -> even (up)
  EXPECT_TRUE(std::isnan((float)Half(NAN)));
  for (uint32_t b = 0; b < 0x7c00; b++) EXPECT_EQ(Half((float)Half::to_float(b)).bits, b) << b;
}

TEST(DTypes, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ((float)BFloat16(3.140625f), 3.140625f);
  EXPECT_EQ(BFloat16(1.00390625f).bits, 0x3f80);  // tie -> even
  EXPECT_TRUE(std::isnan((float)BFloat16(NAN)));
}

TEST(Promotion, FollowsPytorchTable) {
  EXPECT_EQ(promote_types(DType::Int32, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int32), DType::Int32);
  EXPECT_EQ(promote_types(DType::Bool, DType::UInt8), DType::UInt8);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::Int64, DType::Float32), DType::Float32);
}

TEST(Promotion, WrappedNumbersAndZeroDimTensorsRankBelowDimTensors) {
  Tensor i32 = Tensor::empty({2}, DType::Int32), f16 = Tensor::empty({2}, DType::Float16);
  Tensor lua_int = Tensor::scalar_int(2, DType::Int64, true), lua_float = Tensor::scalar(2.5, DType::Float64, true);
  EXPECT_EQ(result_type({i32, lua_int}), DType::Int32);
  EXPECT_EQ(result_type({i32, lua_float}), DType::Float32);  // the default dtype
  EXPECT_EQ(result_type({f16, lua_float}), DType::Float16);
  EXPECT_EQ(result_type({Tensor::empty({2}, DType::Bool), lua_int}), DType::Int64);
  Tensor zero_f64 = Tensor::scalar(1.0, DType::Float64);
  EXPECT_EQ(result_type({Tensor::empty({2}, DType::Float32), zero_f64}), DType::Float32);
  EXPECT_EQ(result_type({i32, zero_f64}), DType::Float64);
  EXPECT_EQ(result_type({zero_f64, lua_int}), DType::Float64);
}

TEST(Shapes, BroadcastAndErrors) {
  EXPECT_EQ(broadcast_shapes({3, 1, 5}, {4, 1}), (Shape{3, 4, 5}));
  EXPECT_EQ(broadcast_shapes({}, {2, 2}), (Shape{2, 2}));
  EXPECT_EQ(kind_of([] { broadcast_shapes({3}, {4}); }), ErrorKind::ShapeError);
}

TEST(Shapes, DimsAreOneBasedWithNegativesFromTheEnd) {
  EXPECT_EQ(wrap_dim(1, 3), 0);
  EXPECT_EQ(wrap_dim(3, 3), 2);
  EXPECT_EQ(wrap_dim(-1, 3), 2);
  EXPECT_EQ(wrap_dim(-3, 3), 0);
  EXPECT_EQ(wrap_dim(1, 0), 0);  // 0-dim tensors accept 1 and -1
  EXPECT_EQ(kind_of([] { wrap_dim(0, 3); }), ErrorKind::IndexError);
  EXPECT_EQ(kind_of([] { wrap_dim(4, 3); }), ErrorKind::IndexError);
  EXPECT_EQ(kind_of([] { wrap_dim(-4, 3); }), ErrorKind::IndexError);
}

TEST(Views, ShareStorageAndSeeWrites) {
  Tensor a = iota({2, 3});
  Tensor row = call1(Op::select, {a, 1, 2});  // a[2]
  EXPECT_EQ(row.sizes(), (Shape{3}));
  EXPECT_EQ(row.storage(), a.storage());
  row.data<float>()[0] = 42;
  EXPECT_EQ(a.data<float>()[3], 42);
  Tensor t = call1(Op::t, {a});
  EXPECT_FALSE(t.is_contiguous());
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.data<float>()[1], 42);  // t[1][2] == a[2][1]
}

TEST(Copies, ConvertDtypesAndBroadcast) {
  Tensor a = iota({2, 3}, DType::Float64);
  Tensor h = a.to(DType::Float16);
  EXPECT_EQ((float)h.data<Half>()[5], 5.0f);
  Tensor b = Tensor::empty({4, 3}, DType::Int32);
  Tensor row = call1(Op::select, {a, 1, 2});
  b.copy_from(row);  // broadcast [3] -> [4, 3]
  for (int i = 0; i < 4; i++) EXPECT_EQ(b.data<int32_t>()[i * 3 + 2], 5);
  EXPECT_EQ(kind_of([&] { row.copy_from(b); }), ErrorKind::ShapeError);
  Tensor bools = a.to(DType::Bool);
  EXPECT_FALSE(bools.data<bool>()[0]);
  EXPECT_TRUE(bools.data<bool>()[1]);
}

TEST(Items, ReadOneElementTensors) {
  EXPECT_EQ(Tensor::scalar(2.5).item_double(), 2.5);
  EXPECT_EQ(Tensor::scalar_int(-7).item_int(), -7);
  EXPECT_EQ(kind_of([] { iota({2}).item_double(); }), ErrorKind::ValueError);
}

TEST(Schemas, ParseFromTheOpTable) {
  const OpSchema& s = schema(Op::add);
  ASSERT_EQ(s.args.size(), 3u);
  EXPECT_EQ(s.args[2].name, "alpha");
  EXPECT_TRUE(s.args[2].kwonly);
  EXPECT_EQ(schema(Op::split).returns, ReturnKind::List);
  EXPECT_EQ(schema(Op::max_dim).returns, ReturnKind::Tuple);
  EXPECT_EQ(schema(Op::max_dim).num_returns, 2);
  EXPECT_TRUE(schema(Op::view).args[1].varargs);
  EXPECT_EQ(op_from_name("softmax"), Op::softmax);
  EXPECT_FALSE(op_from_name("nope").has_value());
  for (int i = 0; i < kNumOps; i++) EXPECT_STREQ(schema((Op)i).name, op_name((Op)i));
}

TEST(Binding, VarargsOptionsDefaultsAndErrors) {
  Stack s = bind(Op::view, {iota({6}), 2, 3}, {});
  EXPECT_EQ(s[1].ints(), (IntList{2, 3}));
  s = bind(Op::view, {iota({6}), IntList{3, 2}}, {});
  EXPECT_EQ(s[1].ints(), (IntList{3, 2}));
  s = bind(Op::sum, {iota({6}), 1}, {{"keepdim", true}});
  EXPECT_EQ(s[1].ints(), (IntList{1}));
  EXPECT_TRUE(s[2].to_bool());
  EXPECT_TRUE(s[3].is_none());
  s = bind(Op::add, {iota({2}), 3.5}, {});
  EXPECT_TRUE(s[1].tensor().is_wrapped_number());
  EXPECT_EQ(s[2].to_int(), 1);  // alpha default
  EXPECT_EQ(kind_of([] { bind(Op::add, {iota({2})}, {}); }), ErrorKind::ValueError);
  EXPECT_EQ(kind_of([] { bind(Op::sum, {iota({2})}, {{"keepdims", true}}); }), ErrorKind::ValueError);
  EXPECT_EQ(kind_of([] { bind(Op::transpose, {iota({2}), "a", 1}, {}); }), ErrorKind::ValueError);
  EXPECT_EQ(kind_of([] { bind(Op::sum, {iota({2})}, {{"dtype", "float33"}}); }), ErrorKind::DTypeError);
}

TEST(Fake, TensorsRunOnlyMetaRules) {
  Tensor f = Tensor::fake({4, 6}, contiguous_strides({4, 6}), DType::Float16);
  Tensor v = call1(Op::view, {f, 2, 12});
  EXPECT_TRUE(v.is_fake());
  EXPECT_EQ(v.sizes(), (Shape{2, 12}));
  EXPECT_EQ(v.dtype(), DType::Float16);
  EXPECT_EQ(kind_of([&] { call1(Op::view, {f, 5, 5}); }), ErrorKind::ShapeError);
}

}  // namespace

namespace {

TEST(Storage, BorrowedMemoryIsNeverFreed) {
  float host[4] = {1, 2, 3, 4};  // on the stack: freeing it would abort
  {
    auto s = Storage::wrap(host, sizeof host, Device{}, nullptr, nullptr);
    Tensor t = Tensor(std::make_shared<TensorImpl>());
    t.impl()->storage = s;
    t.impl()->sizes = {4};
    t.impl()->strides = {1};
    EXPECT_THROW(t.item_double(), Error);  // 4 elements: item is refused
  }
  int calls = 0;
  {
    auto s = Storage::wrap(host, sizeof host, Device{}, [](void*, void* ctx) { ++*(int*)ctx; }, &calls);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(host[3], 4);
}

TEST(Storage, FreedBlocksAreReusedAndLiveBytesTracked) {
  int64_t before = Storage::live_bytes();
  void* first;
  {
    Tensor a = Tensor::empty({1000}, DType::Float32);
    first = a.data_ptr();
    EXPECT_EQ(Storage::live_bytes(), before + 4000);
  }
  EXPECT_EQ(Storage::live_bytes(), before);
  Tensor b = Tensor::empty({1000}, DType::Float32);
  EXPECT_EQ(b.data_ptr(), first);  // the cached block comes back
}

TEST(Storage, SwapMemoryMovesEveryViewToTheOtherMemory) {
  const int64_t before = Storage::live_bytes();
  float host[4] = {9, 9, 9, 9};
  int freed = 0;
  {
    Tensor a = Tensor::empty({4}, DType::Float32);
    for (int i = 0; i < 4; i++) a.data<float>()[i] = float(i + 1);
    Tensor v = a.as_strided({2}, {1}, 2);  // a view over the same storage
    a.bump_version();
    auto borrowed = Storage::wrap(host, sizeof host, Device{}, [](void*, void* ctx) { ++*(int*)ctx; }, &freed);
    a.storage()->swap_memory(*borrowed);
    EXPECT_EQ(a.data_ptr(), (void*)host);
    EXPECT_EQ(v.data<float>()[0], 9);  // the view follows its storage
    EXPECT_EQ(a.version(), 1u);        // autograd's version counter stays
    EXPECT_EQ(static_cast<float*>(borrowed->data())[3], 4);  // a's old memory, owned by borrowed now
    EXPECT_EQ(Storage::live_bytes(), before + 16);
    borrowed.reset();  // frees a's old block (no longer counted), not the host array
    EXPECT_EQ(freed, 0);
    EXPECT_EQ(Storage::live_bytes(), before);
    EXPECT_EQ(a.data<float>()[3], 9);
  }
  EXPECT_EQ(freed, 1);  // a's storage ran the borrowed memory's deleter
}

}  // namespace
