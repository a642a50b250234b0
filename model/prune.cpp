// The part of a graph some of its slots need: nodes nobody reads are dropped, and a scan, nmap or
// map keeps only the results that are read (a scan also the carries they depend on), its body
// pruned to match.
#include <algorithm>
#include <set>

#include "tenax/autodiff/scan_cache.h"
#include "tenax/model/definition.h"

namespace tenax::model_detail {

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

namespace {

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
  out.xs = n.xs;
  const size_t n_carry = n.init.size();
  for (size_t k : keep)
    if (k < n_carry) out.init.push_back(n.init[k]);
  out.over = n.over;
  out.scan_options = n.scan_options;
  out.map_options = n.map_options;
  for (size_t k : keep) out.outputs.push_back(n.outputs[k]);
  if (n.body) {
    std::vector<int> results;
    for (size_t k : keep) results.push_back(n.body->results[k]);
    Graph body = pruned(*n.body, results);
    body.results = results;
    if (n.kind == NodeKind::scan) {  // params: the kept carries, then every x
      body.params.clear();
      for (size_t k : keep)
        if (k < n_carry) body.params.push_back(n.body->params[k]);
      body.params.insert(body.params.end(), n.body->params.begin() + long(n_carry), n.body->params.end());
    }
    body.captures = outer_reads(body);
    out.body = std::make_unique<Graph>(std::move(body));
  }
  if (n.scan_cache) out.scan_cache = std::make_shared<detail::ScanCache>();
  return out;
}

// Slots the nodes of `g` read to compute `needed` (a conservative closure: a node that makes any
// needed slot reads all it reads).
std::set<int> reads_for(const Graph& g, std::set<int> needed) {
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    if (std::none_of(it->outputs.begin(), it->outputs.end(), [&](int s) { return needed.count(s) > 0; })) continue;
    for (const std::vector<int>* v : {&it->inputs, &it->init, &it->xs}) needed.insert(v->begin(), v->end());
    if (it->body) needed.insert(it->body->captures.begin(), it->body->captures.end());
  }
  return needed;
}

// The outputs of `n` to keep (indices into n.outputs) given the slots read after it. A scan keeps
// the ys read and the carries whose final value is read or that a kept result depends on through
// the step (a fixed point: a carry read only by a dropped carry's update goes too).
std::vector<size_t> outputs_to_keep(const Node& n, const std::set<int>& live) {
  std::vector<bool> keep(n.outputs.size());
  for (size_t k = 0; k < n.outputs.size(); ++k) keep[k] = live.count(n.outputs[k]) > 0;
  if (n.kind == NodeKind::scan) {
    const size_t n_carry = n.init.size();
    for (bool changed = true; changed;) {
      std::set<int> needed;
      for (size_t k = 0; k < keep.size(); ++k)
        if (keep[k]) needed.insert(n.body->results[k]);
      const std::set<int> reads = reads_for(*n.body, needed);
      changed = false;
      for (size_t k = 0; k < n_carry; ++k)
        if (!keep[k] && reads.count(n.body->params[k])) keep[k] = changed = true;
    }
  }
  std::vector<size_t> out;
  for (size_t k = 0; k < keep.size(); ++k)
    if (keep[k]) out.push_back(k);
  return out;
}

}  // namespace

Graph pruned(const Graph& g, const std::vector<int>& needed) {
  std::set<int> live(needed.begin(), needed.end());
  std::vector<Node> nodes;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    const Node& n = *it;
    const std::vector<size_t> keep = outputs_to_keep(n, live);
    if (keep.empty()) continue;  // nothing it computes is read
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
