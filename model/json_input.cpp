// JSON text to a document in two passes: an event pass (nlohmann's SAX interface) that checks
// nesting depth and duplicate keys and places syntax errors, then the ordinary parse.
#include "tenax/model/json_input.h"

#include <iterator>
#include <set>
#include <vector>

#include "tenax/core/error.h"
#include "tenax/model/definition.h"

namespace tenax::model_detail {
namespace {

using json = nlohmann::json;

// The checking pass. Each open container is a frame; the pointer of the value being read is the
// frames' keys and indices joined.
class Checker final : public nlohmann::json_sax<json> {
 public:
  std::string error;  ///< set when the pass stopped on a problem

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      error = pointer_join(pointer(), k) + ": the key \"" + k +
              "\" appears twice in this object (JSON leaves which one counts undefined; write it once)";
      return false;
    }
    f.key = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;
    std::size_t index = 0;
  };
  std::vector<Frame> frames_;

  std::string pointer() const {
    std::string p;
    for (const Frame& f : frames_) {
      if (&f == &frames_.back()) break;
      p = f.object ? pointer_join(p, f.key) : pointer_join(p, f.index);
    }
    return p;
  }
  // A value finished: an array moves to its next index.
  bool value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  bool open(bool object) {
    frames_.push_back({object, {}, {}, 0});
    if (static_cast<int>(frames_.size()) > kMaxJsonDepth) {
      const std::string at = pointer();
      error = (at.empty() ? "/" : at) + ": nesting deeper than " + std::to_string(kMaxJsonDepth) +
              " levels (the most a model file may have)";
      return false;
    }
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
};

}  // namespace

json parse_checked(std::string_view text, const std::string& what) {
  Checker checker;
  try {
    (void)json::sax_parse(text.begin(), text.end(), &checker);
  } catch (const json::exception&) {  // a syntax error: the parse below reports it
  }
  if (!checker.error.empty()) throw ModelError(checker.error);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // nlohmann's message gives the line and column
    throw ModelError(what + ": not valid JSON: " + e.what());
  }
}

void check_depth(const json& doc, const std::string& pointer) {
  // Depth first with an explicit stack: each frame is an open container and its next child.
  struct Frame {
    const json* v;
    json::const_iterator next;
    std::size_t index = 0;
  };
  if (!doc.is_structured()) return;
  std::vector<Frame> stack{{&doc, doc.cbegin()}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next == f.v->cend()) {
      stack.pop_back();
      continue;
    }
    const json& child = *f.next;
    ++f.next;
    ++f.index;
    if (!child.is_structured()) continue;
    if (static_cast<int>(stack.size()) + 1 > kMaxJsonDepth) {
      std::string at = pointer;
      for (const Frame& g : stack) {
        if (g.v->is_object()) at = pointer_join(at, std::prev(g.next).key());
        else at = pointer_join(at, g.index - 1);
      }
      throw ModelError(at + ": nesting deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels (the most a model file may have)");
    }
    stack.push_back({&child, child.cbegin()});
  }
}

std::string brief(const json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " entries";
  if (v.is_object()) return "an object with " + std::to_string(v.size()) + " keys";
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    // (a cut may split a UTF-8 sequence: replaced, not thrown)
    const auto quoted = [](const std::string& x) { return json(x).dump(-1, ' ', false, json::error_handler_t::replace); };
    return s.size() <= 60 ? quoted(s) : quoted(s.substr(0, 60)) + "...";
  }
  return v.dump();
}

}  // namespace tenax::model_detail
