// with_cuda_graphs (cuda_graphs.h): per input signature, a warm-up call, a recording into a
// CUDA graph (tc::cuda::CudaGraph) over static input buffers, then replays with fresh outputs.
#include "cuda_graphs.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#ifdef TC_HAVE_CUDA
#include "tc/config.h"
#include "tc/cuda_graph.h"
#endif

namespace tc::backends {
namespace {

bool on_device(const Value& v, Device d) {
  if (v.is_tensor()) return v.tensor().device() == d;
  if (v.is_tensor_list()) {
    for (const Tensor& t : v.tensors())
      if (t.device() != d) return false;
  }
  return true;
}

const Value* const_arg(const capture::Node& n, const char* name) {
  const OpSchema& s = schema(n.op);
  for (size_t k = 0; k < s.args.size() && k < n.args.size(); k++)
    if (s.args[k].name == name && n.args[k].kind == capture::NodeArg::Kind::Const) return &n.args[k].constant;
  return nullptr;
}

// A random op draws new numbers per call; a graph would replay the recorded draw.
bool draws_random(const capture::Node& n) {
  if (n.op == Op::dropout) {
    const Value* p = const_arg(n, "p");
    const Value* training = const_arg(n, "training");
    return !(p && p->to_double() == 0) && !(training && !training->to_bool());
  }
  if (n.op == Op::scaled_dot_product_attention) {
    const Value* p = const_arg(n, "dropout_p");
    return !(p && p->to_double() == 0);
  }
  return schema(n.op).kind == OpKind::Random;
}

// Per input: whether an op of the graph writes into it (a mutated argument that is the input or
// a view of it). Only those are copied back after a replay that ran on a static copy.
std::vector<bool> written_inputs(const capture::Graph& g) {
  std::vector<int> input_of(g.nodes.size(), -1);
  for (size_t i = 0; i < g.inputs.size(); i++) input_of[size_t(g.inputs[i])] = int(i);
  std::vector<bool> w(g.inputs.size(), false);
  for (const capture::Node& n : g.nodes) {
    if (n.kind != capture::NodeKind::Op) continue;
    const OpSchema& s = schema(n.op);
    for (size_t k = 0; k < s.args.size() && k < n.args.size(); k++) {
      if (!s.args[k].mutated) continue;
      for (capture::Ref r : n.args[k].refs) {
        const int in = input_of[size_t(g.view_root(r))];
        if (in >= 0) w[size_t(in)] = true;
      }
    }
  }
  return w;
}

// Per input: whether the graph reads it (an op's argument or an output). The others (a p.grad
// that only a guard looks at) are never copied and may move freely.
std::vector<bool> read_inputs(const capture::Graph& g) {
  std::vector<int> input_of(g.nodes.size(), -1);
  for (size_t i = 0; i < g.inputs.size(); i++) input_of[size_t(g.inputs[i])] = int(i);
  std::vector<bool> r(g.inputs.size(), false);
  auto see = [&](capture::Ref ref) {
    if (input_of[size_t(ref.node)] >= 0) r[size_t(input_of[size_t(ref.node)])] = true;
  };
  for (const capture::Node& n : g.nodes)
    for (const capture::NodeArg& a : n.args)
      for (capture::Ref ref : a.refs) see(ref);
  for (capture::Ref ref : g.outputs) see(ref);
  return r;
}

std::string where(const capture::Graph& g) {
  for (const capture::Node& n : g.nodes)
    if (n.line >= 0) return "the graph at " + n.file + ":" + std::to_string(n.line);
  return "a graph";
}

}  // namespace

bool on_one_gpu(const capture::Graph& g) {
  if (g.inputs.empty()) return false;
  const Device d = g.nodes[g.inputs[0]].fakes[0].tensor().device();
  if (!d.is_cuda()) return false;
  for (const capture::Node& n : g.nodes)
    for (const Value& v : n.fakes)
      if (!on_device(v, d)) return false;
  return true;
}

std::string cuda_graphs_refusal(const capture::Graph& g) {
  for (const capture::Node& n : g.nodes) {
    if (n.kind == capture::NodeKind::External) return "it calls the Lua function " + n.ext->name;
    if (n.kind == capture::NodeKind::Op && draws_random(n))
      return std::string("it draws random numbers (") + op_name(n.op) + ")";
  }
  return "";
}

#ifdef TC_HAVE_CUDA
namespace {

// One input signature's graph.
struct Entry {
  std::vector<Shape> key;  // sizes then strides of each input
  bool warmed = false;
  bool rewarmed = false;                // a second warm-up call ran (inputs moved after the first)
  bool promoted = false;                // recorded again with copied inputs that kept still read in place
  bool plain = false;                   // recording abandoned: plain launches
  std::vector<void*> warm_ptr;          // each input's address in the warm-up call
  std::vector<bool> copy;               // per input: copied into a static buffer
  std::vector<Tensor> statics;          // those buffers (undefined: the input is read in place)
  std::vector<int> same;                // per copied input: an earlier input that is the same
                                        // tensor (one buffer, copied once), or -1
  bool share = true;                    // such inputs share a buffer (false once one stopped being the same)
  std::vector<void*> kept_ptr;          // the address recorded for inputs read in place
  std::vector<void*> last_ptr;          // each input's address in the last call since the recording
  std::unique_ptr<cuda::CudaGraph> graph;
  cuda::DeviceCheckDecoder raise;       // the graph's device checks, read after later calls (check_later)
  std::vector<Tensor> outputs;          // the graph's outputs (its pool's memory)
  struct Alias {                        // an output that views input `input`
    int input = -1;
    Shape sizes, strides;
    int64_t offset = 0;                 // relative to the input's offset
  };
  std::vector<Alias> alias;
  struct Span {                         // the bytes of one storage of the graph that outputs view
    std::shared_ptr<Storage> storage;
    size_t offset = 0, nbytes = 0;
  };
  std::vector<Span> spans;
  std::vector<int> span_of;             // per output: its span, -1 for aliases and fakes
  int64_t span_bytes = 0;               // of all spans
};

// Handed-out outputs of fewer bytes in all are copied out of the pool right after the replay
// (one kernel launch, on the device after the graph): in Lua a dropped result stays referenced
// until a collection, so small results are nearly always still held at the next call, and
// moving them then would put the same copy before that call's launch, on its critical path.
constexpr int64_t kHandOutBytes = int64_t(1) << 20;

struct State {
  capture::CompiledGraph run;
  int device = 0;
  std::vector<bool> written;  // per input: the graph writes into it (written_inputs)
  std::vector<bool> read;     // per input: the graph reads it (read_inputs)
  int max_sizes = 8;
  std::string name;
  std::shared_ptr<const std::vector<std::string>> lines;  // per node: "file:line", or empty
  std::vector<std::unique_ptr<Entry>> entries;
  bool warned_limit = false, warned_plain = false;
};

std::vector<Shape> key_of(capture::GraphInputs in) {
  std::vector<Shape> k;
  for (const Tensor* t : in) k.push_back(t->sizes()), k.push_back(t->strides());
  return k;
}

bool has_key(const Entry& e, capture::GraphInputs in) {  // key_of(in) == e.key, without copies
  if (e.key.size() != 2 * in.size()) return false;
  for (size_t i = 0; i < in.size(); i++)
    if (e.key[2 * i] != in[i]->sizes() || e.key[2 * i + 1] != in[i]->strides()) return false;
  return true;
}

// A plain tensor (no autograd state) over `storage`.
Tensor view_of(std::shared_ptr<Storage> storage, const Shape& sizes, const Shape& strides, int64_t offset, DType dt,
               Device d) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dt;
  impl->device = d;
  return Tensor(std::move(impl));
}

// The spans of e's outputs: per storage, the bytes from the first to the last of each group of
// outputs whose bytes overlap (a 64 KiB result of a graph whose outputs live in its memory plan's
// arena hands out 64 KiB). Outputs that share no byte are handed out over storages of their own,
// as an op's separate results are: a backward's gradients can then become .grad without a copy
// (the autograd engine takes a gradient over a storage no other tensor holds).
void plan_spans(Entry& e) {
  e.spans.clear();
  e.span_of.assign(e.outputs.size(), -1);
  e.span_bytes = 0;
  struct Range {
    size_t lo, hi;
    int output;
  };
  std::vector<std::pair<const Storage*, Range>> ranges;
  for (size_t i = 0; i < e.outputs.size(); i++) {
    const Tensor& o = e.outputs[i];
    if (e.alias[i].input >= 0 || !o.storage()) continue;
    size_t lo = size_t(o.offset()) * o.itemsize(), hi = lo;
    if (o.numel() > 0) {
      int64_t last = o.offset();
      for (int64_t d = 0; d < o.dim(); d++) last += (o.size(d) - 1) * o.stride(d);
      hi = size_t(last + 1) * o.itemsize();
    }
    lo &= ~size_t(15);  // 16-byte aligned: the move copies 16 bytes a thread; offsets stay whole for any dtype
    ranges.push_back({o.storage().get(), {lo, hi, int(i)}});
  }
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.lo < b.second.lo;
  });
  for (size_t k = 0; k < ranges.size(); k++) {
    const auto& [storage, r] = ranges[k];
    const Tensor& o = e.outputs[size_t(r.output)];
    Entry::Span* last = e.spans.empty() ? nullptr : &e.spans.back();
    const size_t end = last && last->storage.get() == storage ? last->offset + last->nbytes : 0;
    // (an empty output at the end of another's bytes joins it)
    if (last && last->storage.get() == storage && (r.lo < end || (r.hi == r.lo && r.lo <= end))) {
      last->nbytes = std::max(last->nbytes, r.hi - last->offset);
    } else {
      e.spans.push_back({o.storage(), r.lo, r.hi - r.lo});
    }
    e.span_of[size_t(r.output)] = int(e.spans.size()) - 1;
  }
  for (const Entry::Span& sp : e.spans) e.span_bytes += int64_t(sp.nbytes);
}

// This replay's results: the graph's outputs over its pool's memory, handed out without a copy
// (the next replay moves what is still referenced out of the pool: CudaGraph::hand_out; small
// ones are copied out at once, kHandOutBytes), views among them kept (outputs over one storage
// share one handed-out storage); an output that views an input is that view of the caller's input.
std::vector<Tensor> handed_outputs(Entry& e, capture::GraphInputs in) {
  std::vector<std::shared_ptr<Storage>> held(e.spans.size());
  for (size_t k = 0; k < e.spans.size(); k++) held[k] = e.graph->hand_out(e.spans[k].storage, e.spans[k].offset, e.spans[k].nbytes);
  std::vector<Tensor> out(e.outputs.size());
  for (size_t i = 0; i < e.outputs.size(); i++) {
    const Entry::Alias& al = e.alias[i];
    const Tensor& o = e.outputs[i];
    if (al.input >= 0) {
      const Tensor& base = *in[al.input];
      if (al.sizes == base.sizes() && al.strides == base.strides() && al.offset == 0) {
        out[i] = base;  // the input itself, as eager returns it
        continue;
      }
      out[i] = view_of(base.storage(), al.sizes, al.strides, base.offset() + al.offset, base.dtype(), base.device());
    } else if (e.span_of[i] < 0) {
      out[i] = o;
    } else {
      const Entry::Span& sp = e.spans[size_t(e.span_of[i])];
      out[i] = view_of(held[size_t(e.span_of[i])], o.sizes(), o.strides(), o.offset() - int64_t(sp.offset / o.itemsize()),
                       o.dtype(), o.device());
    }
  }
  if (e.span_bytes < kHandOutBytes) e.graph->move_out();
  return out;
}

void warn(State& st, bool& once, const std::string& msg) {
  if (once) return;
  once = true;
  std::fprintf(stderr, "tc warning: mode=\"reduce-overhead\": %s %s\n", st.name.c_str(), msg.c_str());
}

// Whether a and b are one view of one storage (what a copy into one static buffer may stand for).
bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
         a.strides() == b.strides();
}

// Replays e's graph (inputs in place), writes back the copied inputs the graph writes into.
std::vector<Tensor> replay(State& st, Entry& e, capture::GraphInputs in) {
  e.graph->replay();
  if (e.raise) {
    e.graph->check_later(e.raise);  // read when the host next meets the device (backends/cuda/README.md)
  } else if (e.graph->device_error()) {
    // a value check on the device failed (an index out of range ...) that only the op itself
    // can tell: the plain run raises the op's own error, as eager does
    return st.run(in);
  }
  for (size_t i = 0; i < in.size(); i++)
    if (st.written[i] && e.statics[i].defined()) Tensor(*in[i]).copy_from(e.statics[i]);
  return handed_outputs(e, in);
}

// The error of a device check that a replay flagged, read at a later call or synchronization:
// the op's own message, and the line of the op (the Lua error's line is where it surfaced).
cuda::DeviceCheckDecoder raise_later(const State& st, const cuda::DeviceCheckDecoder& decode) {
  return [decode, lines = st.lines, name = st.name](int64_t code, int64_t detail) {
    const char* when = ", checked on the device during an earlier mode=\"reduce-overhead\" call)";
    try {
      decode(code, detail);
    } catch (const capture::NodeError& e) {
      const std::string& at = e.node >= 0 && size_t(e.node) < lines->size() ? (*lines)[size_t(e.node)] : "";
      throw Error(e.kind(), std::string(e.what()) + " (" + (at.empty() ? "in " + name : "at " + at) + when);
    } catch (const Error& e) {  // an op run on its eager kernel outside a generated program: no node
      throw Error(e.kind(), std::string(e.what()) + " (in " + name + when);
    }
  };
}

// TC_DEBUG >= 1: what each replay moves besides the graph's own work (copies into static input
// buffers, back into written inputs; the outputs are handed out and moved out of the pool only
// while still referenced at the next replay), once per recording.
void report_recording(const State& st, const Entry& e, capture::GraphInputs in) {
  if (tc::debug_level() < 1) return;
  int copied = 0, back = 0;
  double copied_mb = 0, back_mb = 0;
  for (size_t i = 0; i < in.size(); i++) {
    if (!e.statics[i].defined() || e.same[i] >= 0) continue;
    const double mb = double(in[i]->numel() * in[i]->itemsize()) / (1 << 20);
    copied++, copied_mb += mb;
    if (st.written[i]) back++, back_mb += mb;
  }
  std::fprintf(stderr,
               "tc debug: reduce-overhead: %s recorded (%lld nodes): per call %d of %zu inputs copied in (%.1f MiB), "
               "%d written back (%.1f MiB), %zu outputs handed out (%.1f MiB; copied out of the pool %s)\n",
               st.name.c_str(), (long long)e.graph->nodes(), copied, in.size(), copied_mb, back, back_mb,
               e.outputs.size(), double(e.span_bytes) / (1 << 20),
               e.span_bytes < kHandOutBytes ? "right after each replay (small)" : "at the next replay if still referenced");
}

// Records e's graph on this call's inputs (dropping an earlier recording and its outputs first)
// and replays it once for this call's results.
std::vector<Tensor> record(State& st, Entry& e, capture::GraphInputs in) {
  e.graph.reset();
  e.outputs.clear();
  e.statics.assign(in.size(), Tensor());
  e.same.assign(in.size(), -1);
  e.kept_ptr.assign(in.size(), nullptr);
  e.last_ptr.clear();
  for (const Tensor* t : in) e.last_ptr.push_back(t->data_ptr());
  std::vector<const Tensor*> args(in.begin(), in.end());
  for (size_t i = 0; i < in.size(); i++) {
    if (!st.read[i]) continue;
    if (!e.copy[i] && in[i]->data_ptr() != e.warm_ptr[i]) e.copy[i] = true;
    if (!e.copy[i]) {
      e.kept_ptr[i] = in[i]->data_ptr();
      continue;
    }
    for (size_t j = 0; j < i && e.share; j++)
      if (e.statics[j].defined() && e.same[j] < 0 && same_tensor(*in[i], *in[j])) {
        e.same[i] = int(j);
        break;
      }
    if (e.same[i] >= 0) {
      e.statics[i] = e.statics[size_t(e.same[i])];
    } else {
      e.statics[i] = Tensor::empty_strided(in[i]->sizes(), in[i]->strides(), in[i]->dtype(), in[i]->device());
      e.statics[i].copy_from(*in[i]);
    }
    args[i] = &e.statics[i];
  }
  auto g = std::make_unique<cuda::CudaGraph>();
  std::vector<Tensor> outs;
  std::string why;
  if (!g->capture(st.device, [&] { outs = st.run(args); }, &why)) {
    e.plain = true;
    e.statics.clear();
    warn(st, st.warned_plain, "cannot be recorded as a CUDA graph (" + why + "): it runs without one");
    return st.run(in);
  }
  e.graph = std::move(g);
  e.raise = e.graph->decoder() ? raise_later(st, e.graph->decoder()) : nullptr;
  e.alias.assign(outs.size(), {});
  e.outputs.assign(outs.size(), Tensor());
  for (size_t i = 0; i < outs.size(); i++) {
    for (size_t k = 0; k < args.size() && outs[i].storage(); k++) {
      if (outs[i].storage() != args[k]->storage()) continue;
      e.alias[i] = {int(k), outs[i].sizes(), outs[i].strides(), outs[i].offset() - args[k]->offset()};
      break;
    }
    if (e.alias[i].input < 0) e.outputs[i] = std::move(outs[i]);  // views of inputs hold nothing
  }
  plan_spans(e);
  report_recording(st, e, in);
  return replay(st, e, in);
}

// The copied inputs into their static buffers: dense ones (contiguous, as their buffers) as byte
// ranges batched into few launches (an optimizer step's hundreds of gradients), others one by one.
void copy_in(const State& st, Entry& e, capture::GraphInputs in) {
  std::vector<cuda::InputCopy> dense;
  for (size_t i = 0; i < in.size(); i++) {
    if (!e.statics[i].defined() || e.same[i] >= 0) continue;
    const Tensor& t = *in[i];
    if (t.is_contiguous() && e.statics[i].is_contiguous() && t.dtype() == e.statics[i].dtype()) {
      dense.push_back({t.data_ptr(), e.statics[i].data_ptr(), size_t(t.numel() * t.itemsize())});
    } else {
      e.statics[i].copy_from(t);
      cuda::count_input_copy(t.numel() * t.itemsize());
    }
  }
  cuda::copy_inputs(st.device, dense);
}

// Whether every copied input came at the address of the last call again: they are read in place
// from now on (true: e is to be recorded again, once). An optimizer step's p.grad moves between
// its warm-ups and its recording (the backward that makes it records later), then stays where
// the backward's graph hands it out; inputs made fresh for each call rarely all come back.
bool promote_still_inputs(Entry& e, capture::GraphInputs in) {
  bool still = !e.promoted, any = false;
  for (size_t i = 0; i < in.size(); i++) {
    if (!e.statics[i].defined() || e.same[i] >= 0) continue;
    any = true;
    still = still && in[i]->data_ptr() == e.last_ptr[i];
  }
  for (size_t i = 0; i < in.size(); i++) e.last_ptr[i] = in[i]->data_ptr();
  if (!any || !still) return false;
  for (size_t i = 0; i < in.size(); i++) {  // (an input passed twice: both in place, as one tensor)
    if (!e.statics[i].defined()) continue;
    e.copy[i] = false;
    e.warm_ptr[i] = in[i]->data_ptr();
  }
  e.promoted = true;
  return true;
}

// Whether an input the graph reads is at another address than in the warm-up call.
bool moved_since_warm_up(const State& st, const Entry& e, capture::GraphInputs in) {
  for (size_t i = 0; i < in.size(); i++)
    if (st.read[i] && in[i]->data_ptr() != e.warm_ptr[i]) return true;
  return false;
}

std::vector<Tensor> call(State& st, capture::GraphInputs in) {
  cuda::raise_replay_errors(st.device, false);  // what earlier replays flagged, if the device got there
  Entry* e = nullptr;
  for (auto& x : st.entries)
    if (has_key(*x, in)) e = x.get();
  if (!e) {
    if (int(st.entries.size()) >= st.max_sizes) {
      warn(st, st.warned_limit,
           "has CUDA graphs for " + std::to_string(st.max_sizes) +
               " input sizes (tc.config.cudagraph_max_sizes): calls with other sizes run without one");
      return st.run(in);
    }
    st.entries.push_back(std::make_unique<Entry>());
    e = st.entries.back().get();
    e->key = key_of(in);
  }
  if (e->plain) return st.run(in);
  if (!e->warmed) {
    e->warmed = true;
    for (const Tensor* t : in) e->warm_ptr.push_back(t->data_ptr());
    e->copy.assign(in.size(), false);
    return st.run(in);
  }
  if (!e->graph) {
    if (!e->rewarmed && moved_since_warm_up(st, *e, in)) {
      // e.g. the saved activations a forward graph recorded since hands to this backward: over
      // that graph's pool now, where they stay from call to call, so they are read in place
      // (recorded at the next call) instead of copied into static buffers at every replay
      e->rewarmed = true;
      for (size_t i = 0; i < in.size(); i++) e->warm_ptr[i] = in[i]->data_ptr();
      return st.run(in);
    }
    return record(st, *e, in);
  }
  for (size_t i = 0; i < in.size(); i++) {
    if (e->same[i] >= 0 && !same_tensor(*in[i], *in[size_t(e->same[i])])) {
      // inputs that were one tensor are two now: record again with a buffer each
      e->share = false;
      return record(st, *e, in);
    }
    if (!st.read[i] || e->statics[i].defined()) continue;
    if (in[i]->data_ptr() == e->kept_ptr[i]) continue;
    // an input read in place moved: record again with it copied
    e->copy[i] = true;
    return record(st, *e, in);
  }
  if (promote_still_inputs(*e, in)) {
    return record(st, *e, in);
  }
  copy_in(st, *e, in);
  return replay(st, *e, in);
}

}  // namespace
#endif

Compiled with_cuda_graphs(Compiled c, const capture::Graph& g, const CompileOptions& o) {
  if (!on_one_gpu(g)) return c;
  const std::string refusal = cuda_graphs_refusal(g);
  if (!refusal.empty()) {
    c.report.perf_hints.push_back("mode=\"reduce-overhead\": " + where(g) + " runs without CUDA graphs: " + refusal);
    return c;
  }
#ifdef TC_HAVE_CUDA
  auto st = std::make_shared<State>();
  st->run = std::move(c.run);
  st->device = g.nodes[g.inputs[0]].fakes[0].tensor().device().index;
  st->written = written_inputs(g);
  st->read = read_inputs(g);
  st->max_sizes = std::max(0, o.cudagraph_max_sizes);
  st->name = where(g);
  auto lines = std::make_shared<std::vector<std::string>>();
  for (const capture::Node& n : g.nodes) lines->push_back(n.line >= 0 ? n.file + ":" + std::to_string(n.line) : "");
  st->lines = std::move(lines);
  c.run = [st](capture::GraphInputs in) { return call(*st, in); };
#else
  (void)o;
  c.report.perf_hints.push_back("mode=\"reduce-overhead\": " + where(g) + " runs without CUDA graphs: tc was built without CUDA");
#endif
  return c;
}

}  // namespace tc::backends
