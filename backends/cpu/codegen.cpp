// Loop-IR kernels to LLVM IR. The outer index space is walked as a flattened range [begin, end)
// cut into runs along the innermost outer dim, whose index is an affine loop variable (so loads
// and stores along it are consecutive for the loop vectorizer); Loop stmts become inner loop
// nests with their accumulators; float sums and products get `reassoc` on the accumulating
// instruction only, so that reductions vectorize without fast-math anywhere else.
#include "codegen.h"

#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Support/xxhash.h>

#include <functional>
#include <unordered_map>

#include "scalar_math.h"
#include "avx512_rewrites.h"
#include "tc/error.h"

namespace tc::backends::cpu {

using lower::Instr;
using lower::Kernel;
using lower::Opc;
using lower::ReduceOp;
using lower::Stmt;
using lower::Ty;
using lower::Val;
using llvm::Value;

namespace {

template <typename... T>
void put(std::string& s, const T&... v) {
  (s.append(reinterpret_cast<const char*>(&v), sizeof v), ...);
}
void put_vals(std::string& s, const std::vector<Val>& v) {
  put(s, v.size());
  for (Val x : v) put(s, x);
}

// The type ScalarMath::op gives: Bool for predicates, the cast's target, else the operands'.
Ty result_type(lower::ScalarOp op, Ty ty, const std::vector<Ty>& operands) {
  switch (op) {
    case lower::ScalarOp::eq: case lower::ScalarOp::ne: case lower::ScalarOp::lt: case lower::ScalarOp::le:
    case lower::ScalarOp::gt: case lower::ScalarOp::ge: case lower::ScalarOp::logical_not:
    case lower::ScalarOp::logical_and: case lower::ScalarOp::logical_or: case lower::ScalarOp::logical_xor:
    case lower::ScalarOp::isnan: case lower::ScalarOp::isinf:
      return Ty::Bool;
    case lower::ScalarOp::cast: return ty;
    case lower::ScalarOp::where: return operands[1];
    default: return operands.size() == 2 && operands[0] != operands[1] ? ty : operands[0];
  }
}

class KernelEmitter {
 public:
  KernelEmitter(llvm::Module& m, const Kernel& k)
      : m_(m), k_(k), b_(m.getContext()), math_(b_, m, m.getModuleFlag(kAvx512Flag) != nullptr) {}

  void emit(const std::string& symbol, bool noalias);

 private:
  llvm::Function* emit_body(const std::string& symbol, bool noalias);
  void emit_info(const std::string& symbol);
  void emit_preamble();
  void emit_outer(Value* begin, Value* end);
  void emit_stmt(const Stmt& s);
  void emit_loop(const Stmt& s);
  void emit_final(const std::string& symbol);
  void emit_instrs(const std::vector<Val>& vals);
  // A reduction's identity and one combining step (not ArgMax/ArgMin, not ordered_fma).
  Value* identity(ReduceOp op, Ty t);
  Value* combine(ReduceOp op, Ty t, Value* cur, Value* x);
  // Accumulators of Kernel::outer_reductions (allocas of the entry block), set to their identity.
  std::vector<llvm::AllocaInst*> outer_accumulators();
  void emit_stores(const Stmt& s);
  Value* emit_instr(Val v);
  Value* get(Val v);
  Ty ty(Val v) const { return k_.instrs.at(v).ty; }
  // for (i = 0; i < n; i++) body(i), in the current block; the builder ends after the loop.
  // Returns the loop's back-edge branch (where loop metadata goes).
  llvm::BranchInst* for_loop(Value* n, const std::function<void(Value*)>& body);

  llvm::Module& m_;
  const Kernel& k_;
  llvm::IRBuilder<> b_;
  ScalarMath math_;
  llvm::Function* fn_ = nullptr;
  std::vector<Value*> buffers_;  // pointer per buffer parameter
  Value* sizes_ = nullptr;
  std::vector<Value*> vals_;        // emitted value per instr (null: not yet)
  std::vector<Value*> outer_vars_;  // current index per outer dim
  std::vector<Value*> loop_vars_;   // current index per dim of the enclosing Loop
  std::vector<llvm::AllocaInst*> outer_accs_;  // a two-level kernel's, per outer reduction
};



Value* KernelEmitter::get(Val v) {
  TC_CHECK(v >= 0 && v < (Val)k_.instrs.size(), CompileError, "cpu codegen: %s: value %%%d out of range",
           k_.name.c_str(), v);
  if (vals_[v]) return vals_[v];
  // Constants, sizes and loop indices need no place in the code: made where used (not kept, so
  // one made inside a loop is not reused after it). Anything else used before its statement is
  // outside its scope.
  const Opc op = k_.instrs[v].op;
  TC_CHECK(op == Opc::ConstI || op == Opc::ConstF || op == Opc::SizeParam || op == Opc::OuterVar || op == Opc::LoopVar,
           CompileError, "cpu codegen: %s: value %%%d used outside its scope", k_.name.c_str(), v);
  Value* r = emit_instr(v);
  if (op != Opc::ConstI && op != Opc::ConstF) vals_[v] = nullptr;
  return r;
}

Value* KernelEmitter::emit_instr(Val v) {
  const Instr& in = k_.instrs[v];
  Value* r = nullptr;
  switch (in.op) {
    case Opc::ConstI:
      r = in.ty == Ty::F32 || in.ty == Ty::F64 ? llvm::ConstantFP::get(math_.type(in.ty), (double)in.i)
                                                : llvm::ConstantInt::get(math_.type(in.ty), (uint64_t)in.i, true);
      break;
    case Opc::ConstF:
      r = in.ty == Ty::F32 || in.ty == Ty::F64 ? llvm::ConstantFP::get(math_.type(in.ty), in.f)
          : in.ty == Ty::Bool                   ? (Value*)b_.getInt1(in.f != 0)
                                                : llvm::ConstantInt::get(math_.type(in.ty), (uint64_t)(int64_t)in.f, true);
      break;
    case Opc::SizeParam:
      TC_CHECK(in.a >= 0 && in.a < k_.num_size_params, CompileError, "cpu codegen: %s: size parameter %d of %d",
               k_.name.c_str(), (int)in.a, k_.num_size_params);
      r = math_.cast(b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), sizes_, in.a)),
                     Ty::I64, in.ty);
      break;
    case Opc::OuterVar:
      TC_CHECK(in.a >= 0 && in.a < (Val)outer_vars_.size(), CompileError, "cpu codegen: %s: outer var %d outside the nest",
               k_.name.c_str(), (int)in.a);
      r = math_.cast(outer_vars_[in.a], Ty::I64, in.ty);
      break;
    case Opc::LoopVar:
      TC_CHECK(in.a >= 0 && in.a < (Val)loop_vars_.size(), CompileError, "cpu codegen: %s: loop var %d outside a loop",
               k_.name.c_str(), (int)in.a);
      r = math_.cast(loop_vars_[in.a], Ty::I64, in.ty);
      break;
    case Opc::Load: {
      TC_CHECK(in.a >= 0 && in.a < (Val)k_.buffers.size(), CompileError, "cpu codegen: %s: load of buffer %d",
               k_.name.c_str(), (int)in.a);
      DType d = k_.buffers[in.a].dtype;
      Value* p = b_.CreateInBoundsGEP(math_.memory_type(d), buffers_[in.a], math_.cast(get(in.b), ty(in.b), Ty::I64));
      Value* x = math_.load(p, d);
      r = math_.cast(x, lower::compute_type(d), in.ty);
      break;
    }
    case Opc::Math: {
      int arity = 0;
      switch (in.sop) {
#define TC_SCALAR_OP(name, n) \
  case lower::ScalarOp::name: arity = n; break;
#include "lower/scalar_ops.def"
#undef TC_SCALAR_OP
      }
      std::vector<Value*> args;
      std::vector<Ty> tys;
      for (Val a : {in.a, in.b, in.c}) {
        if ((int)args.size() == arity) break;
        args.push_back(get(a));
        tys.push_back(ty(a));
      }
      double cb = 0;
      const double* const_b = nullptr;
      if (arity == 2 && k_.instrs[in.b].op == Opc::ConstF) const_b = &(cb = k_.instrs[in.b].f);
      if (arity == 2 && k_.instrs[in.b].op == Opc::ConstI) const_b = &(cb = (double)k_.instrs[in.b].i);
      r = math_.op(in.sop, in.ty, args, tys, const_b);
      r = math_.cast(r, result_type(in.sop, in.ty, tys), in.ty);  // lowering's ty wins
      break;
    }
    case Opc::Acc:
    case Opc::OuterAcc:
      // Set when its loop ends (emit_loop, emit_final); reaching here means it is read before or
      // outside it.
      TC_FAIL(CompileError, "cpu codegen: %s: reduction result %%%d read before its loop", k_.name.c_str(), v);
  }
  vals_[v] = r;
  return r;
}

void KernelEmitter::emit_instrs(const std::vector<Val>& vals) {
  for (Val v : vals) {
    TC_CHECK(v >= 0 && v < (Val)k_.instrs.size(), CompileError, "cpu codegen: %s: value %%%d out of range",
             k_.name.c_str(), v);
    if (k_.instrs[v].op == Opc::Acc || k_.instrs[v].op == Opc::OuterAcc) {
      get(v);  // already set by its loop
      continue;
    }
    emit_instr(v);
  }
}

void KernelEmitter::emit_stores(const Stmt& s) {
  for (const lower::Store& st : s.stores) {
    TC_CHECK(st.buffer >= 0 && st.buffer < (int)k_.buffers.size(), CompileError, "cpu codegen: %s: store to buffer %d",
             k_.name.c_str(), st.buffer);
    DType d = k_.buffers[st.buffer].dtype;
    Value* p = b_.CreateInBoundsGEP(math_.memory_type(d), buffers_[st.buffer], math_.cast(get(st.index), ty(st.index), Ty::I64));
    math_.store(get(st.value), ty(st.value), p, d);
  }
}

llvm::BranchInst* KernelEmitter::for_loop(Value* n, const std::function<void(Value*)>& body) {
  llvm::LLVMContext& c = m_.getContext();
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* head = llvm::BasicBlock::Create(c, "loop", fn_);
  auto* exit = llvm::BasicBlock::Create(c, "loop.end", fn_);
  b_.CreateCondBr(b_.CreateICmpSGT(n, b_.getInt64(0)), head, exit);
  b_.SetInsertPoint(head);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i");
  i->addIncoming(b_.getInt64(0), pre);
  body(i);
  Value* next = b_.CreateAdd(i, b_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, b_.GetInsertBlock());
  llvm::BranchInst* latch = b_.CreateCondBr(b_.CreateICmpSLT(next, n), head, exit);
  b_.SetInsertPoint(exit);
  return latch;
}

// Interleaving for a loop whose body has `instrs` LLVM instructions. The loop vectorizer leaves
// long bodies (a 10-op pointwise chain with sigmoid and tanh: ~95) at one vector per iteration,
// and then one iteration's dependent chain (exp polynomials, divisions) is longer than the
// out-of-order window hides: the chain ran at 1.5 ns/element on one core, 0.7 with 8 independent
// vectors per iteration (0 = the vectorizer's own choice, which short bodies keep). Runs of a
// static length under 256 (the seed model's rows of 10) keep it too: the interleaved loop would
// never run there and only cost compile time (+15-45 ms for its regional module). 8 from 48
// instructions: the chain's body is 65 since sigmoid and tanh shrank, and at 4 vectors it ran at
// 30 cycles per 16 floats against 20 at 8 (one core, in cache), so the threshold keeps a margin
// below it; a body of ~38 (the chain up to sigmoid) gained ~10% from 8 and one of ~25 (a tanh)
// nothing, so shorter bodies keep 4 (less code to compile).
int interleave_count(size_t instrs, Value* run_length) {
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(run_length); c && c->getSExtValue() < 256) return 0;
  return instrs >= 48 ? 8 : instrs >= 24 ? 4 : 0;
}

void set_interleave(llvm::BranchInst* latch, int count) {
  if (count <= 0) return;
  llvm::LLVMContext& c = latch->getContext();
  llvm::Metadata* hint[] = {llvm::MDString::get(c, "llvm.loop.interleave.count"),
                            llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(c), count))};
  llvm::Metadata* ops[] = {nullptr, llvm::MDNode::get(c, hint)};
  llvm::MDNode* loop = llvm::MDNode::getDistinct(c, ops);
  loop->replaceOperandWith(0, loop);  // a loop id refers to itself
  latch->setMetadata(llvm::LLVMContext::MD_loop, loop);
}

void KernelEmitter::emit_loop(const Stmt& s) {
  // Accumulators live in allocas of the entry block (promoted to registers by the optimizer).
  struct Acc {
    const lower::Reduction* r;
    Ty ty;          // accumulator type (the Acc instr's; the input's type for ArgMax/ArgMin)
    llvm::AllocaInst* value;
    llvm::AllocaInst* index;  // ArgMax/ArgMin: the best index so far, -1 before the first
  };
  std::vector<Acc> accs;
  llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  for (const lower::Reduction& r : s.reductions) {
    TC_CHECK(r.result >= 0 && r.result < (Val)k_.instrs.size() && k_.instrs[r.result].op == Opc::Acc, CompileError,
             "cpu codegen: %s: a reduction without its Acc instr", k_.name.c_str());
    bool arg = r.op == ReduceOp::ArgMax || r.op == ReduceOp::ArgMin;
    Ty t = arg ? ty(r.input) : ty(r.result);
    if (r.op == ReduceOp::Any || r.op == ReduceOp::All) t = Ty::Bool;
    Acc a{&r, t, entry.CreateAlloca(math_.type(t)), arg ? entry.CreateAlloca(b_.getInt64Ty()) : nullptr};
    b_.CreateStore(identity(r.op, t), a.value);
    if (a.index) b_.CreateStore(b_.getInt64(-1), a.index);
    accs.push_back(a);
  }

  std::vector<Value*> extents;
  for (Val e : s.extents) extents.push_back(math_.cast(get(e), ty(e), Ty::I64));
  std::vector<Value*> saved = loop_vars_;
  loop_vars_.assign(extents.size(), nullptr);
  std::function<void(size_t)> nest = [&](size_t d) {
    if (d < extents.size()) {
      for_loop(extents[d], [&](Value* i) {
        loop_vars_[d] = i;
        nest(d + 1);
      });
      return;
    }
    emit_instrs(s.body);
    for (Acc& a : accs) {
      const lower::Reduction& r = *a.r;
      Value* x = math_.cast(get(r.input), ty(r.input), a.ty);
      Value* cur = b_.CreateLoad(math_.type(a.ty), a.value);
      const bool fl = is_float(a.ty), bl = a.ty == Ty::Bool;
      Value* next = nullptr;
      switch (r.op) {
        case ReduceOp::Sum:
        case ReduceOp::Prod:
          if (fl && r.ordered_fma) {  // in order, fused: BLAS's rounding (loop_ir.h)
            const Instr& mul = k_.instrs.at(r.input);
            TC_CHECK(mul.op == Opc::Math && mul.sop == lower::ScalarOp::mul, CompileError,
                     "cpu codegen: %s: an ordered fma reduction of something other than a product", k_.name.c_str());
            next = b_.CreateIntrinsic(llvm::Intrinsic::fma, {math_.type(a.ty)},
                                      {math_.cast(get(mul.a), ty(mul.a), a.ty), math_.cast(get(mul.b), ty(mul.b), a.ty), cur});
            break;
          }
          [[fallthrough]];
        case ReduceOp::Max: case ReduceOp::Min: case ReduceOp::Any: case ReduceOp::All:
          next = combine(r.op, a.ty, cur, x);
          break;
        case ReduceOp::ArgMax:
        case ReduceOp::ArgMin: {
          // The first index of the extreme; a NaN beats every number (PyTorch), the first NaN wins.
          bool mx = r.op == ReduceOp::ArgMax;
          Value* better = nullptr;
          if (fl) {
            better = mx ? b_.CreateFCmpOGT(x, cur) : b_.CreateFCmpOLT(x, cur);
            better = b_.CreateOr(better, b_.CreateAnd(b_.CreateFCmpUNO(x, x), b_.CreateFCmpORD(cur, cur)));
          } else if (bl) {
            better = mx ? b_.CreateICmpUGT(x, cur) : b_.CreateICmpULT(x, cur);
          } else {
            better = mx ? b_.CreateICmpSGT(x, cur) : b_.CreateICmpSLT(x, cur);
          }
          Value* best = b_.CreateLoad(b_.getInt64Ty(), a.index);
          better = b_.CreateOr(better, b_.CreateICmpSLT(best, b_.getInt64(0)));
          Value* idx = math_.cast(get(r.index), ty(r.index), Ty::I64);
          b_.CreateStore(b_.CreateSelect(better, idx, best), a.index);
          next = b_.CreateSelect(better, x, cur);
          break;
        }
      }
      b_.CreateStore(next, a.value);
    }
    emit_stores(s);
  };
  nest(0);
  loop_vars_ = saved;
  for (Acc& a : accs) {
    const lower::Reduction& r = *a.r;
    Value* res = a.index ? (Value*)b_.CreateLoad(b_.getInt64Ty(), a.index)
                         : (Value*)b_.CreateLoad(math_.type(a.ty), a.value);
    Ty from = a.index ? Ty::I64 : a.ty;
    if (a.index) res = b_.CreateSelect(b_.CreateICmpSLT(res, b_.getInt64(0)), b_.getInt64(0), res);  // empty: 0
    vals_[r.result] = math_.cast(res, from, ty(r.result));
    if (a.index && r.value != lower::kNoVal) {
      TC_CHECK(r.value >= 0 && r.value < (Val)k_.instrs.size() && k_.instrs[r.value].op == Opc::Acc, CompileError,
               "cpu codegen: %s: an arg reduction's value is not an Acc instr", k_.name.c_str());
      vals_[r.value] = math_.cast(b_.CreateLoad(math_.type(a.ty), a.value), a.ty, ty(r.value));
    }
  }
}

Value* KernelEmitter::identity(ReduceOp op, Ty t) {
  const bool fl = is_float(t);
  auto lowest = [&]() -> Value* {
    if (fl) return llvm::ConstantFP::getInfinity(math_.type(t), true);
    if (t == Ty::Bool) return b_.getFalse();
    return llvm::ConstantInt::get(math_.type(t), llvm::APInt::getSignedMinValue(t == Ty::I32 ? 32 : 64));
  };
  auto highest = [&]() -> Value* {
    if (fl) return llvm::ConstantFP::getInfinity(math_.type(t), false);
    if (t == Ty::Bool) return b_.getTrue();
    return llvm::ConstantInt::get(math_.type(t), llvm::APInt::getSignedMaxValue(t == Ty::I32 ? 32 : 64));
  };
  switch (op) {
    case ReduceOp::Sum: return math_.cast(b_.getInt32(0), Ty::I32, t);
    case ReduceOp::Prod: return math_.cast(b_.getInt32(1), Ty::I32, t);
    case ReduceOp::Max: case ReduceOp::ArgMax: return lowest();
    case ReduceOp::Min: case ReduceOp::ArgMin: return highest();
    case ReduceOp::Any: return b_.getFalse();
    case ReduceOp::All: return b_.getTrue();
  }
  __builtin_unreachable();
}

// Float sums and products get `reassoc` on the accumulating instruction only (vectorizable).
Value* KernelEmitter::combine(ReduceOp op, Ty t, Value* cur, Value* x) {
  const bool fl = is_float(t), bl = t == Ty::Bool;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod: {
      bool sum = op == ReduceOp::Sum;
      if (fl) {
        Value* next = sum ? b_.CreateFAdd(cur, x) : b_.CreateFMul(cur, x);
        llvm::FastMathFlags fmf;
        fmf.setAllowReassoc();
        llvm::cast<llvm::Instruction>(next)->setFastMathFlags(fmf);
        return next;
      }
      if (bl) return sum ? b_.CreateOr(cur, x) : b_.CreateAnd(cur, x);
      return sum ? b_.CreateAdd(cur, x) : b_.CreateMul(cur, x);
    }
    case ReduceOp::Max:
      return fl ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, cur, x)
             : bl ? b_.CreateOr(cur, x) : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, cur, x);
    case ReduceOp::Min:
      return fl ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, cur, x)
             : bl ? b_.CreateAnd(cur, x) : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, cur, x);
    case ReduceOp::Any: return b_.CreateOr(cur, x);
    case ReduceOp::All: return b_.CreateAnd(cur, x);
    case ReduceOp::ArgMax: case ReduceOp::ArgMin: break;
  }
  TC_FAIL(CompileError, "cpu codegen: %s: an outer arg reduction", k_.name.c_str());
}

std::vector<llvm::AllocaInst*> KernelEmitter::outer_accumulators() {
  std::vector<llvm::AllocaInst*> accs;
  llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  for (const lower::Reduction& r : k_.outer_reductions) {
    TC_CHECK(r.result >= 0 && r.result < (Val)k_.instrs.size() && k_.instrs[r.result].op == Opc::OuterAcc &&
                 !r.ordered_fma,
             CompileError, "cpu codegen: %s: an outer reduction without its OuterAcc instr", k_.name.c_str());
    accs.push_back(entry.CreateAlloca(math_.type(ty(r.result))));
    b_.CreateStore(identity(r.op, ty(r.result)), accs.back());
  }
  return accs;
}

void KernelEmitter::emit_stmt(const Stmt& s) {
  if (s.kind == Stmt::Kind::Loop) return emit_loop(s);
  emit_instrs(s.body);
  emit_stores(s);
}

// The outer nest: the flat range [begin, end) walked as runs of the innermost dim (a plain counted
// loop each), the other dims' indices carried from run to run.
void KernelEmitter::emit_outer(Value* begin, Value* end) {
  std::vector<Value*> ext;
  for (Val e : k_.outer) ext.push_back(math_.cast(get(e), ty(e), Ty::I64));
  auto body = [&] {
    for (const Stmt& s : k_.body) emit_stmt(s);
    for (size_t j = 0; j < outer_accs_.size(); j++) {
      const lower::Reduction& r = k_.outer_reductions[j];
      Ty t = ty(r.result);
      Value* x = math_.cast(get(r.input), ty(r.input), t);
      b_.CreateStore(combine(r.op, t, b_.CreateLoad(math_.type(t), outer_accs_[j]), x), outer_accs_[j]);
    }
  };
  if (ext.empty()) {  // one iteration: the range is [0, 1)
    llvm::LLVMContext& c = m_.getContext();
    auto* run = llvm::BasicBlock::Create(c, "once", fn_);
    auto* exit = llvm::BasicBlock::Create(c, "done", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(begin, end), run, exit);
    b_.SetInsertPoint(run);
    body();
    b_.CreateBr(exit);
    b_.SetInsertPoint(exit);
    return;
  }
  // The chunk's first index is decomposed once (divisions); later runs advance the indices like
  // an odometer (no division per run: tiny kernels launch many short runs).
  llvm::LLVMContext& c = m_.getContext();
  auto* start = llvm::BasicBlock::Create(c, "outer.start", fn_);
  auto* head = llvm::BasicBlock::Create(c, "outer", fn_);
  auto* exit = llvm::BasicBlock::Create(c, "outer.end", fn_);
  b_.CreateCondBr(b_.CreateICmpSLT(begin, end), start, exit);
  b_.SetInsertPoint(start);
  const size_t n = ext.size();
  std::vector<Value*> first(n);
  Value* rest = begin;
  for (size_t d = n; d-- > 1;) {
    first[d] = b_.CreateSRem(rest, ext[d]);
    rest = b_.CreateSDiv(rest, ext[d]);
  }
  first[0] = rest;
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  llvm::PHINode* flat = b_.CreatePHI(b_.getInt64Ty(), 2, "flat");
  flat->addIncoming(begin, start);
  std::vector<llvm::PHINode*> idx(n);
  for (size_t d = 0; d < n; d++) {
    idx[d] = b_.CreatePHI(b_.getInt64Ty(), 2, "o" + std::to_string(d));
    idx[d]->addIncoming(first[d], start);
  }
  outer_vars_.assign(idx.begin(), idx.end());
  Value* j0 = idx[n - 1];
  Value* run_end = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, end, b_.CreateAdd(b_.CreateSub(flat, j0), ext[n - 1]));
  const unsigned before = fn_->getInstructionCount();
  llvm::BranchInst* run_latch = for_loop(b_.CreateSub(run_end, flat), [&](Value* i) {
    outer_vars_[n - 1] = b_.CreateAdd(j0, i, "", true, true);
    body();
  });
  set_interleave(run_latch, interleave_count(fn_->getInstructionCount() - before, ext[n - 1]));
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  Value* carry = b_.getTrue();
  for (size_t d = n - 1; d-- > 0;) {
    Value* inc = b_.CreateAdd(idx[d], b_.CreateZExt(carry, b_.getInt64Ty()));
    Value* wrap = b_.CreateICmpEQ(inc, ext[d]);
    idx[d]->addIncoming(b_.CreateSelect(wrap, b_.getInt64(0), inc), latch);
    carry = b_.CreateAnd(carry, wrap);
  }
  idx[n - 1]->addIncoming(b_.getInt64(0), latch);
  flat->addIncoming(run_end, latch);
  b_.CreateCondBr(b_.CreateICmpSLT(run_end, end), head, exit);
  b_.SetInsertPoint(exit);
  outer_vars_.clear();
}

void KernelEmitter::emit_preamble() {
  for (Val v : k_.preamble) emit_instr(v);
}

llvm::Function* KernelEmitter::emit_body(const std::string& symbol, bool noalias) {
  llvm::LLVMContext& c = m_.getContext();
  llvm::Type* ptr = b_.getPtrTy();
  llvm::Type* i64 = b_.getInt64Ty();
  // The body takes one pointer per buffer (noalias where allowed) and is inlined into the entry;
  // a two-level kernel's also the pointer to its chunk's partial results.
  const bool two = k_.two_level();
  std::vector<llvm::Type*> params(k_.buffers.size(), ptr);
  params.insert(params.end(), {ptr, i64, i64});
  if (two) params.push_back(ptr);
  auto* body = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                      llvm::GlobalValue::InternalLinkage, symbol + ".body", m_);
  body->addFnAttr(llvm::Attribute::NoUnwind);
  for (size_t i = 0; i < k_.buffers.size(); i++) {
    if (noalias) body->addParamAttr(i, llvm::Attribute::NoAlias);
    if (!k_.buffers[i].written) body->addParamAttr(i, llvm::Attribute::ReadOnly);
  }
  body->addParamAttr(k_.buffers.size(), llvm::Attribute::NoAlias);
  body->addParamAttr(k_.buffers.size(), llvm::Attribute::ReadOnly);
  fn_ = body;
  b_.SetInsertPoint(llvm::BasicBlock::Create(c, "entry", body));
  buffers_.clear();
  for (size_t i = 0; i < k_.buffers.size(); i++) buffers_.push_back(body->getArg(i));
  sizes_ = body->getArg(k_.buffers.size());
  vals_.assign(k_.instrs.size(), nullptr);
  emit_preamble();
  outer_accs_ = outer_accumulators();
  emit_outer(body->getArg(k_.buffers.size() + 1), body->getArg(k_.buffers.size() + 2));
  for (size_t j = 0; j < outer_accs_.size(); j++) {  // the chunk's partial results
    Value* slot = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), body->getArg(k_.buffers.size() + 3), j * kPartialBytes);
    b_.CreateStore(b_.CreateLoad(outer_accs_[j]->getAllocatedType(), outer_accs_[j]), slot);
  }
  outer_accs_.clear();
  b_.CreateRetVoid();

  // The exported entry: unpacks the buffer array.
  auto* entry = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64, i64}, false),
                                       llvm::GlobalValue::ExternalLinkage, symbol, m_);
  entry->addFnAttr(llvm::Attribute::NoUnwind);
  b_.SetInsertPoint(llvm::BasicBlock::Create(c, "entry", entry));
  std::vector<Value*> args;
  for (size_t i = 0; i < k_.buffers.size(); i++)
    args.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), i)));
  args.insert(args.end(), {entry->getArg(1), entry->getArg(2), entry->getArg(3)});
  if (two) args.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), k_.buffers.size())));
  b_.CreateCall(body, args);
  b_.CreateRetVoid();
  return body;
}

// <symbol>_info(sizes, out): out[0] = outer elements, out[1] = inner work per outer element
// (the product of the extents of each Loop, summed, at least 1).
void KernelEmitter::emit_info(const std::string& symbol) {
  llvm::LLVMContext& c = m_.getContext();
  llvm::Type* ptr = b_.getPtrTy();
  auto* f = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr}, false),
                                   llvm::GlobalValue::ExternalLinkage, symbol + "_info", m_);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  fn_ = f;
  b_.SetInsertPoint(llvm::BasicBlock::Create(c, "entry", f));
  sizes_ = f->getArg(0);
  vals_.assign(k_.instrs.size(), nullptr);
  emit_preamble();
  Value* outer = b_.getInt64(1);
  for (Val e : k_.outer) outer = b_.CreateMul(outer, math_.cast(get(e), ty(e), Ty::I64));
  Value* work = b_.getInt64(1);
  for (const Stmt& s : k_.body) {
    if (s.kind != Stmt::Kind::Loop) continue;
    Value* w = b_.getInt64(1);
    for (Val e : s.extents) w = b_.CreateMul(w, math_.cast(get(e), ty(e), Ty::I64));
    work = b_.CreateAdd(work, w);
  }
  b_.CreateStore(outer, f->getArg(1));
  b_.CreateStore(work, b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), f->getArg(1), 1));
  b_.CreateRetVoid();
}

// <symbol>_final(buffers, sizes, partials, parts): combines the parts' partial results in order,
// then runs Kernel::final once.
void KernelEmitter::emit_final(const std::string& symbol) {
  llvm::LLVMContext& c = m_.getContext();
  llvm::Type* ptr = b_.getPtrTy();
  llvm::Type* i64 = b_.getInt64Ty();
  auto* f = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, i64}, false),
                                   llvm::GlobalValue::ExternalLinkage, symbol + "_final", m_);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  fn_ = f;
  b_.SetInsertPoint(llvm::BasicBlock::Create(c, "entry", f));
  buffers_.clear();
  for (size_t i = 0; i < k_.buffers.size(); i++)
    buffers_.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, f->getArg(0), i)));
  sizes_ = f->getArg(1);
  vals_.assign(k_.instrs.size(), nullptr);
  emit_preamble();
  std::vector<llvm::AllocaInst*> accs = outer_accumulators();
  const uint64_t stride = k_.outer_reductions.size() * kPartialBytes;
  for_loop(f->getArg(3), [&](Value* part) {
    Value* base = b_.CreateInBoundsGEP(b_.getInt8Ty(), f->getArg(2), b_.CreateMul(part, b_.getInt64(stride)));
    for (size_t j = 0; j < accs.size(); j++) {
      const lower::Reduction& r = k_.outer_reductions[j];
      Ty t = ty(r.result);
      Value* x = b_.CreateLoad(math_.type(t), b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), base, j * kPartialBytes));
      b_.CreateStore(combine(r.op, t, b_.CreateLoad(math_.type(t), accs[j]), x), accs[j]);
    }
  });
  for (size_t j = 0; j < accs.size(); j++)
    vals_[k_.outer_reductions[j].result] = b_.CreateLoad(accs[j]->getAllocatedType(), accs[j]);
  emit_instrs(k_.final.body);
  emit_stores(k_.final);
  b_.CreateRetVoid();
}

void KernelEmitter::emit(const std::string& symbol, bool noalias) {
  for (Val v : k_.preamble)
    TC_CHECK(v >= 0 && v < (Val)k_.instrs.size(), CompileError, "cpu codegen: %s: preamble value out of range",
             k_.name.c_str());
  llvm::Function* body = emit_body(symbol, noalias);
  emit_info(symbol);
  if (k_.two_level()) emit_final(symbol);
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*body, &os)) {
    body->eraseFromParent();
    TC_FAIL(CompileError, "cpu codegen: %s: invalid LLVM IR: %s", k_.name.c_str(), err.c_str());
  }
}

}  // namespace

std::string kernel_key(const Kernel& k, bool noalias) {
  std::string s = noalias ? "N" : "A";
  put(s, k.buffers.size());
  for (const lower::BufferParam& p : k.buffers) put(s, p.dtype, p.written);
  put(s, k.num_size_params, k.instrs.size());
  for (const Instr& in : k.instrs) put(s, in.op, in.ty, in.sop, in.a, in.b, in.c, in.i, in.f);
  put_vals(s, k.preamble);
  put_vals(s, k.outer);
  auto reductions = [&](const std::vector<lower::Reduction>& rs) {
    put(s, rs.size());
    for (const lower::Reduction& r : rs) put(s, r.op, r.input, r.index, r.result, r.value, r.ordered_fma);
  };
  auto stmt = [&](const Stmt& st) {
    put(s, st.kind);
    put_vals(s, st.extents);
    put_vals(s, st.body);
    reductions(st.reductions);
    put(s, st.stores.size());
    for (const lower::Store& x : st.stores) put(s, x.buffer, x.index, x.value);
  };
  put(s, k.body.size());
  for (const Stmt& st : k.body) stmt(st);
  if (k.two_level()) {  // (other kernels keep their keys)
    reductions(k.outer_reductions);
    stmt(k.final);
  }
  return s;
}

std::string kernel_symbol(const std::string& key) {
  llvm::XXH128_hash_t h = llvm::xxh3_128bits(llvm::ArrayRef<uint8_t>((const uint8_t*)key.data(), key.size()));
  char buf[40];
  snprintf(buf, sizeof buf, "tck_%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
  return buf;
}

void emit_kernel(llvm::Module& m, const Kernel& k, const std::string& symbol, bool noalias) {
  KernelEmitter(m, k).emit(symbol, noalias);
}

std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& ctx, const std::string& name) {
  return std::make_unique<llvm::Module>(name, ctx);
}

}  // namespace tc::backends::cpu
