// Central finite differences in double precision against an analytic gradient, with a
// failure message that names the tensor, the index, both values and the tolerance.
#pragma once

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace lattice::testing {

inline std::vector<double> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

// Compares analytic[i] with (f(x + eps e_i) - f(x - eps e_i)) / 2 eps for the given indices
// (all when empty). Returns "" when every element agrees within
// |a - fd| <= rtol * max(|a|, |fd|) + atol, else a message for the first disagreement.
inline std::string check_gradient(const std::string& tensor, std::vector<double>& x,
                                  const std::vector<double>& analytic,
                                  const std::function<double()>& f, double rtol = 1e-6,
                                  double atol = 1e-9, std::vector<size_t> indices = {},
                                  double eps = 1e-5) {
  if (indices.empty())
    for (size_t i = 0; i < x.size(); i++) indices.push_back(i);
  for (size_t i : indices) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double plus = f();
    x[i] = saved - eps;
    const double minus = f();
    x[i] = saved;
    const double fd = (plus - minus) / (2 * eps);
    const double a = analytic[i];
    const double tol = rtol * std::max(std::abs(a), std::abs(fd)) + atol;
    if (!(std::abs(a - fd) <= tol)) {
      return tensor + "[" + std::to_string(i) + "]: analytic " + std::to_string(a) +
             " vs finite difference " + std::to_string(fd) + " (|diff| " +
             std::to_string(std::abs(a - fd)) + " > tolerance " + std::to_string(tol) + ")";
    }
  }
  return "";
}

// Sum of out[i] * weights[i]: a scalar loss whose gradient w.r.t. out is `weights`.
inline double dot(const std::vector<double>& out, const std::vector<double>& weights) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += out[i] * weights[i];
  return s;
}

}  // namespace lattice::testing
