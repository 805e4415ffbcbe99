// Meta rules and CPU kernels of the "linalg" group of ops.def (being written).
#include "tc/ops.h"

namespace tc {

Metas meta_linalg(Op op, const Stack& args) {
  TC_FAIL(NotImplementedError, "%s() is not implemented yet", op_name(op));
}

Stack cpu_linalg(Op op, const Stack& args, const Metas& out) {
  TC_FAIL(NotImplementedError, "%s() is not implemented yet", op_name(op));
}

}  // namespace tc
