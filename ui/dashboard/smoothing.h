// TensorBoard's debiased exponential moving average, the smoothing of the Dashboard's line
// charts. A pure function so that tests pin it against hand-computed numbers.
#pragma once

#include <QVector>

namespace lattice::ui {

// last = last * weight + (1 - weight) * x over the finite points, divided by
// 1 - weight^(finite points so far) (the debias of an EMA that starts at 0). A non-finite x
// (NaN, ±inf) is passed through unchanged and does not move the average; weight 0 returns the
// input; weight is clamped to [0, 0.999]. The result has one value per input value.
QVector<double> emaSmooth(const QVector<double>& values, double weight);

}  // namespace lattice::ui
