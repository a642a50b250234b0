// The case of issue 3 that must be fast (the S5 layer of DESIGN's JAX problems): a batch of linear
// recurrences x_t = λ ⊙ x_{t-1} + W u_t + b, state 64, batch 16, input 8, T = 32..512, one and
// two stacked layers, float64, float32 and complex128, written with scan, with linear_recurrence and
// with associative_scan over affine pairs (the seed's formulation). Timed:
// the forward pass, and the Jacobian of the final state w.r.t. λ, W, b, the initial state and the
// inputs. The Jacobian is per sequence (the final state of sequence s depends on sequence s only),
// one reverse sweep each with the 64-vector basis as batch axes (or, "/forward_mode", one forward
// sweep with the argument's basis as batch axes of the tangent); the 16 sequences run in a loop.
// Complexity(oN) fits time = slope * T and reports the slope and the RMS of the fit.
// "S5/scan_nmap/...": the same Jacobians of all 16 sequences as one nmap (jit(vmap(jacrev))).
// complex128: the seed's own model (λ, W = B, b and x0 complex, λ = ρ e^{iθ} with |λ| < 1; the
// inputs u real, lifted to complex before the product), Jacobians under docs/complex.md (the
// holomorphic derivative w.r.t. λ, W, b, x0; ∂x/∂u for the real u).
// `bench_s5 --s5_values=T` prints, instead of timing, one sequence's inputs and its complex128
// Jacobians (one layer, both implementations) as JSON for bench/compare_jax_s5.py;
// `--s5_calls=T,WRT,N` runs N scan Jacobians untimed (instruction counts).
#include <benchmark/benchmark.h>

#include <tenax/tenax.h>

#include <complex>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

namespace {

using namespace tenax;

constexpr int64_t kState = 64, kBatch = 16, kInput = 8;

enum class Impl { scan, recurrence, associative };
enum class Wrt { forward, lambda, w, b, x0, u };

struct Layer {
  Tensor lambda, w, b, x0;  // (h), (h, i), (h), (h)
};

struct Model {
  std::vector<Layer> layers;
  Tensor u;  // (s, t, i)
};

// A real parameter of dt's precision, or for a complex dt the complex one with `imag` as its
// imaginary part.
Tensor param(const Tensor& real_part, const Tensor& imag, DType dt) {
  if (!is_complex(dt)) return astype(real_part, dt);
  return astype(complex(real_part, imag), dt);
}

Model make_model(int64_t steps, int n_layers, DType dt) {
  Model m;
  for (int l = 0; l < n_layers; ++l) {
    const int64_t in = l == 0 ? kInput : kState;
    const Name i = l == 0 ? Name("i") : Name("h_prev");
    const auto seed = uint64_t(l);
    const Axes h{{"h", kState}}, hi{{"h", kState}, {i, in}};
    Layer layer;
    const Tensor rho = sigmoid(randn(h, 10 + seed) + 2.0);
    if (is_complex(dt)) {  // λ = ρ e^{iθ} = exp(log ρ + iθ), θ in (-π/4, π/4)
      layer.lambda = astype(exp(complex(log(rho), uniform(h, 11 + seed, -0.785, 0.785))), dt);
    } else {
      layer.lambda = astype(rho, dt);
    }
    layer.w = param(randn(hi, 20 + seed) * (1.0 / double(in)), randn(hi, 21 + seed) * (1.0 / double(in)), dt);
    layer.b = param(randn(h, 30 + seed) * 0.1, randn(h, 31 + seed) * 0.1, dt);
    layer.x0 = param(randn(h, 40 + seed), randn(h, 41 + seed), dt);
    m.layers.push_back(layer);
  }
  m.u = astype(randn(Axes{{"s", kBatch}, {"t", steps}, {"i", kInput}}, 50), real_dtype(dt));
  return m;
}

// One layer over one sequence: inputs (t, in) -> states (t, h). Real inputs of a complex layer are
// lifted to complex first (the seed's B u_t with complex B, real u).
Tensor layer_states(Impl impl, const Layer& p, const Tensor& raw_inputs, Name in) {
  const Tensor inputs = raw_inputs.dtype() == p.w.dtype() ? raw_inputs : astype(raw_inputs, p.w.dtype());
  if (impl != Impl::scan) {
    Tensor drive = dot(p.w, inputs, {in}) + p.b;  // (h, t)
    const int64_t n = inputs.size("t");
    // x_{-1} = x0 enters as λ x0 added to the first drive.
    Tensor first = select(drive, "t", 0) + p.lambda * p.x0;
    drive = concat({stack({first}, "t"), slice(drive, "t", 1, n)}, "t");
    if (impl == Impl::recurrence) return linear_recurrence(p.lambda, drive, "t");
    // The seed's formulation: (a, b) pairs composed as affine maps, λ repeated along t.
    AssociativeFn affine = [](const std::vector<Tensor>& e1, const std::vector<Tensor>& e2) {
      return std::vector<Tensor>{e2[0] * e1[0], e2[0] * e1[1] + e2[1]};
    };
    const Tensor decay = transpose(broadcast(p.lambda, Axes{{"t", n}}), drive.axes().names());
    return associative_scan(affine, {decay, drive}, "t")[1];
  }
  ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor next = p.lambda * c[0] + dot(p.w, x[0], {in}) + p.b;
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next});
  };
  return scan(body, {p.x0}, {inputs}, "t").ys[0];
}

// The final state of the last layer for one sequence.
Tensor final_state(Impl impl, const std::vector<Layer>& layers, const Tensor& u) {
  Tensor x = u;
  Name in = "i";
  for (const Layer& l : layers) {
    x = layer_states(impl, l, x, in);
    x = rename(x, "h", "h_prev");
    in = "h_prev";
  }
  return rename(select(x, "t", x.size("t") - 1), "h_prev", "h");
}

// The tensor a Jacobian is taken w.r.t.: one of the first layer's, or the inputs u.
Tensor argument(const std::vector<Layer>& layers, const Tensor& u, Wrt wrt) {
  switch (wrt) {
    case Wrt::lambda: return layers[0].lambda;
    case Wrt::w: return layers[0].w;
    case Wrt::b: return layers[0].b;
    case Wrt::x0: return layers[0].x0;
    default: return u;
  }
}

// The final state as a function of argument(layers, u, wrt), closing over the rest.
Function with_argument(Impl impl, const std::vector<Layer>& layers, const Tensor& u, Wrt wrt) {
  return [impl, &layers, u, wrt](const std::vector<Tensor>& a) {
    std::vector<Layer> changed = layers;
    Tensor input = u;
    switch (wrt) {
      case Wrt::lambda: changed[0].lambda = a[0]; break;
      case Wrt::w: changed[0].w = a[0]; break;
      case Wrt::b: changed[0].b = a[0]; break;
      case Wrt::x0: changed[0].x0 = a[0]; break;
      default: input = a[0]; break;
    }
    return final_state(impl, changed, input);
  };
}

void run(benchmark::State& state, Impl impl, int n_layers, DType dt, Wrt wrt, JacobianOptions::Mode mode) {
  const int64_t steps = state.range(0);
  Model m = make_model(steps, n_layers, dt);
  for (auto _ : state) {
    for (int64_t s = 0; s < kBatch; ++s) {
      const Tensor u = select(m.u, "s", s);
      if (wrt == Wrt::forward) {
        Tensor y = final_state(impl, m.layers, u);
        benchmark::DoNotOptimize(y.data_ptr());
        continue;
      }
      // Differentiate w.r.t. one tensor of the first layer (or the inputs), closing over the rest.
      Tensor j = jacobian(with_argument(impl, m.layers, u, wrt), {argument(m.layers, u, wrt)}, {mode})[0];
      benchmark::DoNotOptimize(j.data_ptr());
    }
  }
  state.SetComplexityN(steps);
}

// The same per-sequence Jacobians (one complex128 layer through scan) of all 16 sequences at once:
// nmap over the sequences of the function that takes one sequence's Jacobian (the seed's
// jit(vmap(jacrev)); `run`'s loop over the sequences is the baseline).
void run_nmapped(benchmark::State& state, Wrt wrt, JacobianOptions::Mode mode) {
  const int64_t steps = state.range(0);
  const Model m = make_model(steps, 1, DType::c128);
  const MultiFunction per_sequence = [&](const std::vector<Tensor>& a) {
    const Tensor& u = a[0];
    return std::vector<Tensor>{
        jacobian(with_argument(Impl::scan, m.layers, u, wrt), {argument(m.layers, u, wrt)}, {mode})[0]};
  };
  for (auto _ : state) benchmark::DoNotOptimize(nmap(per_sequence, {"s"}, {m.u})[0].data_ptr());
  state.SetComplexityN(steps);
}

// ---- --s5_values=T: values for bench/compare_jax_s5.py ----
// {"axes": [...], "shape": [...], "re": [...], "im": [...]}, row-major in `order`.
void print_tensor(std::ostream& out, const Tensor& t, const AxisList& order) {
  const std::vector<std::complex<double>> v = t.to_complex_vector(order);
  out << "{\"axes\": [";
  for (int k = 0; k < order.size(); ++k) out << (k ? ", " : "") << '"' << order[k].str() << '"';
  out << "], \"shape\": [";
  for (int k = 0; k < order.size(); ++k) out << (k ? ", " : "") << t.size(order[k]);
  out.precision(17);
  for (const char* part : {"re", "im"}) {
    out << "], \"" << part << "\": [";
    for (size_t k = 0; k < v.size(); ++k) out << (k ? ", " : "") << (part[0] == 'r' ? v[k].real() : v[k].imag());
  }
  out << "]}";
}

// One layer, complex128, sequence 0: the inputs and the Jacobians of the final state w.r.t. λ, W
// and u by both implementations and both modes.
int print_values(int64_t steps) {
  const Model m = make_model(steps, 1, DType::c128);
  const Layer& p = m.layers[0];
  const Tensor u = select(m.u, "s", 0);
  std::cout << "{\"T\": " << steps << ",\n\"lambda\": ";
  print_tensor(std::cout, p.lambda, {"h"});
  std::cout << ",\n\"W\": ";
  print_tensor(std::cout, p.w, {"h", "i"});
  std::cout << ",\n\"b\": ";
  print_tensor(std::cout, p.b, {"h"});
  std::cout << ",\n\"x0\": ";
  print_tensor(std::cout, p.x0, {"h"});
  std::cout << ",\n\"u\": ";
  print_tensor(std::cout, u, {"t", "i"});
  for (Impl impl : {Impl::scan, Impl::recurrence, Impl::associative})
    for (auto mode : {JacobianOptions::Mode::reverse, JacobianOptions::Mode::forward})
      for (Wrt wrt : {Wrt::lambda, Wrt::w, Wrt::u}) {
        const Tensor arg = argument(m.layers, u, wrt);
        const Tensor j = jacobian(with_argument(impl, m.layers, u, wrt), {arg}, {mode})[0];
        AxisList order{"h"};
        for (Name n : arg.axes().names()) order.push_back(n == Name("h") ? Name("h_in") : n);
        std::cout << ",\n\"" << (impl == Impl::scan ? "scan" : impl == Impl::recurrence ? "linear_recurrence" : "associative_scan") << "/"
                  << (mode == JacobianOptions::Mode::reverse ? "reverse" : "forward") << "/"
                  << (wrt == Wrt::lambda ? "lambda" : wrt == Wrt::w ? "W" : "u") << "\": ";
        print_tensor(std::cout, j, order);
      }
  std::cout << "}\n";
  return 0;
}

// `--s5_calls=T,WRT,N`: N calls of the one-layer complex128 scan Jacobian w.r.t. WRT (lambda, W or
// u, in reverse mode; lambda/forward, W/forward or u/forward in forward mode; all 16 sequences)
// and nothing else, for instruction counts (bench/RESULTS.md: cachegrind at two T, the difference
// per sequence-step).
int run_calls(const std::string& spec) {
  const size_t c1 = spec.find(','), c2 = spec.rfind(',');
  if (c1 == std::string::npos || c2 == c1) {
    std::cerr << "bench_s5: --s5_calls=T,WRT,N (WRT: lambda, W or u, each with /forward for forward mode)\n";
    return 2;
  }
  const int64_t steps = std::stoll(spec.substr(0, c1));
  std::string name = spec.substr(c1 + 1, c2 - c1 - 1);
  const int calls = std::stoi(spec.substr(c2 + 1));
  auto mode = JacobianOptions::Mode::reverse;
  if (name.ends_with("/forward")) {
    name.resize(name.size() - 8);
    mode = JacobianOptions::Mode::forward;
  }
  const Wrt wrt = name == "lambda" ? Wrt::lambda : name == "W" ? Wrt::w : Wrt::u;
  const Model m = make_model(steps, 1, DType::c128);
  for (int call = 0; call < calls; ++call)
    for (int64_t s = 0; s < kBatch; ++s) {
      const Tensor u = select(m.u, "s", s);
      const Function f = with_argument(Impl::scan, m.layers, u, wrt);
      benchmark::DoNotOptimize(jacobian(f, {argument(m.layers, u, wrt)}, {mode})[0].data_ptr());
    }
  return 0;
}

void register_all() {
  const char* impls[] = {"scan", "linear_recurrence", "associative_scan"};
  const char* wrts[] = {"forward", "jac_lambda", "jac_W", "jac_b", "jac_x0", "jac_u"};
  for (int impl = 0; impl < 3; ++impl)
    for (int layers = 1; layers <= 2; ++layers)
      for (DType dt : {DType::f64, DType::f32, DType::c128})
        for (int w = 0; w < 6; ++w) {
          std::string name = std::string("S5/") + impls[impl] + "/layers:" + std::to_string(layers) + "/" +
                             dtype_name(dt) + "/" + wrts[w];
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
            run(st, Impl(impl), layers, dt, Wrt(w), JacobianOptions::Mode::reverse);
          })->RangeMultiplier(2)->Range(32, 512)->Complexity(benchmark::oN)->Unit(benchmark::kMillisecond)->MinTime(0.05);
          if (w == 0) continue;
          // forward mode: one sweep per argument with its basis as batch axes of the tangent
          benchmark::RegisterBenchmark((name + "/forward_mode").c_str(), [=](benchmark::State& st) {
            run(st, Impl(impl), layers, dt, Wrt(w), JacobianOptions::Mode::forward);
          })->RangeMultiplier(2)->Range(32, 512)->Complexity(benchmark::oN)->Unit(benchmark::kMillisecond)->MinTime(0.05);
        }
  for (Wrt w : {Wrt::lambda, Wrt::w, Wrt::u})
    for (auto mode : {JacobianOptions::Mode::reverse, JacobianOptions::Mode::forward}) {
      const std::string name = std::string("S5/scan_nmap/layers:1/complex128/") +
                               (w == Wrt::lambda ? "jac_lambda" : w == Wrt::w ? "jac_W" : "jac_u") +
                               (mode == JacobianOptions::Mode::forward ? "/forward_mode" : "");
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run_nmapped(st, w, mode); })
          ->RangeMultiplier(2)
          ->Range(32, 512)
          ->Complexity(benchmark::oN)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.05);
    }
}

}  // namespace

int main(int argc, char** argv) {
  for (int k = 1; k < argc; ++k)
    if (std::string_view(argv[k]).starts_with("--s5_values=")) return print_values(std::atoll(argv[k] + 12));
    else if (std::string_view(argv[k]).starts_with("--s5_calls=")) return run_calls(argv[k] + 11);
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
