// Number formatting shared by the views.
#include "plan/text_format.h"

namespace lattice::ui {

QString humanBytes(double bytes) {
  const double gib = 1024.0 * 1024 * 1024;
  if (bytes >= gib) return QString::number(bytes / gib, 'f', bytes >= 100 * gib ? 0 : 1) + " GiB";
  return QString::number(bytes / (1024.0 * 1024), 'f', 0) + " MiB";
}

QString humanFlops(double f) {
  if (f >= 1e12) return QString::number(f / 1e12, 'f', f >= 1e14 ? 0 : 1) + " TFLOP/s";
  return QString::number(f / 1e9, 'f', 1) + " GFLOP/s";
}

QString humanCount(double n) {
  if (n >= 1e9) return QString::number(n / 1e9, 'f', n >= 1e11 ? 1 : 2) + " B";
  if (n >= 1e6) return QString::number(n / 1e6, 'f', 1) + " M";
  if (n >= 1e3) return QString::number(n / 1e3, 'f', 1) + " K";
  return QString::number(n, 'f', 0);
}

QString plural(long long n, const char* one, const char* many) {
  return QStringLiteral("%1 %2").arg(n).arg(QString::fromUtf8(n == 1 ? one : many));
}

}  // namespace lattice::ui
