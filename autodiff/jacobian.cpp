// jacobian: basis cotangents (batched, or one at a time as a fallback) or basis tangents, then the
// result's axes named and ordered as (output..., argument...).
#include "tenax/autodiff/jacobian.h"

#include <complex>
#include <string>

#include "tenax/autodiff/tape.h"
#include "tenax/core/creation.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/named/batching.h"

namespace tenax {
namespace {

// Writes 1 at flat (row-major) element i of a contiguous host tensor (`unit` for a complex one:
// 1 or i).
void set_one(Tensor& t, int64_t i, std::complex<double> unit = 1.0) {
  switch (t.dtype()) {
    case DType::f64: static_cast<double*>(t.data_ptr())[i] = 1.0; break;
    case DType::f32: static_cast<float*>(t.data_ptr())[i] = 1.0f; break;
    case DType::c128: static_cast<std::complex<double>*>(t.data_ptr())[i] = unit; break;
    default: static_cast<std::complex<float>*>(t.data_ptr())[i] = std::complex<float>(unit); break;
  }
}

// The view of `t` at flat index i over the leading axes `lead` (row-major), as successive selects.
Tensor at_flat(const Tensor& t, const Axes& lead, int64_t i) {
  Tensor v = t;
  for (int d = lead.rank() - 1; d >= 0; --d) {
    const int64_t n = lead.size(d);
    v = select(v, lead.name(d), i % n);
    i /= n;
  }
  return v;
}

// The argument's axes with those that collide with output axes renamed to name + "_in".
Axes argument_axes(const Axes& out, const Axes& arg) {
  Axes r;
  for (int i = 0; i < arg.rank(); ++i) {
    Name a = arg.name(i);
    if (out.contains(a)) {
      const Name renamed(a.str() + "_in");
      if (out.contains(renamed) || arg.contains(renamed))
        throw AxisError("[jacobian] argument axis '" + a.str() + "' collides with an output axis and '" +
                        renamed.str() + "' is taken too; rename the axes of f's output or argument");
      a = renamed;
    }
    r.push_back({a, arg.size(i)});
  }
  return r;
}

// g has the argument's axes and the batch axes `from`: renames the colliding argument axes, then
// `from` -> `to` (the output's names), and orders the axes as (output..., argument...).
// Axes mapped by an enclosing nmap (`mapped`) stay, last: each slice's Jacobian.
Tensor name_jacobian(const Tensor& g, const Axes& out, const Axes& arg, const AxisList& from, const AxisList& to,
                     const Axes& mapped) {
  const detail::MappedScope plain(AxisList{}, detail::MappedScope::replace);
  const Axes named = argument_axes(out, arg);
  Tensor r = rename(g, arg.names(), named.names());
  if (!from.empty()) r = rename(r, from, to);
  AxisList order = out.names();
  for (int i = 0; i < named.rank(); ++i) order.push_back(named.name(i));
  for (int i = 0; i < mapped.rank(); ++i)
    if (r.has_axis(mapped.name(i))) order.push_back(mapped.name(i));
  return contiguous(transpose(r, order));
}

// Inside nmap: the axes of `t` the enclosing maps map, and the others.
Axes mapped_part(const Tensor& t) { return split_mapped(t.axes(), detail::g_mapped, true); }
Axes unmapped_part(const Tensor& t) { return split_mapped(t.axes(), detail::g_mapped, false); }

void check_host(const Tensor& t, const char* what) {
  if (t.device().kind != Device::Kind::cpu)
    throw DeviceError(std::string("[jacobian] the ") + what + " is on " + t.device().str() +
                      "; jacobian works on host tensors for now");
  if (!is_inexact(t.dtype()))
    throw DTypeError(std::string("[jacobian] the ") + what + " is " + dtype_name(t.dtype()) +
                     "; need float64, float32, complex128 or complex64");
}

// The cotangents' pullback for every output element at once (basis axes first), or one sweep per
// element where an op cannot take the batch axes. `unit` (1 or i) scales a complex basis.
std::vector<Tensor> pull_basis(const VjpResult& r, const Axes& out, const Axes& basis_axes, DType dtype,
                               std::complex<double> unit, size_t n_args) {
  const int64_t n = out.numel();
  Axes eye_axes = basis_axes;
  for (int i = 0; i < out.rank(); ++i) eye_axes.push_back(out[i]);
  Tensor eye = zeros(eye_axes, dtype);
  for (int64_t i = 0; i < n; ++i) set_one(eye, i * n + i, unit);
  try {
    return r.pullback(eye);
  } catch (const AutodiffError& err) {
    if (std::string(err.what()).find("cannot take the batch axes") == std::string::npos) throw;
  }
  // One sweep per output element into the rows of the result.
  std::vector<Tensor> g;
  for (int64_t i = 0; i < n; ++i) {
    Tensor e = zeros(out, dtype);
    set_one(e, i, unit);
    std::vector<Tensor> row = r.pullback(e);
    const detail::MappedScope plain(AxisList{}, detail::MappedScope::replace);
    for (size_t k = 0; k < n_args; ++k) {
      if (i == 0) {
        Axes ax = row[k].axes();
        for (int d = 0; d < basis_axes.rank(); ++d) ax.push_back(basis_axes[d]);
        g.push_back(zeros(ax, row[k].dtype(), row[k].device()));
      }
      detail::copy_into(at_flat(g[k], basis_axes, i), row[k]);
    }
  }
  return g;
}

std::vector<Tensor> reverse_jacobian(const Function& f, const std::vector<Tensor>& args) {
  VjpResult r = vjp(f, args);  // inside nmap: per slice (shared arguments broadcast)
  const Tensor& y = r.value;
  check_host(y, "output");
  const Axes out = unmapped_part(y), mapped = mapped_part(y);
  // Batch axes: the output's axes under fresh names, with the identity as the cotangent.
  AxisList from, to;
  Axes basis_axes;
  for (int i = 0; i < out.rank(); ++i) {
    const Name b("__jacobian_" + std::to_string(i));
    basis_axes.push_back({b, out.size(i)});
    from.push_back(b);
    to.push_back(out.name(i));
  }
  std::vector<Tensor> g = pull_basis(r, out, basis_axes, y.dtype(), 1.0, args.size());
  // A complex output (docs/complex.md): a complex argument's rows are conj(VJP) (the derivative of
  // a holomorphic function); a real argument's are VJP(1) + i VJP(i).
  if (is_complex(y.dtype())) {
    std::vector<Tensor> gi;
    for (size_t k = 0; k < args.size(); ++k) {
      if (is_complex(args[k].dtype())) {
        g[k] = conj(g[k]);
        continue;
      }
      if (gi.empty()) gi = pull_basis(r, out, basis_axes, y.dtype(), std::complex<double>(0, 1), args.size());
      g[k] = complex(g[k], gi[k]);
    }
  }
  std::vector<Tensor> result;
  for (size_t k = 0; k < args.size(); ++k)
    result.push_back(name_jacobian(g[k], out, unmapped_part(args[k]), from, to, mapped));
  return result;
}

// Forward mode: per argument, ONE forward sweep whose tangent is the identity over (argument axes,
// basis axes); ops whose JVP rule cannot take batch axes fall back to one sweep per element.
std::vector<Tensor> forward_jacobian(const Function& f, const std::vector<Tensor>& args) {
  Tape tape;
  tape.keep_all_residuals();
  std::vector<Tensor> watched;
  for (const Tensor& a : args) watched.push_back(tape.watch(a));
  const Tensor y = f(watched);
  if (!y.defined()) throw AutodiffError("[jacobian] the function returned an undefined tensor");
  check_host(y, "output");
  // Inside nmap each slice's Jacobian: the basis spans the unmapped axes, the mapped ones stay.
  const Axes out = unmapped_part(y), mapped = mapped_part(y);
  std::vector<Axes> ins, owns;
  for (const Tensor& a : args) {
    ins.push_back(unmapped_part(a));
    owns.push_back(mapped_part(a));
  }
  const detail::MappedScope plain(AxisList{}, detail::MappedScope::replace);  // the sweeps see every axis
  std::vector<Tensor> result;
  for (size_t k = 0; k < args.size(); ++k) {
    check_host(args[k], "argument");
    const Axes& in = ins[k];
    const Axes& own = owns[k];
    const Axes named = argument_axes(out, in);
    const int64_t n = in.numel();
    AxisList basis_names, named_names = named.names();
    Axes eye_axes = in;
    for (int i = 0; i < in.rank(); ++i) {
      const Name b("__jacobian_in_" + std::to_string(i));
      basis_names.push_back(b);
      eye_axes.push_back({b, in.size(i)});
    }
    AxisList order = out.names();
    for (Name a : named_names) order.push_back(a);
    for (int i = 0; i < mapped.rank(); ++i) order.push_back(mapped.name(i));
    // The columns for basis tangents `unit` (1, or i for a complex argument's imaginary direction).
    auto columns = [&](std::complex<double> unit) {
      std::vector<Tensor> tangents(args.size());
      Tensor eye = zeros(eye_axes, args[k].dtype());
      for (int64_t i = 0; i < n; ++i) set_one(eye, i * n + i, unit);
      tangents[k] = own.rank() > 0 ? broadcast(eye, own) : eye;
      try {
        const Tensor c = tape.forward_tangent(y, watched, tangents);
        return contiguous(transpose(rename(c, basis_names, named_names), order));
      } catch (const AutodiffError& err) {
        if (std::string(err.what()).find("cannot take the batch axes") == std::string::npos) throw;
      }
      Axes ax = y.axes();
      for (int i = 0; i < named.rank(); ++i) ax.push_back(named[i]);
      Tensor j = zeros(ax, y.dtype());
      for (int64_t i = 0; i < n; ++i) {
        std::vector<Tensor> one(args.size());
        Tensor e = zeros(in, args[k].dtype());
        set_one(e, i, unit);
        one[k] = own.rank() > 0 ? broadcast(e, own) : e;
        detail::copy_into(at_flat(j, named, i), tape.forward_tangent(y, watched, one));
      }
      return contiguous(transpose(j, order));
    };
    // A real output of a complex argument (docs/complex.md): dy/dRe + i dy/dIm, as reverse mode gives.
    if (is_complex(args[k].dtype()) && !is_complex(y.dtype()))
      result.push_back(complex(columns(1.0), columns(std::complex<double>(0, 1))));
    else
      result.push_back(columns(1.0));
  }
  return result;
}

}  // namespace

std::vector<Tensor> jacobian(const Function& f, const std::vector<Tensor>& args, const JacobianOptions& options) {
  if (args.empty()) throw AutodiffError("[jacobian] no arguments to differentiate with respect to");
  for (const Tensor& a : args) {
    if (!a.defined()) throw AutodiffError("[jacobian] an argument is undefined");
    check_host(a, "argument");
  }
  return options.mode == JacobianOptions::Mode::forward ? forward_jacobian(f, args) : reverse_jacobian(f, args);
}

}  // namespace tenax
