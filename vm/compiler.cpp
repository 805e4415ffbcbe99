// tc::vm::install_compiler (tc/vm/compiler.h): capture with the backends' graph compiler and the
// ahead-of-time binding, as tcrun installs them. Built into tc_embed, not tc_vm: it depends on
// every library above the vm (DESIGN.md §1).
#include "tc/vm/compiler.h"

#include "tc/aot_lua.h"
#include "tc/backends.h"
#include "tc/capture.h"

namespace tc::vm {

void install_compiler(Runtime& rt) {
  tc::capture::install(rt.state(), tc::backends::graph_compiler());  // tc.compile, tc.compiler
  tc::aot::install(rt.state());                                      // tc.export, tc.aot
}

}  // namespace tc::vm
