// Opening a run database: refusing foreign and newer files untouched, creating and
// migrating ours (PRAGMA user_version), and the connection settings (WAL, busy timeout).
#pragma once

#include <string>

#include "lattice/status.h"
#include "sqlite_db.h"

namespace lattice::storage {

Result<Database> open_run_database(const std::string& path);

}  // namespace lattice::storage
