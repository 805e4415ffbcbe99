// Table gathers as permutes, reciprocal estimates of 8 or 4 lanes as vrcp14ps, scalar ones as
// divisions (avx512_rewrites.h).
#include "avx512_rewrites.h"

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

// n / d with `arcp` on 8 or 4 floats as LLVM lowers 16: e = vrcp14ps(d), q = n e, q + e (n - d q);
// on one float the division itself. False for other divisions.
bool precise_reciprocal(llvm::BinaryOperator* div) {
  if (div->getOpcode() != llvm::Instruction::FDiv || !div->hasAllowReciprocal()) return false;
  llvm::Type* t = div->getType();
  if (t->isFloatTy()) {
    div->setHasAllowReciprocal(false);
    return true;
  }
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(t);
  if (!vt || !vt->getElementType()->isFloatTy() ||
      (vt->getNumElements() != 8 && vt->getNumElements() != 4))
    return false;
  llvm::IRBuilder<> b(div);
  llvm::Value *n = div->getOperand(0), *d = div->getOperand(1);
  const llvm::Intrinsic::ID rcp14 = vt->getNumElements() == 8
                                        ? llvm::Intrinsic::x86_avx512_rcp14_ps_256
                                        : llvm::Intrinsic::x86_avx512_rcp14_ps_128;
  llvm::Value* e =
      b.CreateIntrinsic(rcp14, {}, {d, llvm::Constant::getNullValue(vt), b.getInt8(0xff)});
  llvm::Value* q = b.CreateFMul(n, e);
  llvm::Value* rest = b.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {b.CreateFNeg(d), q, n});
  llvm::Value* r = b.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {rest, e, q});
  div->replaceAllUsesWith(r);
  div->eraseFromParent();
  return true;
}

}  // namespace

int rewrite_for_avx512(llvm::Module& m) {
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
      rewritten += precise_reciprocal(llvm::cast<llvm::BinaryOperator>(i));
  }
  return rewritten;
}

}  // namespace tc::backends::cpu
