// The part of a graph some of its slots need: nodes nobody reads are dropped, and a scan, nmap or
// map keeps only the results that are read (a scan all its carries), its body pruned to match.
#include <algorithm>
#include <set>

#include "tenax/autodiff/scan_cache.h"
#include "tenax/model/definition.h"

namespace tenax::model_detail {
namespace {

// Slots `g` reads that it does not define itself (what a body captures from outside).
std::vector<int> outer_reads(const Graph& g) {
  std::set<int> defined(g.params.begin(), g.params.end()), reads;
  for (const Node& n : g.nodes) {
    for (const std::vector<int>* v : {&n.inputs, &n.init, &n.xs})
      for (int s : *v)
        if (!defined.count(s)) reads.insert(s);
    if (n.body)
      for (int s : n.body->captures)
        if (!defined.count(s)) reads.insert(s);
    defined.insert(n.outputs.begin(), n.outputs.end());
  }
  for (int s : g.results)
    if (!defined.count(s)) reads.insert(s);
  return {reads.begin(), reads.end()};
}

// A copy of `n` with outputs `keep` (indices into n.outputs) and, for control flow, its body
// pruned to the matching results; a fresh scan cache (a pruned step is another program).
Node kept(const Node& n, const std::vector<size_t>& keep) {
  Node out;
  out.pointer = n.pointer;
  out.label = n.label;
  out.kind = n.kind;
  out.op = n.op;
  out.attrs = n.attrs;
  out.all_axes = n.all_axes;
  out.sized = n.sized;
  out.inputs = n.inputs;
  out.init = n.init;
  out.xs = n.xs;
  out.over = n.over;
  out.scan_options = n.scan_options;
  out.map_options = n.map_options;
  for (size_t k : keep) out.outputs.push_back(n.outputs[k]);
  if (n.body) {
    std::vector<int> results;
    for (size_t k : keep) results.push_back(n.body->results[k]);
    Graph body = pruned(*n.body, results);
    body.results = results;
    body.captures = outer_reads(body);
    out.body = std::make_unique<Graph>(std::move(body));
  }
  if (n.scan_cache) out.scan_cache = std::make_shared<detail::ScanCache>();
  return out;
}

}  // namespace

Graph pruned(const Graph& g, const std::vector<int>& needed) {
  std::set<int> live(needed.begin(), needed.end());
  std::vector<Node> nodes;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    const Node& n = *it;
    std::vector<size_t> keep;
    const size_t n_carry = n.kind == NodeKind::scan ? n.init.size() : 0;
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (k < n_carry || live.count(n.outputs[k])) keep.push_back(k);
    if (keep.size() == n_carry && (n_carry == 0 || !std::any_of(n.outputs.begin(), n.outputs.begin() + long(n_carry),
                                                                 [&](int s) { return live.count(s) > 0; })))
      continue;  // nothing it computes is read
    nodes.push_back(kept(n, keep));
    const Node& k = nodes.back();
    for (const std::vector<int>* v : {&k.inputs, &k.init, &k.xs}) live.insert(v->begin(), v->end());
    if (k.body) live.insert(k.body->captures.begin(), k.body->captures.end());
  }
  Graph out;
  out.params = g.params;
  out.captures = g.captures;
  out.results = g.results;
  out.nodes.assign(std::make_move_iterator(nodes.rbegin()), std::make_move_iterator(nodes.rend()));
  return out;
}

}  // namespace tenax::model_detail
