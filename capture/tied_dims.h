// specialize_tied_dims: dynamic = true makes every input dim dynamic; a dim some op ties to a fixed
// size is made static again, as torch specializes it (tied_dims.cpp).
#pragma once
#include "entry.h"

namespace tc::capture {

void specialize_tied_dims(Entry& e);
// Dims the user marked dynamic (tc.compiler.mark_dynamic: (graph input, dim), named names[k]) that
// an op ties to a fixed size: a CompileError naming that op's line (torch's constraint violation),
// never a silent specialization.
void check_marked_dims(const Entry& e, const std::vector<std::pair<int, int>>& marked,
                       const std::vector<std::string>& names);

}  // namespace tc::capture
