// Opening a run database: refusing foreign and newer files untouched, creating and
// migrating ours (PRAGMA user_version), and the connection settings (WAL, busy timeout).
#pragma once

#include <string>

#include "lattice/status.h"
#include "lattice/storage/run_store.h"
#include "sqlite_db.h"

namespace lattice::storage {

Result<Database> open_run_database(const std::string& path,
                                   JournalMode journal = JournalMode::kAuto);
// OpenOptions::read_only: the file must exist and carry this build's schema.
Result<Database> open_run_database_read_only(const std::string& path);

// Ok when `path` is absent, empty, or a Lattice run database this build can read; judged from
// the raw header, read through the VFS before any connection opens it (Note "refuse before
// touching" in schema.cpp, Note "header through the VFS" in file_header.h).
Status check_run_database_header(const std::string& path);

}  // namespace lattice::storage
