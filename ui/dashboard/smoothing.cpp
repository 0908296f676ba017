// emaSmooth: the formula of TensorBoard's scalars plugin (vz_line_chart2 resmoothDataset).
#include "dashboard/smoothing.h"

#include <algorithm>
#include <cmath>

namespace lattice::ui {

QVector<double> emaSmooth(const QVector<double>& values, double weight) {
  weight = std::clamp(weight, 0.0, 0.999);
  QVector<double> out(values.size());
  double last = 0;
  int finite = 0;
  double debias = 1;  // weight^finite
  for (int i = 0; i < values.size(); i++) {
    const double x = values[i];
    if (!std::isfinite(x)) {
      out[i] = x;
      continue;
    }
    last = last * weight + (1 - weight) * x;
    finite++;
    debias *= weight;
    out[i] = weight == 0 ? x : last / (1 - debias);
  }
  return out;
}

}  // namespace lattice::ui
