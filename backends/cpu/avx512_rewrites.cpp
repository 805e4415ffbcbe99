// Table gathers as permutes, reciprocal estimates of any width as vrcp14ps and one Newton step
// (avx512_rewrites.h).
#include "avx512_rewrites.h"

#include <llvm/Analysis/VectorUtils.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PatternMatch.h>
#include <llvm/Transforms/Utils/Local.h>

#include <vector>

namespace tc::backends::cpu {

namespace {

// The table a gather's addresses come from and the i32 lane indices into it, when the addresses
// are `getelementptr T, @table, zext(i)` (or `[16 x T], @table, 0, zext(i)`) of a constant global
// holding 16 values of the gather's element type.
struct TableIndex {
  llvm::ConstantDataArray* table = nullptr;
  llvm::Value* index = nullptr;
};

TableIndex table_index(llvm::IntrinsicInst* gather, llvm::FixedVectorType* vt) {
  auto* mask = llvm::dyn_cast<llvm::Constant>(gather->getArgOperand(2));
  auto* gep = llvm::dyn_cast<llvm::GetElementPtrInst>(gather->getArgOperand(0));
  if (!mask || !mask->isAllOnesValue() || !gep || !gep->isInBounds()) return {};
  auto* global = llvm::dyn_cast<llvm::GlobalVariable>(gep->getPointerOperand());
  if (!global || !global->isConstant() || !global->hasDefinitiveInitializer()) return {};
  auto* data = llvm::dyn_cast<llvm::ConstantDataArray>(global->getInitializer());
  if (!data || data->getNumElements() != 16 || data->getElementType() != vt->getElementType())
    return {};
  llvm::Value* wide = nullptr;
  if (gep->getNumIndices() == 1 && gep->getSourceElementType() == vt->getElementType()) {
    wide = gep->getOperand(1);
  } else if (gep->getNumIndices() == 2 && gep->getSourceElementType() == data->getType()) {
    auto* first = llvm::dyn_cast<llvm::ConstantInt>(gep->getOperand(1));
    if (first && first->isZero()) wide = gep->getOperand(2);
  }
  auto* ext = llvm::dyn_cast_or_null<llvm::ZExtInst>(wide);
  if (!ext ||
      ext->getSrcTy() != llvm::FixedVectorType::get(llvm::Type::getInt32Ty(gep->getContext()),
                                                    vt->getNumElements()))
    return {};
  // In bounds: the lane index is below 16, so the permute's use of its low 4 bits reads the same;
  // an `i & 15` that made it so is left out (the permute reads those bits only).
  llvm::Value* index = ext->getOperand(0);
  llvm::Value* unmasked = nullptr;
  if (llvm::PatternMatch::match(index,
                                llvm::PatternMatch::m_And(llvm::PatternMatch::m_Value(unmasked),
                                                          llvm::PatternMatch::m_SpecificInt(15))))
    index = unmasked;
  return {data, index};
}

llvm::Constant* elements(llvm::ConstantDataArray* table, unsigned from, unsigned count) {
  std::vector<llvm::Constant*> v;
  for (unsigned i = from; i < from + count; i++) v.push_back(table->getElementAsConstant(i));
  return llvm::ConstantVector::get(v);
}

// A gather from a 16-entry table as a permute; false where the gather is not one.
bool gather_to_permute(llvm::IntrinsicInst* g) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(g->getType());
  if (!vt || (vt->getNumElements() != 16 && vt->getNumElements() != 8)) return false;
  const bool fl = vt->getElementType()->isFloatTy();
  if (!fl && !vt->getElementType()->isIntegerTy(32)) return false;
  TableIndex ti = table_index(g, vt);
  if (!ti.table) return false;
  llvm::IRBuilder<> b(g);
  llvm::Value* r = nullptr;
  if (vt->getNumElements() == 16) {
    r = b.CreateIntrinsic(fl ? llvm::Intrinsic::x86_avx512_permvar_sf_512
                             : llvm::Intrinsic::x86_avx512_permvar_si_512,
                          {}, {elements(ti.table, 0, 16), ti.index});
  } else {  // index bit 3 picks the half
    r = b.CreateIntrinsic(fl ? llvm::Intrinsic::x86_avx512_vpermi2var_ps_256
                             : llvm::Intrinsic::x86_avx512_vpermi2var_d_256,
                          {}, {elements(ti.table, 0, 8), ti.index, elements(ti.table, 8, 8)});
  }
  llvm::Value* addresses = g->getArgOperand(0);
  g->replaceAllUsesWith(r);
  g->eraseFromParent();
  llvm::RecursivelyDeleteTriviallyDeadInstructions(addresses);
  return true;
}

// vrcp14ps of every lane of `d` (a float or a fixed vector of floats of any width), 16 lanes at a
// time where the target's vectors are 512 bits (not where its tuning prefers 256), else 8 or 4: a
// lane's estimate is the same bits whichever instruction computes it, so a division gives the same
// result in a loop's body, its vector remainders and its scalar iterations.
llvm::Value* rcp14(llvm::IRBuilder<>& b, llvm::Value* d, unsigned max_lanes) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(d->getType());
  const unsigned n = vt ? vt->getNumElements() : 1;
  // 1, 2 or 3 lanes ride in 4; the others are left undefined (vrcp14ps raises no exception)
  const unsigned padded = (n + 3) / 4 * 4;
  llvm::Value* v = d;
  if (!vt) {
    v = b.CreateInsertElement(llvm::PoisonValue::get(llvm::FixedVectorType::get(b.getFloatTy(), 4)), d,
                              b.getInt64(0));
  } else if (padded != n) {
    llvm::SmallVector<int, 16> mask;
    for (unsigned i = 0; i < padded; i++) mask.push_back(i < n ? (int)i : -1);
    v = b.CreateShuffleVector(d, mask);
  }
  llvm::SmallVector<llvm::Value*, 4> parts;
  for (unsigned at = 0; at < padded;) {
    const unsigned w = padded - at >= 16 && max_lanes >= 16 ? 16 : padded - at >= 8 ? 8 : 4;
    llvm::Value* part = v;
    if (w != padded) {
      llvm::SmallVector<int, 16> mask;
      for (unsigned i = 0; i < w; i++) mask.push_back((int)(at + i));
      part = b.CreateShuffleVector(v, mask);
    }
    const llvm::Intrinsic::ID id = w == 16  ? llvm::Intrinsic::x86_avx512_rcp14_ps_512
                                   : w == 8 ? llvm::Intrinsic::x86_avx512_rcp14_ps_256
                                            : llvm::Intrinsic::x86_avx512_rcp14_ps_128;
    llvm::Value* all = w == 16 ? b.getInt16(0xffff) : b.getInt8(0xff);
    parts.push_back(b.CreateIntrinsic(id, {}, {part, llvm::Constant::getNullValue(part->getType()), all}));
    at += w;
  }
  llvm::Value* e = parts.size() == 1 ? parts[0] : llvm::concatenateVectors(b, parts);
  if (!vt) return b.CreateExtractElement(e, b.getInt64(0));
  if (padded == n) return e;
  llvm::SmallVector<int, 16> mask;
  for (unsigned i = 0; i < n; i++) mask.push_back((int)i);
  return b.CreateShuffleVector(e, mask);
}

// n / d with `arcp` on floats, whatever the width (scalar, 2, 4, 8, 16 lanes), as LLVM lowers 16
// lanes: e = vrcp14ps(d), q = n e, q + e (n - d q). The same steps on every width: the loop
// vectorizer's body (16 or 8 lanes, as the host's tuning prefers), its vector remainder, the SLP
// vectorizer's 2 lanes and the scalar iterations give each element the same bits (LLVM alone
// lowers 8 and 4 lanes with rcpps's 12 bits and a scalar one as a division). False for other
// divisions.
bool precise_reciprocal(llvm::BinaryOperator* div, unsigned max_lanes) {
  if (div->getOpcode() != llvm::Instruction::FDiv || !div->hasAllowReciprocal()) return false;
  llvm::Type* t = div->getType();
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(t);
  if (!(vt ? vt->getElementType() : t)->isFloatTy()) return false;
  llvm::IRBuilder<> b(div);
  llvm::Value *n = div->getOperand(0), *d = div->getOperand(1);
  llvm::Value* e = rcp14(b, d, max_lanes);
  llvm::Value* q = b.CreateFMul(n, e);
  llvm::Value* rest = b.CreateIntrinsic(llvm::Intrinsic::fma, {t}, {b.CreateFNeg(d), q, n});
  llvm::Value* r = b.CreateIntrinsic(llvm::Intrinsic::fma, {t}, {rest, e, q});
  div->replaceAllUsesWith(r);
  div->eraseFromParent();
  return true;
}

}  // namespace

int rewrite_for_avx512(llvm::Module& m, unsigned vector_bits) {
  std::vector<llvm::Instruction*> candidates;
  for (llvm::Function& f : m)
    for (llvm::Instruction& i : llvm::instructions(f)) {
      auto* ii = llvm::dyn_cast<llvm::IntrinsicInst>(&i);
      if ((ii && ii->getIntrinsicID() == llvm::Intrinsic::masked_gather) ||
          i.getOpcode() == llvm::Instruction::FDiv)
        candidates.push_back(&i);
    }
  int rewritten = 0;
  for (llvm::Instruction* i : candidates) {
    if (auto* g = llvm::dyn_cast<llvm::IntrinsicInst>(i))
      rewritten += gather_to_permute(g);
    else
      rewritten += precise_reciprocal(llvm::cast<llvm::BinaryOperator>(i), vector_bits / 32);
  }
  return rewritten;
}

}  // namespace tc::backends::cpu
