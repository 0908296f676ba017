// What the tests against a float64 PyTorch reference share: the Python that has Debian's
// python3-torch (installers/install-deps.sh --tests), whether it can import torch, and token rows
// as the reference scripts read them.
#pragma once

#include <QJsonArray>
#include <QJsonDocument>
#include <QString>
#include <cstdint>
#include <vector>

#include "common/process.h"

namespace lattice::testing {

inline constexpr const char* kPython = "/usr/bin/python3";

inline bool torch_available() {
  return run_process(kPython, {"-c", "import torch"}, {}, 60000).exit_code == 0;
}

// ids (B * T) as a JSON array of B rows of T ids.
inline QString rows_json(const std::vector<int32_t>& ids, int T) {
  QJsonArray rows;
  for (size_t b = 0; b * T < ids.size(); b++) {
    QJsonArray row;
    for (int t = 0; t < T; t++) row.append(ids[b * T + t]);
    rows.append(row);
  }
  return QJsonDocument(rows).toJson(QJsonDocument::Compact);
}

}  // namespace lattice::testing
