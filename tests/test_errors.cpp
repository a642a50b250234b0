// Every user error is a tenax::Error subclass whose message names the op, the axes and the sizes.
#include <gtest/gtest.h>

#include <string>

#include <tenax/tenax.h>

#include "tenax/backends/kernels.h"

namespace tenax {
namespace {

// Runs f, expects exception E, and checks that every fragment appears in its message.
template <class E, class F>
void expect_error(F f, std::initializer_list<const char*> fragments) {
  try {
    f();
    FAIL() << "no exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    static_assert(std::is_base_of_v<Error, E>);
    for (const char* frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  }
}

const Tensor a3 = tensor({1.0, 2.0, 3.0}, "i");

TEST(Errors, SameAxisNameDifferentSizes) {
  Tensor b4 = tensor({1.0, 2.0, 3.0, 4.0}, "i");
  expect_error<ShapeError>([&] { (void)add(a3, b4); },
                           {"[add]", "axis 'i'", "size 3", "operand 0 (i=3)", "size 4", "operand 1 (i=4)"});
}

TEST(Errors, UnknownAxis) {
  expect_error<AxisError>([&] { (void)sum(a3, {"j"}); }, {"[sum]", "unknown axis 'j'", "(i=3)"});
  expect_error<AxisError>([&] { (void)a3.size("k"); }, {"unknown axis 'k'"});
  expect_error<AxisError>([&] { (void)transpose(a3, {"q"}); }, {"[transpose]", "'q'"});
  expect_error<AxisError>([&] { (void)dot(a3, tensor({1.0}, "j"), {"i"}); },
                          {"[dot]", "contraction axis 'i'", "both operands", "(j=1)"});
}

TEST(Errors, WrongDtype) {
  Tensor f32 = astype(a3, DType::f32);
  expect_error<DTypeError>([&] { (void)mul(a3, f32); }, {"[mul]", "float64", "float32", "astype"});
  Tensor mask = greater(a3, scalar(1.0));
  expect_error<DTypeError>([&] { (void)exp(mask); }, {"[exp]", "bool"});
  expect_error<DTypeError>([&] { (void)where(a3, a3, a3); }, {"[where]", "condition must be bool"});
  expect_error<DTypeError>([&] { (void)a3.data<float>(); }, {"float64", "not float32"});
}

TEST(Errors, DiagonalNeedsTwoAxesOfOneSize) {
  const Tensor m = zeros(Axes{{"i", 2}, {"j", 3}});
  expect_error<ShapeError>([&] { (void)diagonal(m, "i", "j"); },
                           {"[diagonal]", "'i' and 'j'", "(i=2, j=3)", "differ in size"});
  expect_error<AxisError>([&] { (void)diagonal(m, "i", "i"); }, {"[diagonal]", "both 'i'"});
  expect_error<AxisError>([&] { (void)diagonal(m, "i", "k"); }, {"[diagonal]", "unknown axis 'k'"});
}

TEST(Errors, MatrixOpsNameThemselvesWhenGivenOneAxisTwice) {
  const Tensor a = tensor({{2.0, 0.0}, {0.0, 2.0}}, "i", "j");
  const Tensor b = tensor({1.0, 1.0}, "i");
  expect_error<AxisError>([&] { (void)cholesky(a, "i", "i"); }, {"[cholesky]", "both 'i'", "(i=2, j=2)"});
  expect_error<AxisError>([&] { (void)logdet(a, "j", "j"); }, {"[logdet]", "both 'j'"});
  expect_error<AxisError>([&] { (void)triangular_solve(a, b, "i", "i"); },
                          {"[triangular_solve]", "both 'i'"});
  expect_error<AxisError>([&] { (void)solve(a, b, "i", "i", Transpose::yes); }, {"[solve]", "both 'i'"});
}

TEST(Errors, OutOfRangeSliceAndIndex) {
  expect_error<IndexError>([&] { (void)slice(a3, "i", 1, 5); }, {"[slice]", "[1, 5)", "axis 'i' of size 3"});
  expect_error<IndexError>([&] { (void)slice(a3, "i", 0, 2, 0); }, {"[slice]", "step 0"});
  expect_error<IndexError>([&] { (void)slice(a3, "i", -4); }, {"[slice]", "[-4, end)", "size 3"});
  expect_error<IndexError>([&] { (void)slice(a3, "i", 2, -2); }, {"[slice]", "[2, -2)"});
  // Negative indices count from the end; the default stop is the end (a file need not know T).
  EXPECT_EQ(slice(a3, "i", -2).to_vector(), slice(a3, "i", 1, 3).to_vector());
  EXPECT_EQ(slice(a3, "i", 0, -1).to_vector(), slice(a3, "i", 0, 2).to_vector());
  EXPECT_EQ(slice(a3, "i", -3, kToEnd, 2).to_vector(), slice(a3, "i", 0, 3, 2).to_vector());
  expect_error<IndexError>([&] { (void)select(a3, "i", 3); }, {"[select]", "index 3", "size 3"});
  expect_error<IndexError>([&] { (void)a3.at({{"i", -1}}); }, {"[at]", "index -1"});
}

TEST(Errors, AxisNamingMistakes) {
  expect_error<AxisError>([&] { (void)Axes({{"i", 2}, {"i", 3}}); }, {"'i' appears twice"});
  Tensor m = zeros(Axes{{"i", 2}, {"j", 2}});
  expect_error<AxisError>([&] { (void)rename(m, "i", "j"); }, {"[rename]", "'j' twice"});
  expect_error<AxisError>([&] { (void)broadcast(m, Axes{{"i", 4}}); }, {"[broadcast]", "already in"});
  expect_error<AxisError>([&] { (void)stack({m, m}, "i"); }, {"[stack]", "already in"});
  expect_error<AxisError>([&] { (void)Name(""); }, {"must not be empty"});
}

TEST(Errors, ShapesThatDoNotFit) {
  expect_error<ShapeError>([&] { (void)tensor(std::vector<double>{1, 2, 3}, Axes{{"i", 2}, {"j", 2}}); },
                           {"[tensor]", "3 values", "(i=2, j=2)"});
  expect_error<ShapeError>([&] { (void)a3.item(); }, {"[item]", "(i=3)"});
  expect_error<ShapeError>([&] { (void)concat({a3, zeros(Axes{{"i", 2}, {"k", 2}})}, "i"); },
                           {"[concat]", "input 1", "does not match"});
  expect_error<ShapeError>([&] { (void)cholesky(zeros(Axes{{"r", 2}, {"c", 3}}), "r", "c"); },
                           {"[cholesky]", "'r'=2", "'c'=3"});
  Axes big;
  for (const char* n : {"a", "b", "c", "d", "e", "f", "g", "h"}) big.push_back({n, 1});
  expect_error<ShapeError>([&] { big.push_back({"z", 1}); }, {"rank above 8"});
}

TEST(Errors, NumericFailuresNameTheBatchIndex) {
  Tensor spd = tensor({{2.0, 0.0}, {0.0, 2.0}}, "r", "c");
  Tensor bad = tensor({{1.0, 2.0}, {2.0, 1.0}}, "r", "c");  // indefinite
  Tensor batch = stack({spd, bad, spd}, "series");
  expect_error<NumericError>([&] { (void)cholesky(batch, "r", "c"); },
                             {"[cholesky]", "series=1", "not positive definite"});
  Tensor singular = tensor({{1.0, 2.0}, {2.0, 4.0}}, "r", "c");
  expect_error<NumericError>([&] { (void)solve(singular, tensor({1.0, 1.0}, "r"), "r", "c"); },
                             {"[solve]", "singular"});
  expect_error<AxisError>([&] { (void)solve(spd, tensor({1.0, 1.0}, "q"), "r", "c"); },
                          {"[solve]", "needs axis 'r'"});
  // With right-hand-side columns the matrices lack (solved as the kernel's columns), the failing
  // matrix is still named by its own batch index.
  Tensor mats = stack({spd, spd, singular}, "series");
  Tensor cols = randn(Axes{{"r", 2}, {"k", 5}, {"series", 3}}, 1);
  expect_error<NumericError>([&] { (void)solve(mats, cols, "r", "c"); }, {"[solve]", "series=2", "singular"});
  Tensor zero_diag = stack({spd, tensor({{1.0, 0.0}, {3.0, 0.0}}, "r", "c"), spd}, "series");
  expect_error<NumericError>([&] { (void)triangular_solve(zero_diag, cols, "r", "c"); },
                             {"[triangular_solve]", "series=1", "singular"});
}

// A tensor that claims to live on cuda:0 without any memory there: enough to reach the device
// checks on a machine without a GPU (no kernel ever touches it).
Tensor fake_cuda_tensor() {
  static double host[3] = {0, 0, 0};
  Storage* s = Storage::wrap(host, sizeof host, Device::cuda(0), [](void*) {}, nullptr);
  const int64_t strides[1] = {1};
  return Tensor(StoragePtr(s), 0, Axes{{"i", 3}}, strides, DType::f64);
}

TEST(Errors, DevicesAreExplicit) {
  if (detail::cuda_device_count() == 0) {
    // This repository's programs link the backend whenever Tenax is built with it (the installed
    // package's CPU programs, which do not, are tests/install's).
    const std::string why = detail::cuda_backend_linked()
                                ? "0 CUDA devices visible: no GPU or no driver"
                                : "this Tenax was built without its CUDA backend (TENAX_CUDA=OFF, or no nvcc at build time)";
    expect_error<DeviceError>([&] { (void)zeros(Axes{{"i", 2}}, DType::f64, Device::cuda(0)); },
                              {("[alloc] no allocator for device cuda:0 (" + why + ")").c_str()});
    expect_error<DeviceError>([&] { (void)to(a3, Device::cuda(0)); }, {("[to] cuda:0 is not available (" + why + ")").c_str()});
  }
  // Operands on two devices: the error names both, whichever devices exist.
  const Tensor g = fake_cuda_tensor();
  expect_error<DeviceError>([&] { (void)(a3 + g); },
                            {"[add] input 0 is on cpu but input 1 is on cuda:0; move one with to(device)"});
  expect_error<DeviceError>([&] { (void)g.to_vector(); }, {"the tensor is on cuda:0", "to(Device::cpu())"});
  // An op without a kernel on the device names the op and the device: never a silent trip to the
  // host. (Host memory posing as cuda:0 lets the op get as far as its kernel lookup anywhere.)
  struct HostPosingAsCuda final : Allocator {
    void* allocate(std::size_t bytes) override { return ::operator new(bytes); }
    void deallocate(void* p, std::size_t) noexcept override { ::operator delete(p); }
    [[nodiscard]] Device device() const override { return Device::cuda(0); }
    [[nodiscard]] AllocatorStats stats() const override { return {}; }
    void reset_stats() override {}
  } posing;
  set_allocator(Device::cuda(0), &posing);
  // Without a GPU the device itself is missing; with one, the kernel: both name the op and device.
  expect_error<DeviceError>([&] { (void)exp(g); }, {"[exp] ", "cuda:0"});
  set_allocator(Device::cuda(0), nullptr);
  // to() onto the device a tensor is on already is the tensor itself (no copy).
  EXPECT_EQ(to(a3, Device::cpu()).data_ptr(), a3.data_ptr());
}

TEST(Errors, AutodiffMisuse) {
  Tape tape;
  expect_error<DTypeError>([&] { (void)tape.watch(greater(a3, a3)); }, {"[watch]", "bool"});
  expect_error<AutodiffError>([&] { (void)tape.gradient(sum(a3), {a3}); }, {"[grad]", "not tracked", "watch"});
}

}  // namespace
}  // namespace tenax
