// LLJIT for the host: an IRTransformLayer running the new pass manager's O3 pipeline built from
// the host TargetMachine (loop and SLP vectorization on), a compile layer whose ObjectCache hook
// hands each module's object code back for the disk cache, and the process's own symbols (libm:
// expm1f, erff, tanhf, fmodf ...) resolvable from generated code. LLVM reports errors as
// llvm::Error; they become tc::Error (CompileError) here and never cross an LLVM callback.
#include "jit.h"

#include <llvm/Analysis/TargetTransformInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/IRTransformLayer.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>

#include "avx512_rewrites.h"
#include "tc/error.h"

namespace tc::backends::cpu {

// Bumped whenever generated code changes for the same loop IR (invalidates disk caches).
constexpr int kCodegenVersion = 15;

namespace {

std::string message(llvm::Error e) {
  std::string s;
  llvm::handleAllErrors(std::move(e), [&](const llvm::ErrorInfoBase& info) { s += info.message(); });
  return s;
}

template <typename T>
T take(llvm::Expected<T> v, const char* what) {
  if (!v) TC_FAIL(CompileError, "cpu backend: %s: %s", what, message(v.takeError()).c_str());
  return std::move(*v);
}

void check(llvm::Error e, const char* what) {
  if (e) TC_FAIL(CompileError, "cpu backend: %s: %s", what, message(std::move(e)).c_str());
}

// Receives the object code of each module the compile layer builds.
class CaptureObjects : public llvm::ObjectCache {
 public:
  void notifyObjectCompiled(const llvm::Module*, llvm::MemoryBufferRef obj) override { last = obj.getBuffer().str(); }
  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module*) override { return nullptr; }
  std::string last;
};

}  // namespace

struct Jit::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> tm;  // the optimizer's cost model and the code generator
  std::string cpu, features;
  CaptureObjects objects;

  // Divisions marked `arcp` (scalar_math's div_finite: sigmoid, tanh) become a reciprocal estimate
  // and one Newton step; that holds their 3 ulp with AVX-512's 14-bit vrcp14ps (sigmoid 2.4 ulp,
  // tanh 1.9 over every 97th float32), not with AVX2's or SSE's 12-bit rcpps (3.0 and 2.9 at
  // -mcpu=haswell, 4.0 and 2.9 on plain x86-64), so other x86 hosts divide.
  void set_target_attributes(llvm::Module& m) const {
    const bool rcp14 = ("," + features + ",").find(",+avx512f,") != std::string::npos;
    for (llvm::Function& f : m) {
      if (f.isDeclaration()) continue;
      f.addFnAttr("target-cpu", cpu);
      f.addFnAttr("target-features", features);
      if (!rcp14) f.addFnAttr("reciprocal-estimates", "!divf,!vec-divf");
    }
  }

  void optimize(llvm::Module& m) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    pto.SLPVectorization = true;  // off by default in PipelineTuningOptions
    pto.LoopUnrolling = true;
    llvm::PassBuilder pb(tm.get(), pto);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
    if (m.getModuleFlag(kAvx512Flag)) rewrite_for_avx512(m, vector_bits(m));
  }

  // The vector register width the optimizer's cost model used for `m`'s functions (all share the
  // host's attributes): 512 on AVX-512 hosts, 256 where the CPU's tuning prefers 256-bit vectors
  // (LLVM's prefer-256-bit: Skylake-X through Sapphire Rapids and Rocket Lake; not Zen 4/5).
  unsigned vector_bits(llvm::Module& m) const {
    for (llvm::Function& f : m)
      if (!f.isDeclaration())
        return (unsigned)tm->getTargetTransformInfo(f)
            .getRegisterBitWidth(llvm::TargetTransformInfo::RGK_FixedWidthVector)
            .getFixedValue();
    return 512;
  }

  // avx512_rewrites.h, for AVX-512's 16-lane vpermd and VL's 8-lane vpermt2d and vrcp14ps.
  bool avx512() const {
    const std::string f = "," + features + ",";
    return f.find(",+avx512f,") != std::string::npos && f.find(",+avx512vl,") != std::string::npos;
  }
};

Jit& Jit::get() {
  static Jit* jit = new Jit;  // never destroyed: compiled code may run until exit
  return *jit;
}

Jit::Jit() : impl_(std::make_unique<Impl>()) {
  static bool ok = [] {
    return !llvm::InitializeNativeTarget() && !llvm::InitializeNativeTargetAsmPrinter();
  }();
  TC_CHECK(ok, CompileError, "cpu backend: LLVM has no target for this host");
  auto jtmb = take(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  // The small code model, position-independent: a loop's constants are rip-relative operands
  // (JITLink places an object's sections in one allocation, and reaches process symbols through
  // the GOT and stubs it makes). The large model (detectHost's) loaded each constant's address
  // with a movabs, 14 of them in the 10-op chain's loop (spilled and reloaded): 4 % slower in cache.
  jtmb.setCodeModel(llvm::CodeModel::Small);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  impl_->cpu = jtmb.getCPU();
  impl_->features = jtmb.getFeatures().getString();
  impl_->tm = take(jtmb.createTargetMachine(), "creating the target machine");
  Impl* impl = impl_.get();
  impl_->jit = take(
      llvm::orc::LLJITBuilder()
          .setJITTargetMachineBuilder(jtmb)
          // The optimizer's TargetMachine also generates code: one X86 subtarget (lowering tables,
          // legalizer, instruction info) built per process instead of two.
          .setCompileFunctionCreator(
              [impl](llvm::orc::JITTargetMachineBuilder)
                  -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                return std::make_unique<llvm::orc::SimpleCompiler>(*impl->tm, &impl->objects);
              })
          .create(),
      "creating the JIT");
  llvm::orc::LLJIT& j = *impl_->jit;
  j.getMainJITDylib().addGenerator(take(
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(j.getDataLayout().getGlobalPrefix()),
      "making process symbols visible"));
  j.getIRTransformLayer().setTransform(
      [impl](llvm::orc::ThreadSafeModule tsm,
             llvm::orc::MaterializationResponsibility&) -> llvm::Expected<llvm::orc::ThreadSafeModule> {
        tsm.withModuleDo([impl](llvm::Module& m) { impl->optimize(m); });
        return std::move(tsm);
      });
  target_id_ = std::string("tc ") + TC_VERSION + " codegen " + std::to_string(kCodegenVersion) + " llvm " +
               LLVM_VERSION_STRING + " cpu " + impl_->cpu + " " + impl_->features;
}

void Jit::prepare(llvm::Module& m) const {
  m.setDataLayout(impl_->jit->getDataLayout());
  m.setTargetTriple(impl_->jit->getTargetTriple().str());
  if (impl_->avx512()) m.addModuleFlag(llvm::Module::Error, kAvx512Flag, 1);
}

std::string Jit::compile(std::unique_ptr<llvm::Module> m, std::unique_ptr<llvm::LLVMContext> ctx) {
  impl_->set_target_attributes(*m);
  std::vector<std::string> exported;
  for (llvm::Function& f : *m)
    if (!f.isDeclaration() && f.hasExternalLinkage()) exported.push_back(f.getName().str());
  impl_->objects.last.clear();
  llvm::orc::LLJIT& j = *impl_->jit;
  check(j.addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))), "adding a module");
  // One lookup materializes the whole module (one compile, one object).
  llvm::orc::SymbolLookupSet names;
  for (const std::string& s : exported) names.add(j.mangleAndIntern(s));
  take(j.getExecutionSession().lookup(llvm::orc::makeJITDylibSearchOrder(&j.getMainJITDylib()), std::move(names)),
       "compiling a module");
  return std::move(impl_->objects.last);
}

void Jit::add_object(const std::string& object) {
  check(impl_->jit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, "tc-cached-kernels")),
        "loading cached kernels");
}

void* Jit::lookup(const std::string& symbol) {
  return take(impl_->jit->lookup(symbol), "looking up a kernel").toPtr<void*>();
}

std::string Jit::compile_object(std::unique_ptr<llvm::Module> m) {
  impl_->set_target_attributes(*m);
  impl_->optimize(*m);
  llvm::orc::SimpleCompiler compiler(*impl_->tm);
  std::unique_ptr<llvm::MemoryBuffer> obj = take(compiler(*m), "compiling a package's kernels");
  return obj->getBuffer().str();
}

const std::string& Jit::cpu_name() const { return impl_->cpu; }
const std::string& Jit::cpu_features() const { return impl_->features; }

}  // namespace tc::backends::cpu
