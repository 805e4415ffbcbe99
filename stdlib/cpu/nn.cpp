// Meta rules and CPU kernels of the "nn" group of ops.def (being written).
#include "tc/ops.h"

namespace tc {

Metas meta_nn(Op op, const Stack& args) {
  TC_FAIL(NotImplementedError, "%s() is not implemented yet", op_name(op));
}

Stack cpu_nn(Op op, const Stack& args, const Metas& out) {
  TC_FAIL(NotImplementedError, "%s() is not implemented yet", op_name(op));
}

}  // namespace tc
