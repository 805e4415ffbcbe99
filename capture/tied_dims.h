// specialize_tied_dims: dynamic = true makes every input dim dynamic; a dim some op ties to a fixed
// size is made static again, as torch specializes it (tied_dims.cpp).
#pragma once
#include "entry.h"

namespace tc::capture {

void specialize_tied_dims(Entry& e);

}  // namespace tc::capture
