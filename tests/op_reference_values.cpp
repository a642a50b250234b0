// Independent forward references, one per registered op (see op_reference_values.h).
#include "op_reference_values.h"

#include <cmath>
#include <complex>
#include <functional>
#include <map>
#include <stdexcept>
#include <type_traits>

namespace tenax::testing {
namespace {

using Index = std::map<std::string, int64_t>;

// A tensor's values addressed by axis name, as V: double (real tensors) or std::complex<double>
// (any tensor; a real one with imaginary part 0).
template <class V>
struct DenseOf {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  std::vector<V> v;
  explicit DenseOf(const Tensor& t) {
    if constexpr (std::is_same_v<V, double>) v = t.to_vector();
    else v = t.to_complex_vector();
    for (int i = 0; i < t.axes().rank(); ++i) {
      names.push_back(t.axes().name(i).str());
      sizes.push_back(t.axes().size(i));
    }
  }
  [[nodiscard]] bool has(const std::string& n) const {
    for (const std::string& m : names)
      if (m == n) return true;
    return false;
  }
  [[nodiscard]] int64_t size(const std::string& n) const {
    for (size_t k = 0; k < names.size(); ++k)
      if (names[k] == n) return sizes[k];
    throw std::logic_error("reference: no axis " + n);
  }
  // The element at `at` (names `at` lacks: an error; extra names: ignored, as broadcasting does).
  [[nodiscard]] V operator()(const Index& at) const {
    int64_t flat = 0;
    for (size_t k = 0; k < names.size(); ++k) {
      auto it = at.find(names[k]);
      if (it == at.end()) throw std::logic_error("reference: index lacks axis " + names[k]);
      flat = flat * sizes[k] + it->second;
    }
    return v[static_cast<size_t>(flat)];
  }
};
using Dense = DenseOf<double>;

// One sample's inputs read into Dense once (the references below read them at every element).
struct Ref {
  std::vector<Dense> inputs;
  const Attrs& attrs;
};

Index with(Index at, const std::string& n, int64_t i) {
  at[n] = i;
  return at;
}

// Calls f on every index of the axes (names, sizes), row-major.
void each(const std::vector<std::string>& names, const std::vector<int64_t>& sizes, const Index& base,
          const std::function<void(const Index&)>& f, size_t k = 0) {
  if (k == names.size()) return f(base);
  for (int64_t i = 0; i < sizes[k]; ++i) each(names, sizes, with(base, names[k], i), f, k + 1);
}

// Σ over every index of the axes `over` of x (with the other names from `at`) of f(index).
double sum_over(const Dense& x, const AxisList& over, const Index& at,
                const std::function<double(const Index&)>& f) {
  std::vector<std::string> n;
  std::vector<int64_t> s;
  for (Name a : over) {
    n.push_back(a.str());
    s.push_back(x.size(a.str()));
  }
  double total = 0;
  each(n, s, at, [&](const Index& i) { total += f(i); });
  return total;
}

template <class V>
using MatrixOf = std::vector<std::vector<V>>;
using Matrix = MatrixOf<double>;

inline double conj_of(double v) { return v; }
inline std::complex<double> conj_of(std::complex<double> v) { return std::conj(v); }

// Row-reduces [A | b] with partial pivoting and back-substitutes: A^-1 b.
template <class V>
std::vector<V> gauss(MatrixOf<V> a, std::vector<V> b) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
    std::swap(a[c], a[p]);
    std::swap(b[c], b[p]);
    for (size_t r = c + 1; r < n; ++r) {
      const V m = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= m * a[c][k];
      b[r] -= m * b[c];
    }
  }
  std::vector<V> x(n);
  for (size_t i = n; i-- > 0;) {
    V s = b[i];
    for (size_t k = i + 1; k < n; ++k) s -= a[i][k] * x[k];
    x[i] = s / a[i][i];
  }
  return x;
}

// The matrix over (row, col) of x at the other indices of `at` (D: Dense or CDense, V its values).
template <class V, class D>
MatrixOf<V> matrix(const D& x, const std::string& row, const std::string& col, const Index& at, int64_t n) {
  MatrixOf<V> m(static_cast<size_t>(n), std::vector<V>(static_cast<size_t>(n)));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) m[size_t(i)][size_t(j)] = x(with(with(at, row, i), col, j));
  return m;
}

// A z = b (A^T z = b when transposed) by Gaussian elimination, component `k` of z; the triangular
// solve reads only its triangle. `n` is the matrices' size.
template <class V, class D>
V linear_solve(const std::vector<D>& in, const Attrs& attrs, const Index& at, bool triangular, int64_t size) {
  const std::string row = attrs.axes[0].str(), col = attrs.axes[1].str();
  const bool transposed = attrs.i[1] != 0, lower = attrs.i[0] != 0;
  MatrixOf<V> m = matrix<V>(in[0], row, col, at, size);
  const size_t n = m.size();
  if (triangular)
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        if (lower ? j > i : j < i) m[i][j] = V(0);
  if (transposed)
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < i; ++j) std::swap(m[i][j], m[j][i]);
  const std::string eq = transposed ? col : row, unknown = transposed ? row : col;
  std::vector<V> rhs(n);
  for (size_t i = 0; i < n; ++i) rhs[i] = in[1](with(at, eq, int64_t(i)));
  return gauss(m, rhs)[size_t(at.at(unknown))];
}
double linear_solve(const Ref& s, const Index& at, bool triangular) {
  return linear_solve<double>(s.inputs, s.attrs, at, triangular, s.inputs[0].size(s.attrs.axes[0].str()));
}

// L with A = L L^H (L L^T for real A), from A's lower triangle (a complex diagonal's real part).
template <class V, class D>
V cholesky_at(const D& a, const Attrs& attrs, const Index& at, int64_t size) {
  const std::string row = attrs.axes[0].str(), col = attrs.axes[1].str();
  const MatrixOf<V> m = matrix<V>(a, row, col, at, size);
  const size_t n = m.size();
  MatrixOf<V> l(n, std::vector<V>(n, V(0)));
  for (size_t j = 0; j < n; ++j) {
    double d = std::real(m[j][j]);
    for (size_t k = 0; k < j; ++k) d -= std::norm(l[j][k]);
    l[j][j] = std::sqrt(d);
    for (size_t i = j + 1; i < n; ++i) {
      V v = m[i][j];
      for (size_t k = 0; k < j; ++k) v -= l[i][k] * conj_of(l[j][k]);
      l[i][j] = v / l[j][j];
    }
  }
  return l[size_t(at.at(row))][size_t(at.at(col))];
}
double cholesky_at(const Ref& s, const Index& at) {
  return cholesky_at<double>(s.inputs[0], s.attrs, at, s.inputs[0].size(s.attrs.axes[0].str()));
}

// log |det A| by Gaussian elimination with partial pivoting.
double logdet_at(const Ref& s, const Index& at) {
  const Dense& a = s.inputs[0];
  Matrix m = matrix<double>(a, s.attrs.axes[0].str(), s.attrs.axes[1].str(), at, a.size(s.attrs.axes[0].str()));
  const size_t n = m.size();
  double total = 0;
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(m[r][c]) > std::abs(m[p][c])) p = r;
    std::swap(m[c], m[p]);
    total += std::log(std::abs(m[c][c]));
    for (size_t r = c + 1; r < n; ++r) {
      const double f = m[r][c] / m[c][c];
      for (size_t k = c; k < n; ++k) m[r][k] -= f * m[c][k];
    }
  }
  return total;
}

// The tridiagonal system along `over` at the other indices of `at`, solved densely.
template <class V, class D>
V tridiagonal_at(const std::vector<D>& in, const Attrs& attrs, const Index& at) {
  const D& l = in[0];
  const D& d = in[1];
  const D& u = in[2];
  const D& r = in[3];
  const std::string over = attrs.axes[0].str();
  const int64_t n = r.size(over);
  auto get = [&](const D& x, int64_t i) { return x.has(over) ? x(with(at, over, i)) : x(at); };
  MatrixOf<V> m(static_cast<size_t>(n), std::vector<V>(static_cast<size_t>(n), V(0)));
  std::vector<V> rhs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    m[size_t(i)][size_t(i)] = get(d, i);
    if (i > 0) m[size_t(i)][size_t(i - 1)] = get(l, i);
    if (i + 1 < n) m[size_t(i)][size_t(i + 1)] = get(u, i);
    rhs[size_t(i)] = get(r, i);
  }
  return gauss(m, rhs)[size_t(at.at(over))];
}
double tridiagonal_at(const Ref& s, const Index& at) { return tridiagonal_at<double>(s.inputs, s.attrs, at); }

double recurrence_at(const Ref& s, const Index& at) {
  const Dense& a = s.inputs[0];
  const Dense& b = s.inputs[1];
  const std::string over = s.attrs.axes[0].str();
  double x = 0;
  for (int64_t t = 0; t <= at.at(over); ++t) {
    const Index i = with(at, over, t);
    x = (a.has(over) ? a(i) : a(at)) * x + (b.has(over) ? b(i) : b(at));
  }
  return x;
}

double reduce_at(const std::string& op, const Ref& s, const Index& at) {
  const Dense& x = s.inputs[0];
  const AxisList& over = s.attrs.axes;
  if (op == "sum") return sum_over(x, over, at, [&](const Index& i) { return x(i); });
  int64_t count = 1;
  for (Name a : over) count *= x.size(a.str());
  if (op == "mean") return sum_over(x, over, at, [&](const Index& i) { return x(i); }) / double(count);
  double m = -INFINITY;
  (void)sum_over(x, over, at, [&](const Index& i) {
    m = std::max(m, x(i));
    return 0.0;
  });
  if (op == "max") return m;
  return m + std::log(sum_over(x, over, at, [&](const Index& i) { return std::exp(x(i) - m); }));
}

double elementwise_at(const std::string& op, const Ref& s, const Index& at) {
  static const std::map<std::string, std::function<double(double)>> unary = {
      {"neg", [](double x) { return -x; }},
      {"square", [](double x) { return x * x; }},
      {"exp", [](double x) { return std::exp(x); }},
      {"log", [](double x) { return std::log(x); }},
      {"log1p", [](double x) { return std::log1p(x); }},
      {"sqrt", [](double x) { return std::sqrt(x); }},
      {"tanh", [](double x) { return std::tanh(x); }},
      {"sigmoid", [](double x) { return 0.5 * (1.0 + std::tanh(0.5 * x)); }},
      {"softplus", [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }},
      {"abs", [](double x) { return std::abs(x); }}};
  static const std::map<std::string, std::function<double(double, double)>> binary = {
      {"add", [](double a, double b) { return a + b; }},
      {"sub", [](double a, double b) { return a - b; }},
      {"mul", [](double a, double b) { return a * b; }},
      {"div", [](double a, double b) { return a / b; }},
      {"pow", [](double a, double b) { return std::pow(a, b); }},
      {"maximum", [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](double a, double b) { return std::min(a, b); }},
      {"greater", [](double a, double b) { return a > b ? 1.0 : 0.0; }},
      {"less", [](double a, double b) { return a < b ? 1.0 : 0.0; }},
      {"equal", [](double a, double b) { return a == b ? 1.0 : 0.0; }}};
  if (auto u = unary.find(op); u != unary.end()) return u->second(s.inputs[0](at));
  if (auto b = binary.find(op); b != binary.end()) return b->second(s.inputs[0](at), s.inputs[1](at));
  if (op == "where") return s.inputs[0](at) != 0.0 ? s.inputs[1](at) : s.inputs[2](at);
  throw std::logic_error("reference: no elementwise op " + op);
}

double astype_at(const Ref& s, const Index& at) {
  const double x = s.inputs[0](at);
  switch (static_cast<DType>(s.attrs.i[0])) {
    case DType::f64:
      return x;
    case DType::f32:
      return static_cast<double>(static_cast<float>(x));
    case DType::i64:
      return static_cast<double>(static_cast<int64_t>(x));
    case DType::b8:
      return x != 0.0 ? 1.0 : 0.0;
    case DType::c128:
      return x;  // each part of a complex value (reference_complex_values splits them)
    case DType::c64:
      return static_cast<double>(static_cast<float>(x));
  }
  return NAN;
}

double layout_at(const std::string& op, const Ref& s, const Index& at) {
  const Dense& x = s.inputs[0];
  const AxisList& ax = s.attrs.axes;
  if (op == "transpose" || op == "broadcast" || op == "contiguous") return x(at);
  if (op == "rename") {
    Index src = at;
    for (int k = 0; k < ax.size(); ++k) src[ax[k].str()] = at.at(s.attrs.axes2[k].str());
    return x(src);
  }
  const std::string a0 = ax[0].str();
  if (op == "slice") {  // a negative start counts from the end
    const int64_t start = s.attrs.i[0] < 0 ? s.attrs.i[0] + x.size(a0) : s.attrs.i[0];
    return x(with(at, a0, start + at.at(a0) * s.attrs.i[2]));
  }
  if (op == "select") return x(with(at, a0, s.attrs.i[0]));
  if (op == "diagonal") return x(with(at, ax[1].str(), at.at(a0)));
  throw std::logic_error("reference: no layout op " + op);
}

double join_at(const std::string& op, const Ref& s, const Index& at) {
  const std::string axis = s.attrs.axes[0].str();
  if (op == "stack") {
    Index i = at;
    i.erase(axis);
    return s.inputs[size_t(at.at(axis))](i);
  }
  int64_t k = at.at(axis);
  for (const Dense& x : s.inputs) {
    if (k < x.size(axis)) return x(with(at, axis, k));
    k -= x.size(axis);
  }
  throw std::logic_error("reference: concat index past the end");
}

double dot_at(const Ref& s, const Index& at) {
  const Dense& a = s.inputs[0];
  const Dense& b = s.inputs[1];
  return sum_over(a, s.attrs.axes, at, [&](const Index& i) { return a(i) * b(i); });
}

double value_at(const std::string& op, const Ref& s, const Index& at) {
  if (op == "sum" || op == "mean" || op == "max" || op == "logsumexp") return reduce_at(op, s, at);
  if (op == "dot") return dot_at(s, at);
  if (op == "astype") return astype_at(s, at);
  if (op == "concat" || op == "stack") return join_at(op, s, at);
  if (op == "interleave") {  // position j: a[j / 2] when j is even, b[j / 2] when odd
    const std::string axis = s.attrs.axes[0].str();
    const int64_t j = at.at(axis);
    return s.inputs[size_t(j % 2)](with(at, axis, j / 2));
  }
  if (op == "cholesky") return cholesky_at(s, at);
  if (op == "triangular_solve") return linear_solve(s, at, true);
  if (op == "solve") return linear_solve(s, at, false);
  if (op == "logdet") return logdet_at(s, at);
  if (op == "linear_recurrence") return recurrence_at(s, at);
  if (op == "tridiagonal_solve") return tridiagonal_at(s, at);
  if (op == "rename" || op == "transpose" || op == "slice" || op == "select" || op == "diagonal" ||
      op == "broadcast" || op == "contiguous")
    return layout_at(op, s, at);
  return elementwise_at(op, s, at);
}

}  // namespace

std::vector<double> reference_values(const OpDef& op, const OpSample& sample, const Tensor& actual) {
  Ref s{{}, sample.attrs};
  for (const Tensor& t : sample.inputs) s.inputs.emplace_back(t);
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (int i = 0; i < actual.axes().rank(); ++i) {
    names.push_back(actual.axes().name(i).str());
    sizes.push_back(actual.axes().size(i));
  }
  std::vector<double> out;
  each(names, sizes, {}, [&](const Index& at) { out.push_back(value_at(op.name, s, at)); });
  return out;
}

// ---- complex operands ----
namespace {

using C = std::complex<double>;

using CDense = DenseOf<C>;

// The sample with each complex input replaced by its real (part 0) or imaginary (part 1) part, as
// a new host tensor built from its values.
OpSample part_of(const OpSample& s, int part) {
  OpSample r{{}, s.attrs};
  for (const Tensor& t : s.inputs) {
    if (!is_complex(t.dtype())) {  // a real operand's imaginary part is 0; conditions stay
      const bool keep = part == 0 || !is_inexact(t.dtype());
      r.inputs.push_back(keep ? t : tensor(std::vector<double>(size_t(t.numel()), 0.0), t.axes()));
      continue;
    }
    std::vector<double> p;
    for (const C& z : t.to_complex_vector()) p.push_back(part == 0 ? z.real() : z.imag());
    r.inputs.push_back(tensor(p, t.axes()));
  }
  return r;
}

// Elementwise ops of complex operands, from std::complex.
bool elementwise_complex(const std::string& op, const std::vector<CDense>& in, const Index& at, C& out) {
  static const std::map<std::string, std::function<C(C)>> unary = {
      {"neg", [](C x) { return -x; }},          {"square", [](C x) { return x * x; }},
      {"exp", [](C x) { return std::exp(x); }}, {"log", [](C x) { return std::log(x); }},
      {"sqrt", [](C x) { return std::sqrt(x); }}, {"tanh", [](C x) { return std::tanh(x); }},
      {"abs", [](C x) { return C(std::abs(x)); }}, {"real", [](C x) { return C(x.real()); }},
      {"imag", [](C x) { return C(x.imag()); }}, {"conj", [](C x) { return std::conj(x); }},
      {"angle", [](C x) { return C(std::arg(x)); }}};
  static const std::map<std::string, std::function<C(C, C)>> binary = {
      {"add", [](C a, C b) { return a + b; }}, {"sub", [](C a, C b) { return a - b; }},
      {"mul", [](C a, C b) { return a * b; }}, {"div", [](C a, C b) { return a / b; }},
      {"pow", [](C a, C b) { return std::pow(a, b); }},
      {"complex", [](C a, C b) { return C(a.real(), b.real()); }}};
  if (auto u = unary.find(op); u != unary.end()) {
    out = u->second(in[0](at));
    return true;
  }
  if (auto b = binary.find(op); b != binary.end()) {
    out = b->second(in[0](at), in[1](at));
    return true;
  }
  if (op == "where") {
    out = in[0](at) != C(0) ? in[1](at) : in[2](at);
    return true;
  }
  return false;
}

C complex_recurrence_at(const std::vector<CDense>& in, const Attrs& attrs, const Index& at) {
  const std::string over = attrs.axes[0].str();
  C x = 0;
  for (int64_t t = 0; t <= at.at(over); ++t) x = in[0](with(at, over, t)) * x + in[1](with(at, over, t));
  return x;
}

}  // namespace

std::vector<std::complex<double>> reference_complex_values(const OpDef& op, const OpSample& sample,
                                                           const Tensor& actual) {
  const std::string name = op.name;
  std::vector<C> out;
  if (name == "dot") {  // (ar + i ai)(br + i bi), from four real references
    OpSample rr = part_of(sample, 0), ii = part_of(sample, 1), ri = rr, ir = ii;
    ri.inputs[1] = ii.inputs[1];
    ir.inputs[1] = rr.inputs[1];
    const auto a = reference_values(op, rr, actual), b = reference_values(op, ii, actual),
               c = reference_values(op, ri, actual), d = reference_values(op, ir, actual);
    for (size_t k = 0; k < a.size(); ++k) out.emplace_back(a[k] - b[k], c[k] + d[k]);
    return out;
  }
  std::vector<CDense> in;
  for (const Tensor& t : sample.inputs) in.emplace_back(t);
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (int i = 0; i < actual.axes().rank(); ++i) {
    names.push_back(actual.axes().name(i).str());
    sizes.push_back(actual.axes().size(i));
  }
  bool direct = true;
  each(names, sizes, {}, [&](const Index& at) {
    C v;
    const int64_t n = name == "cholesky" || name == "solve" || name == "triangular_solve"
                          ? sample.inputs[0].size(sample.attrs.axes[0])
                          : 0;
    if (name == "linear_recurrence") v = complex_recurrence_at(in, sample.attrs, at);
    else if (name == "cholesky") v = cholesky_at<C>(in[0], sample.attrs, at, n);
    else if (name == "triangular_solve" || name == "solve") v = linear_solve<C>(in, sample.attrs, at, name[0] == 't', n);
    else if (name == "tridiagonal_solve") v = tridiagonal_at<C>(in, sample.attrs, at);
    else direct = direct && elementwise_complex(name, in, at, v);
    out.push_back(v);
  });
  if (direct) return out;
  // The other ops are real-linear: the op of the real parts plus i times the op of the imaginary parts.
  const auto re = reference_values(op, part_of(sample, 0), actual), im = reference_values(op, part_of(sample, 1), actual);
  out.clear();
  for (size_t k = 0; k < re.size(); ++k) out.emplace_back(re[k], im[k]);
  return out;
}

}  // namespace tenax::testing
