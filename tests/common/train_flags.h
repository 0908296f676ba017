// Training options and layouts made from command-line flags, as a user's flags make them, for
// tests that build models or plans directly. A flag the parser refuses stops the test: it is
// the test's own mistake, not a case under test.
#pragma once

#include <QStringList>
#include <QtGlobal>

#include <string>
#include <vector>

#include "lattice/layout.h"
#include "lattice/train_options.h"

namespace lattice::testing {

inline TrainOptions options(const QStringList& flags) {
  std::vector<std::string> args;
  for (const QString& s : flags) args.push_back(s.toStdString());
  Result<TrainOptions> o = parse_train_flags(args);
  if (!o) qFatal("bad test flags: %s", o.status().message().c_str());
  return *o;
}

inline ParallelLayout layout_of(const TrainOptions& o, int world) {
  Result<ParallelLayout> l = make_layout(o, world);
  if (!l) qFatal("bad test layout: %s", l.status().message().c_str());
  return *l;
}

}  // namespace lattice::testing
