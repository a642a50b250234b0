#pragma once
// The Kalman tool's report: the parameter table, the states and forecasts as CSV, and the picture.
#include <filesystem>
#include <string>

#include "kalman.h"

namespace kalman {

/// One line per element of each trainable parameter: the reference value (the truth, or the
/// start), the fitted value, its standard error ("-" when there is none) and the difference.
void print_parameters(const tenax::Model& model, const tenax::Model& reference, const char* reference_title,
                      const FitResult& fit, const Uncertainty& unc);

/// Per series and time step: the observations (a missing one as an empty cell), the filtered and
/// smoothed states and the smoothed standard deviations; per series and step ahead: the forecast
/// means and standard deviations. `out` holds the model's outputs filtered, smoothed,
/// smoothed_var, forecast and forecast_var. Throws tenax::Error when a file cannot be written.
void write_tables(const std::string& states_path, const std::string& forecast_path, const tenax::Tensor& y,
                  const tenax::TensorMap& out);

/// Whether gnuplot can be run.
bool have_gnuplot();

/// Series 0 with gnuplot: observation 0, the true state 0 (when `x_true`), the filtered and smoothed
/// state 0 with a 95% band, and the forecasts of observation 0 with theirs.
void plot(const std::filesystem::path& png, const tenax::Tensor& y, const tenax::Tensor* x_true,
          const tenax::TensorMap& out);

}  // namespace kalman
