// Building captured graphs by hand in backend tests: one op node on positional arguments.
#pragma once
#include <variant>

#include "tc/capture/graph.h"
#include "tc/ops.h"

namespace tc::backends::testing {

// Appends `op` on positional arguments: graph values (Ref) and constants (Value).
inline std::vector<capture::Ref> node(capture::Graph& g, Op op, std::vector<std::variant<capture::Ref, Value>> args) {
  using capture::NodeArg;
  using capture::Ref;
  Stack pos;
  for (auto& a : args) pos.push_back(std::holds_alternative<Ref>(a) ? Value(g.fake(std::get<Ref>(a))) : std::get<Value>(a));
  Stack bound = bind(op, pos, {});
  std::vector<NodeArg> nargs;
  for (size_t i = 0; i < bound.size(); i++)
    nargs.push_back(i < args.size() && std::holds_alternative<Ref>(args[i]) ? NodeArg::ref(std::get<Ref>(args[i]))
                                                                           : NodeArg::constant_of(bound[i]));
  return g.add_op(op, std::move(nargs), call(op, bound));
}

}  // namespace tc::backends::testing
