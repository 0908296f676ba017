// TrainOptions to and from what `lattice train` reads: JSON config files (the keys are the flag
// names) and command-line flags. Everything goes through the engine's own parser
// (parse_train_flags), so a file the Studio saves is one `lattice train --config` accepts.
#pragma once

#include <QString>
#include <QStringList>
#include <set>
#include <string>
#include <vector>

#include "lattice/status.h"
#include "lattice/train_options.h"

namespace lattice::ui {

// A JSON object of flag names to values as `lattice train` flags ("--num-layers", "24", ...).
// Booleans become "--flag" / "--flag=false", lists one argument per item.
Result<std::vector<std::string>> flagsFromJson(const std::string& json_text);
// Options from such a JSON object, read like `lattice train --config` reads it but without
// validation (the Plan view shows the errors), then normalised (normalizeOptions).
Result<TrainOptions> optionsFromJson(const std::string& json_text);

// Flags whose values differ from `lattice train`'s defaults, in `lattice train --help` order,
// leaving out the flags named in `exclude` (without "--"). Parsing them back gives `options`.
QStringList changedTrainFlags(const TrainOptions& options,
                              const std::set<std::string>& exclude = {});

// A run configuration file: every flag, indented, keys in `lattice train --help` order.
Result<TrainOptions> readConfigFile(const QString& path);
Status writeConfigFile(const QString& path, const TrainOptions& options);

}  // namespace lattice::ui
