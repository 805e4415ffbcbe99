// The eager backend: a flat launch list made once from the graph; running it binds each node's
// arguments from earlier results and calls the op's eager kernel.
#include "eager.h"

#include <memory>

namespace tc::backends {
namespace {

struct Plan {
  struct Step {
    Op op;
    std::shared_ptr<const capture::ExternalFn> ext;  // set: a call of an external function
    std::vector<capture::NodeArg> args;
    int node;
  };
  int num_nodes = 0;
  std::vector<int> inputs;  // node index of each input
  std::vector<Step> steps;
  std::vector<capture::Ref> outputs;
};

const Tensor& lookup(const std::vector<Stack>& vals, capture::Ref r) {
  const Value& v = vals[r.node][r.out];
  return r.elem >= 0 ? v.tensors()[r.elem] : v.tensor();
}

}  // namespace

Compiled EagerBackend::compile(const capture::Graph& g, const CompileOptions&) const {
  auto plan = std::make_shared<Plan>();
  plan->num_nodes = int(g.nodes.size());
  plan->inputs = g.inputs;
  for (int i = 0; i < int(g.nodes.size()); i++) {
    const capture::Node& n = g.nodes[i];
    if (n.kind != capture::NodeKind::Input) plan->steps.push_back({n.op, n.ext, n.args, i});
  }
  plan->outputs = g.outputs;
  return {[plan](capture::GraphInputs inputs) {
    std::vector<Stack> vals(plan->num_nodes);
    for (size_t i = 0; i < inputs.size(); i++) vals[plan->inputs[i]].push_back(*inputs[i]);
    Stack args;
    for (const Plan::Step& s : plan->steps) {
      args.clear();
      for (const capture::NodeArg& a : s.args) {
        switch (a.kind) {
          case capture::NodeArg::Kind::Const:
            args.push_back(a.constant);
            break;
          case capture::NodeArg::Kind::Ref:
            args.push_back(lookup(vals, a.refs[0]));
            break;
          case capture::NodeArg::Kind::RefList: {
            TensorList l;
            for (capture::Ref r : a.refs) l.push_back(lookup(vals, r));
            args.push_back(std::move(l));
            break;
          }
        }
      }
      try {
        if (s.ext) {
          std::vector<Tensor> r = s.ext->call(args);
          vals[s.node].assign(r.begin(), r.end());
        } else {
          vals[s.node] = call(s.op, args);
        }
      } catch (const capture::NodeError&) {
        throw;
      } catch (const Error& e) {
        throw capture::NodeError(e, s.node);  // capture names the node's user line
      }
    }
    std::vector<Tensor> out;
    out.reserve(plan->outputs.size());
    for (capture::Ref r : plan->outputs) out.push_back(lookup(vals, r));
    return out;
  }, {}};
}

}  // namespace tc::backends
