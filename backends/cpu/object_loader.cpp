// Object code linked with JITLink, for AOT packages (object_loader.h).
#include "object_loader.h"

#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutorProcessControl.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/xxhash.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/SubtargetFeature.h>

#include <map>

#include "tc/error.h"

namespace tc::backends::cpu {

namespace {

void check(llvm::Error e, const char* what) {
  if (!e) return;
  std::string s;
  llvm::handleAllErrors(std::move(e), [&](const llvm::ErrorInfoBase& info) { s += info.message(); });
  TC_FAIL(CompileError, "loading a package's kernels: %s: %s", what, s.c_str());
}

}  // namespace

struct ObjectLoader::Impl {
  std::unique_ptr<llvm::orc::ExecutionSession> session;
  std::unique_ptr<llvm::orc::ObjectLinkingLayer> linker;
  // Objects linked so far, by content hash: the object and its library.
  std::multimap<uint64_t, std::pair<std::string, llvm::orc::JITDylib*>> libraries;
};

ObjectLoader& ObjectLoader::get() {
  static ObjectLoader* loader = new ObjectLoader;  // never destroyed: loaded code may run until exit
  return *loader;
}

ObjectLoader::ObjectLoader() : impl_(std::make_unique<Impl>()) {
  auto epc = llvm::orc::SelfExecutorProcessControl::Create();
  if (!epc) check(epc.takeError(), "setting up in-process linking");
  impl_->session = std::make_unique<llvm::orc::ExecutionSession>(std::move(*epc));
  impl_->linker = std::make_unique<llvm::orc::ObjectLinkingLayer>(*impl_->session);
}

void* ObjectLoader::load_library(const std::string& object) {
  const uint64_t h = llvm::xxh3_64bits(llvm::StringRef(object));
  auto [lo, hi] = impl_->libraries.equal_range(h);
  for (auto it = lo; it != hi; ++it)
    if (it->second.first == object) return it->second.second;
  llvm::orc::ExecutionSession& es = *impl_->session;
  llvm::orc::JITDylib& jd = es.createBareJITDylib("tc-package-" + std::to_string(impl_->libraries.size()));
  const char prefix = es.getExecutorProcessControl().getTargetTriple().isOSBinFormatMachO() ? '_' : '\0';
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix);
  if (!process) check(process.takeError(), "making process symbols visible");
  jd.addGenerator(std::move(*process));
  check(impl_->linker->add(jd, llvm::MemoryBuffer::getMemBufferCopy(object, "tc-package-kernels")),
        "linking the object");
  impl_->libraries.emplace(h, std::make_pair(object, &jd));
  return &jd;
}

void* ObjectLoader::lookup(void* library, const std::string& symbol) {
  llvm::orc::ExecutionSession& es = *impl_->session;
  auto& jd = *static_cast<llvm::orc::JITDylib*>(library);
  auto sym = es.lookup({&jd}, es.intern(symbol));
  if (!sym) check(sym.takeError(), ("looking up " + symbol).c_str());
  return sym->getAddress().toPtr<void*>();
}

std::string host_cpu_name() { return llvm::sys::getHostCPUName().str(); }

std::string host_cpu_features() {
  llvm::SubtargetFeatures features;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) features.AddFeature(f.first(), f.second);
  return features.getString();
}

}  // namespace tc::backends::cpu
