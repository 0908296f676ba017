// The host's fp16 conversions of lattice/cuda_kernels.h (to_fp16, from_fp16) are IEEE
// binary16 as __float2half_rn / __half2float compute them on the device: the parity tests
// round their inputs with them and compare the device's convert bit for bit against them, so
// they must be right on the CPU first. The reference here is independent of the bit tricks:
// the nearest of all finite fp16 values (ties to the even significand), inf from 65520 up.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "lattice/cuda_kernels.h"

namespace cu = lattice::kernels::cuda;

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Every finite non-negative fp16 value with its bits, ascending (bits 0x0000..0x7bff), as
// exact doubles computed from the definition: (-1)^s 2^(e-15) (1 + m/1024), subnormals
// 2^-14 (m/1024).
struct Table {
  std::vector<double> value;
  Table() {
    for (uint32_t b = 0; b < 0x7c00u; b++) {
      const int e = static_cast<int>(b >> 10), m = static_cast<int>(b & 0x3ffu);
      value.push_back(e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15));
    }
  }
};
const Table& table() {
  static const Table t;
  return t;
}

// The reference rounding of x to fp16 bits.
uint16_t reference_fp16(float x) {
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::abs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7c00;  // the tie above 65504 rounds to the even: inf
  const std::vector<double>& v = table().value;
  const size_t hi = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), a) - v.begin());
  if (hi == 0) return sign;
  if (hi == v.size()) return sign | static_cast<uint16_t>(v.size() - 1);
  const size_t lo = hi - 1;
  const double below = a - v[lo], above = v[hi] - a;
  size_t pick = below < above ? lo : hi;
  if (below == above) pick = (lo % 2 == 0) ? lo : hi;  // even significand
  return sign | static_cast<uint16_t>(pick);
}

}  // namespace

class Fp16Conversions : public QObject {
  Q_OBJECT
 private slots:
  void known_values() {
    const struct {
      uint16_t bits;
      float value;
    } known[] = {
        {0x0000, 0.0f},     {0x3c00, 1.0f},     {0xc000, -2.0f},    {0x3555, 0.333251953f},
        {0x7bff, 65504.0f}, {0x0400, 0x1p-14f}, {0x0001, 0x1p-24f}, {0x03ff, 1023 * 0x1p-24f},
        {0x8001, -0x1p-24f}};
    for (const auto& k : known) {
      QCOMPARE(cu::from_fp16(cu::fp16{k.bits}), k.value);
      QCOMPARE(cu::to_fp16(k.value).bits, k.bits);
    }
    QVERIFY(std::isinf(cu::from_fp16(cu::fp16{0x7c00})) && cu::from_fp16(cu::fp16{0x7c00}) > 0);
    QVERIFY(std::isinf(cu::from_fp16(cu::fp16{0xfc00})) && cu::from_fp16(cu::fp16{0xfc00}) < 0);
    QVERIFY(std::isnan(cu::from_fp16(cu::fp16{0x7e00})));
    QVERIFY(std::signbit(cu::from_fp16(cu::fp16{0x8000})));
  }

  void the_range_ends_in_inf_not_in_a_saturated_65504() {
    // The loss scaler relies on it: an overflowing fp16 gradient must read as inf.
    QCOMPARE(cu::to_fp16(65519.99f).bits, uint16_t{0x7bff});
    QCOMPARE(cu::to_fp16(65520.0f).bits, uint16_t{0x7c00});
    QCOMPARE(cu::to_fp16(-1e6f).bits, uint16_t{0xfc00});
    QCOMPARE(cu::to_fp16(std::numeric_limits<float>::infinity()).bits, uint16_t{0x7c00});
    QCOMPARE(cu::to_fp16(std::numeric_limits<float>::max()).bits, uint16_t{0x7c00});
    QVERIFY(std::isnan(cu::from_fp16(cu::to_fp16(std::numeric_limits<float>::quiet_NaN()))));
    // A NaN whose payload sits in the low 13 bits only must not turn into inf.
    QVERIFY(std::isnan(cu::from_fp16(cu::to_fp16(float_of(0x7f800001u)))));
  }

  void ties_round_to_even_and_subnormals_are_kept() {
    QCOMPARE(cu::to_fp16(1.0f + 0x1p-11f).bits, uint16_t{0x3c00});      // tie: down to even
    QCOMPARE(cu::to_fp16(1.0f + 3 * 0x1p-11f).bits, uint16_t{0x3c02});  // tie: up to even
    QCOMPARE(cu::to_fp16(0x1p-25f).bits, uint16_t{0x0000});             // tie: down to 0
    QCOMPARE(cu::to_fp16(0x1.000002p-25f).bits, uint16_t{0x0001});      // just above the tie
    QCOMPARE(cu::to_fp16(3 * 0x1p-25f).bits, uint16_t{0x0002});         // tie: up to even
    QCOMPARE(cu::to_fp16(0x1p-14f - 0x1p-26f).bits, uint16_t{0x0400});  // carry into normal
    QCOMPARE(cu::to_fp16(1e-30f).bits, uint16_t{0x0000});
    QCOMPARE(cu::to_fp16(-1e-30f).bits, uint16_t{0x8000});
  }

  void every_fp16_value_round_trips() {
    for (uint32_t b = 0; b <= 0xffffu; b++) {
      const cu::fp16 h{static_cast<uint16_t>(b)};
      const float f = cu::from_fp16(h);
      const bool nan = (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
      if (nan) {
        QVERIFY2(std::isnan(f), qPrintable(QString("fp16 0x%1 is a NaN").arg(b, 4, 16)));
        continue;
      }
      QVERIFY2(cu::to_fp16(f).bits == b, qPrintable(QString("fp16 0x%1 -> %2 -> 0x%3")
                                                        .arg(b, 4, 16)
                                                        .arg(static_cast<double>(f), 0, 'g', 9)
                                                        .arg(cu::to_fp16(f).bits, 4, 16)));
      if ((b & 0x7fffu) < 0x7c00u)  // finite: the widening is exact
        QVERIFY(static_cast<double>(std::abs(f)) == table().value[b & 0x7fffu]);
    }
  }

  void random_floats_round_like_the_reference() {
    // Every float near the fp16 range (exponents 2^-27 .. 2^17, random significands), plus
    // the midpoints between neighbouring fp16 values and their float neighbours.
    std::mt19937_64 rng(17);
    std::vector<float> xs;
    for (int i = 0; i < 400000; i++) {
      const uint32_t exponent = 100 + static_cast<uint32_t>(rng() % 45);  // 2^-27 .. 2^17
      const uint32_t u = (static_cast<uint32_t>(rng() & 1) << 31) | (exponent << 23) |
                         static_cast<uint32_t>(rng() & 0x7fffffu);
      xs.push_back(float_of(u));
    }
    const std::vector<double>& v = table().value;
    for (size_t i = 0; i + 1 < v.size(); i += 7) {
      const float mid = static_cast<float>((v[i] + v[i + 1]) / 2);  // exact in float
      xs.push_back(mid);
      xs.push_back(std::nextafter(mid, 0.0f));
      xs.push_back(std::nextafter(mid, 1e9f));
    }
    for (float x : xs) {
      const uint16_t want = reference_fp16(x), got = cu::to_fp16(x).bits;
      QVERIFY2(got == want, qPrintable(QString("to_fp16(%1) (bits 0x%2) = 0x%3, reference 0x%4")
                                           .arg(static_cast<double>(x), 0, 'g', 12)
                                           .arg(bits_of(x), 8, 16)
                                           .arg(got, 4, 16)
                                           .arg(want, 4, 16)));
    }
  }
};

QTEST_APPLESS_MAIN(Fp16Conversions)
#include "test_fp16_conversions.moc"
