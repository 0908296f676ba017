// How the Studio writes numbers for people: sizes, rates, counts, and plurals (without a
// translation loaded, Qt's "%n item(s)" stays as written).
#pragma once

#include <QString>

namespace lattice::ui {

QString humanBytes(double bytes);                                // "80.0 GiB", "512 MiB"
QString humanFlops(double flopsPerSecond);                       // "989 TFLOP/s", "95.2 GFLOP/s"
QString humanCount(double n);                                    // "124.4 M", "6.66 B"
QString plural(long long n, const char* one, const char* many);  // "1 node", "8 nodes"

}  // namespace lattice::ui
