// The axis algebra (named/) and the tensor type: interning, alignment, contraction specs,
// layout queries, element access, and the xtensor adaptors.
#include <gtest/gtest.h>

#include <tenax/tenax.h>

#include "expect_message.h"

#include "tenax/core/xtensor.h"
#include "tenax/named/align.h"
#include "tenax/named/contraction.h"

namespace tenax {
namespace {

TEST(Name, InterningGivesOneIdPerText) {
  Name a("time"), b(std::string("time")), c("space");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.str(), "time");
  EXPECT_TRUE(Name().empty());
}

TEST(Align, FirstOperandOrderThenNewAxes) {
  Axes a{{"i", 2}, {"j", 3}}, b{{"k", 4}, {"j", 3}, {"l", 5}};
  EXPECT_EQ(align_axes(a, b, "op").describe(), "(i=2, j=3, k=4, l=5)");
  int64_t strides[4];
  const int64_t bs[3] = {15, 5, 1};
  strides_over(b, bs, align_axes(a, b, "op"), strides);
  EXPECT_EQ(std::vector<int64_t>(strides, strides + 4), std::vector<int64_t>({0, 5, 15, 1}));
}

TEST(Contraction, ClassifiesEveryAxis) {
  Axes x{{"b", 2}, {"m", 3}, {"k", 4}}, y{{"k", 4}, {"n", 5}, {"b", 2}};
  ContractionSpec s = make_contraction(x, y, AxisList{"k"}, "dot");
  EXPECT_EQ(s.result.describe(), "(b=2, m=3, n=5)");
  EXPECT_EQ(s.summed.describe(), "(k=4)");
  EXPECT_EQ(s.batch.describe(), "(b=2)");
  EXPECT_EQ(s.free_x.describe(), "(m=3)");
  EXPECT_EQ(s.free_y.describe(), "(n=5)");
  EXPECT_MESSAGE(testing::error_message<AxisError>([&] { make_contraction(x, y, AxisList{"m"}, "dot"); }),
                 "[dot] contraction axis 'm' must be in both operands; operand 0 has (b=2, m=3, k=4), "
                 "operand 1 has (k=4, n=5, b=2)");
}

TEST(TensorLayout, StridesContiguityAndAccess) {
  Tensor t = tensor(std::vector<double>{0, 1, 2, 3, 4, 5}, Axes{{"i", 2}, {"j", 3}});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.stride("i"), 3);
  EXPECT_EQ(t.at({{"j", 2}, {"i", 1}}), 5.0);
  Tensor tt = transpose(t, {"j", "i"});
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_TRUE(tt.is_dense());
  EXPECT_EQ(tt.to_vector(), std::vector<double>({0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(tt.to_vector({"i", "j"}), t.to_vector());
  EXPECT_EQ(t.describe(), "Tensor(float64, (i=2, j=3), cpu)");
  EXPECT_EQ(scalar(2.5).item(), 2.5);
  EXPECT_EQ(zeros(Axes{{"i", 3}}, DType::f32).dtype(), DType::f32);
}

TEST(Creation, OneBracedValueOverAxes) {
  // tensor({x}, Axes{...}) did not compile: one value was ambiguous between the two vectors.
  const double x = 2.5;
  const Tensor one = tensor({x}, Axes{{"i", 1}});
  EXPECT_EQ(one.item(), 2.5);
  EXPECT_EQ(tensor({1.0, 2.0, 3.0, 4.0}, Axes{{"i", 2}, {"j", 2}}).to_vector(AxisList{"j", "i"}),
            (std::vector<double>{1.0, 3.0, 2.0, 4.0}));
  EXPECT_MESSAGE(
      [] {
        try {
          (void)tensor({1.0, 2.0}, Axes{{"i", 3}});
        } catch (const ShapeError& e) {
          return std::string(e.what());
        }
        return std::string("(no error)");
      }(),
      "[tensor] 2 values do not fill axes (i=3)");
}

// Every creation function takes a dtype where it makes sense and the device last; arange counts in
// any numeric dtype.
TEST(Creation, ArangeInEveryNumericDtypeAndTheHostAsAnExplicitDevice) {
  for (DType d : {DType::f64, DType::f32, DType::i64}) {
    const Tensor a = arange("i", 4, d, Device::cpu());
    EXPECT_EQ(a.dtype(), d);
    EXPECT_EQ(a.to_vector(), (std::vector<double>{0, 1, 2, 3}));
  }
  EXPECT_MESSAGE(testing::error_message<DTypeError>([] { (void)arange("i", 4, DType::b8); }),
                 "[arange] needs float64, float32 or int64, got bool");
  const Axes ax{{"i", 5}};
  EXPECT_EQ(randn(ax, 7, DType::f64, Device::cpu()).to_vector(), randn(ax, 7).to_vector());
  EXPECT_EQ(uniform(ax, 7, 0, 1, DType::f64, Device::cpu()).to_vector(), uniform(ax, 7).to_vector());
  EXPECT_EQ(tensor({1.0, 2.0}, "i", Device::cpu()).to_vector(), (std::vector<double>{1, 2}));
  EXPECT_EQ(scalar(2.0, DType::f32, Device::cpu()).dtype(), DType::f32);
}

TEST(Random, SeededAndDistinct) {
  Axes ax{{"i", 1000}};
  EXPECT_EQ(randn(ax, 42).to_vector(), randn(ax, 42).to_vector());
  EXPECT_NE(randn(ax, 42).to_vector(), randn(ax, 43).to_vector());
  Tensor u = uniform(ax, 1, 2.0, 3.0);
  EXPECT_GE(-max(-u).item(), 2.0);
  EXPECT_LT(max(u).item(), 3.0);
  EXPECT_NEAR(mean(u).item(), 2.5, 0.05);
}

TEST(Xtensor, AdaptorIsZeroCopyAndStrided) {
  Tensor t = tensor(std::vector<double>{0, 1, 2, 3, 4, 5}, Axes{{"i", 2}, {"j", 3}});
  auto view = to_xtensor<double>(slice(t, "j", 0, 3, 2));  // columns 0 and 2
  EXPECT_EQ(view.shape()[1], 2u);
  EXPECT_EQ(view(1, 1), 5.0);
  view(0, 1) = 42.0;  // writes through to the tensor's buffer
  EXPECT_EQ(t.at({{"i", 0}, {"j", 2}}), 42.0);
}

TEST(Xtensor, MovedArrayIsAdoptedWithoutACopy) {
  xt::xarray<double> a = {{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}};
  const double* data = a.data();
  Tensor t = from_xtensor(std::move(a), AxisList{"r", "c"});
  EXPECT_EQ(t.data<double>(), data);
  EXPECT_EQ(sum(t, {"r"}).to_vector(), std::vector<double>({5, 7, 9}));
  xt::xarray<double, xt::layout_type::column_major> cm = {{1.0, 2.0}, {3.0, 4.0}};
  Tensor tc = from_xtensor(xt::xarray<double>(cm), AxisList{"r", "c"});  // converted: row-major copy
  EXPECT_EQ(tc.at({{"r", 1}, {"c", 0}}), 3.0);
  xt::xarray<double> b = {1.0, 2.0, 3.0};
  Tensor e = from_xtensor(b * 2.0 + 1.0, AxisList{"k"});  // a lazy expression: evaluated once
  EXPECT_EQ(e.to_vector(), std::vector<double>({3, 5, 7}));
  EXPECT_MESSAGE(testing::error_message<AxisError>([&] {
                   from_xtensor(xt::xarray<double>({1.0, 2.0}), AxisList{"r", "c"});
                 }),
                 "[from_xtensor] the array has 1 dimensions but (r, c) names 2");
}

}  // namespace
}  // namespace tenax
