#include "compiler/explain.h"

#include <chrono>
#include <map>
#include <set>

#include "util/strings.h"

namespace kiln {
namespace {

std::string quote(const std::string& s) {
  std::string one_line = s.size() > 200 ? s.substr(0, 200) + "..." : s;
  return "'" + one_line + "'";
}

// "'A' in the entry, 'B' now", starting both near where they first differ when they share
// a long prefix (long flag lists differ at their ends).
std::string contrast(const std::string& entry, const std::string& here) {
  size_t common = 0;
  while (common < entry.size() && common < here.size() && entry[common] == here[common]) ++common;
  size_t from = common > 40 ? common - 20 : 0;
  std::string lead = from > 0 ? "..." : "";
  return "'" + lead + quote(entry.substr(from)).substr(1) + " in the entry, '" + lead +
         quote(here.substr(from)).substr(1) + " now";
}

// A node line of graph_signature: "node ID OP PROPS v=VER in=REFS out=TYPES".
struct NodeLine {
  std::string id, op, props, version, inputs, outputs;
};

bool parse_node_line(const std::string& line, NodeLine& n) {
  if (line.rfind("node ", 0) != 0) return false;
  auto v = line.rfind(" v=");
  auto in = line.rfind(" in=");
  auto out = line.rfind(" out=");
  auto sp1 = line.find(' ', 5);
  auto sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (v == std::string::npos || in == std::string::npos || out == std::string::npos ||
      sp2 == std::string::npos || !(sp2 <= v && v < in && in < out)) {
    return false;
  }
  n.id = line.substr(5, sp1 - 5);
  n.op = line.substr(sp1 + 1, sp2 - sp1 - 1);
  n.props = line.substr(sp2 + 1, v - sp2 - 1);
  n.version = line.substr(v + 3, in - v - 3);
  n.inputs = line.substr(in + 4, out - in - 4);
  n.outputs = line.substr(out + 5);
  return true;
}

std::string describe_line_change(const std::string& here, const std::string& entry) {
  NodeLine a, b;
  if (parse_node_line(here, a) && parse_node_line(entry, b) && a.id == b.id) {
    std::string where = "node " + a.id + " (" + a.op + ")";
    if (a.op != b.op) return where + ": op " + b.op + " in the entry";
    std::vector<std::string> parts;
    if (a.version != b.version)
      parts.push_back("cache_version " + b.version + " in the entry, " + a.version + " now");
    if (a.props != b.props)
      parts.push_back("props " + b.props + " in the entry, " + a.props + " now");
    if (a.inputs != b.inputs)
      parts.push_back("inputs " + b.inputs + " in the entry, " + a.inputs + " now");
    if (a.outputs != b.outputs)
      parts.push_back("outputs " + b.outputs + " in the entry, " + a.outputs + " now");
    return where + ": " + join(parts, "; ");
  }
  return contrast(entry, here);
}

std::vector<std::string> graph_differences(const std::string& here, const std::string& entry) {
  auto a = split_lines(here), b = split_lines(entry);
  std::vector<std::string> out;
  if (a.size() != b.size()) {
    out.push_back("graph: " + std::to_string(b.size()) + " signature lines in the entry, " +
                  std::to_string(a.size()) + " now");
  }
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) out.push_back("graph: " + describe_line_change(a[i], b[i]));
  }
  return out;
}

std::string age(double created) {
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double s = now - created;
  if (s < 120) return std::to_string(static_cast<int>(s)) + " s ago";
  if (s < 7200) return std::to_string(static_cast<int>(s / 60)) + " min ago";
  if (s < 172800) return std::to_string(static_cast<int>(s / 3600)) + " h ago";
  return std::to_string(static_cast<int>(s / 86400)) + " days ago";
}

}  // namespace

std::vector<std::string> component_differences(const KeyComponents& here,
                                               const KeyComponents& entry) {
  std::map<std::string, std::string> theirs(entry.begin(), entry.end());
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& [name, value] : here) {
    seen.insert(name);
    auto it = theirs.find(name);
    if (it == theirs.end()) {
      out.push_back(name + ": not in the entry");
    } else if (it->second != value) {
      if (name == "graph") {
        auto g = graph_differences(value, it->second);
        out.insert(out.end(), g.begin(), g.end());
      } else if (name.rfind(kOpLibraryComponent, 0) == 0) {
        out.push_back(name + ": the library file changed (" + contrast(it->second, value) +
                      "); modules using its ops are compiled again");
      } else if (name == "codegen") {
        out.push_back(
            "codegen: the code generators differ (a kiln build whose ops/, rewrite/, "
            "linker or preludes changed): " +
            contrast(it->second, value));
      } else {
        out.push_back(name + ": " + contrast(it->second, value));
      }
    }
  }
  for (const auto& [name, value] : entry) {
    if (!seen.count(name)) out.push_back(name + ": only in the entry");
  }
  return out;
}

std::string explain_miss(CacheStore& store, const ModuleKey& key, const std::string& label) {
  std::vector<IndexRow> candidates = store.with_family(key.family);
  for (auto& r : store.with_label(label)) candidates.push_back(r);
  std::string best_key;
  std::vector<std::string> best;
  double best_created = 0;
  std::set<std::string> seen;
  for (const auto& row : candidates) {
    if (row.key == key.key || !seen.insert(row.key).second) continue;
    auto meta = store.read_meta(row.key);
    if (!meta) continue;
    auto diffs = component_differences(key.components, meta->components);
    if (best_key.empty() || diffs.size() < best.size()) {
      best_key = row.key;
      best = std::move(diffs);
      best_created = meta->created;
    }
  }
  if (best_key.empty()) {
    return "cache miss: no entry for this graph (same structure or model name '" + label +
           "') in " + store.root().string();
  }
  std::string out = "cache miss: nearest entry " + best_key.substr(0, 16) + " (model '" + label +
                    "', compiled " + age(best_created) + ") differs in:";
  for (const auto& d : best) out += "\n  " + d;
  return out;
}

}  // namespace kiln
