// The guard listing of explain and TC_LOGS=guards: one line per guard, grouped by the root of
// its source (arguments, upvalues, classes ...), and the identical guards of repeated layers
// folded into one line with a count:
//   TENSOR_MATCH: m.layers[1..64].linear1.weight float32[10, 10] on cpu, requires_grad (x64)
#include <algorithm>
#include <map>

#include "guards.h"

namespace tc::capture {

namespace {

struct Parsed {
  std::string kind, pattern, expected;  // pattern: the source with every [N] as [#]
  std::vector<int64_t> index;           // the N of each [N], in order
};

Parsed parse(const std::string& kind, const std::string& source, const std::string& expected) {
  Parsed p{kind, "", expected, {}};
  for (size_t i = 0; i < source.size(); i++) {
    if (source[i] == '[' && i + 1 < source.size() && isdigit((unsigned char)source[i + 1])) {
      size_t j = i + 1;
      while (j < source.size() && isdigit((unsigned char)source[j])) j++;
      if (j < source.size() && source[j] == ']') {
        p.index.push_back(std::stoll(source.substr(i + 1, j - i - 1)));
        p.pattern += "[#]";
        i = j;
        continue;
      }
    }
    p.pattern += source[i];
  }
  return p;
}

// "1..64" for a run, "1, 3, 7" otherwise.
std::string range_text(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  if (v.size() > 1 && v.back() - v.front() + 1 == int64_t(v.size()))
    return std::to_string(v.front()) + ".." + std::to_string(v.back());
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// The source of a group: each [#] filled with its value, or the range of values where they vary.
std::string fill(const std::string& pattern, const std::vector<const Parsed*>& members) {
  std::string out;
  size_t pos = 0, slot = 0;
  for (size_t at; (at = pattern.find("[#]", pos)) != std::string::npos; pos = at + 3, slot++) {
    std::vector<int64_t> values;
    for (const Parsed* m : members) values.push_back(m->index[slot]);
    out += pattern.substr(pos, at - pos) + "[" + range_text(values) + "]";
  }
  return out + pattern.substr(pos);
}

// The root a source is grouped under: "m" for m.layers[3].weight and getmetatable(m.linear).
std::string root_of(const std::string& source) {
  std::string s = source;
  while (s.rfind("getmetatable(", 0) == 0) s = s.substr(13);
  const size_t cut = s.find_first_of(".[(");
  return s[0] == '<' ? s.substr(0, s.find('>') + 1) : s.substr(0, cut);
}

}  // namespace

std::vector<std::string> guard_listing(const std::vector<GuardText>& guards) {
  std::vector<Parsed> parsed;
  for (const GuardText& g : guards) parsed.push_back(parse(g.kind, g.source, g.expected));
  // groups of guards that differ only in the indices of their sources, in order of appearance
  std::map<std::string, int> group_of;
  std::vector<std::vector<const Parsed*>> groups;
  for (const Parsed& p : parsed) {
    const std::string key = p.kind + '\x1f' + p.pattern + '\x1f' + p.expected;
    auto [it, fresh] = group_of.try_emplace(key, int(groups.size()));
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(&p);
  }
  struct Line {
    std::string root, text;
  };
  std::vector<Line> lines;
  for (const auto& members : groups) {
    const Parsed& first = *members[0];
    // fold only a full grid of index values (64 layers x 2 linears), else list each guard
    size_t grid = 1;
    for (size_t slot = 0; slot < first.index.size(); slot++) {
      std::vector<int64_t> v;
      for (const Parsed* m : members) v.push_back(m->index[slot]);
      std::sort(v.begin(), v.end());
      grid *= size_t(std::unique(v.begin(), v.end()) - v.begin());
    }
    std::vector<std::vector<const Parsed*>> shown;
    if (grid == members.size())
      shown.push_back(members);
    else
      for (const Parsed* m : members) shown.push_back({m});
    for (const auto& part : shown) {
      const std::string source = fill(first.pattern, part);
      std::string text = first.kind + ": " + (source.empty() ? "" : source + " ") + first.expected;
      if (part.size() > 1) text += " (x" + std::to_string(part.size()) + ")";
      lines.push_back({source.empty() ? "" : root_of(source), std::move(text)});
    }
  }
  // grouped by root, roots in order of first appearance
  std::map<std::string, int> root_order;
  for (const Line& l : lines) root_order.try_emplace(l.root, int(root_order.size()));
  std::stable_sort(lines.begin(), lines.end(), [&](const Line& a, const Line& b) {
    return root_order[a.root] < root_order[b.root];
  });
  std::vector<std::string> out;
  for (Line& l : lines) out.push_back(std::move(l.text));
  return out;
}

}  // namespace tc::capture
