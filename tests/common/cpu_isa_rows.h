// Runs every function of a Qt Test suite once per copy of the CPU kernels (Note [CPU dispatch],
// kernels/cpu/README.md): initTestCase_data() calls add_cpu_isa_rows(), init() calls
// select_row_isa() and QSKIPs with its message when the row's ISA is not available here, so a
// path this CPU lacks shows as skipped, by name, never as passed.
#pragma once

#include <QtTest/QtTest>

#include "lattice/cpu_isa.h"

namespace lattice::testing {

inline void add_cpu_isa_rows() {
  QTest::addColumn<QString>("isa");
  for (kernels::CpuIsa isa : kernels::kAllCpuIsas)
    QTest::newRow(kernels::cpu_isa_name(isa)) << QString(kernels::cpu_isa_name(isa));
}

// Makes the kernels run the current row's ISA; returns why it cannot ("" when it runs).
inline QString select_row_isa() {
  QFETCH_GLOBAL(QString, isa);
  const auto parsed = kernels::parse_cpu_isa(isa.toStdString());
  if (!parsed) return "unknown ISA row " + isa;
  if (!kernels::set_cpu_isa(*parsed))
    return QString("%1 is not available: this CPU has no %2")
        .arg(isa, kernels::cpu_isa_label(*parsed));
  return {};
}

}  // namespace lattice::testing
