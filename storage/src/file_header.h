// The first 100 bytes of a database file (sqlite.org/fileformat.html "The Database Header"),
// read through SQLite's own file layer so that reading them never releases a lock of a
// connection this process holds. Not a parser of the rest of the file.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace lattice::storage {

// Note "header through the VFS": on POSIX, closing any descriptor of a file drops every fcntl
// lock the process holds on that file, whichever descriptor took them (sqlite.org/howtocorrupt
// §2.2). A header read with std::ifstream (or fopen, open, QFile) while a connection of this
// process has the database open therefore drops that connection's shared lock; a trainer
// process that closes its own connection next takes the exclusive lock, believes it is the
// last user, checkpoints and deletes -wal and -shm while this process still maps them, and
// this process's connections then read a stale or "malformed" database until it restarts.
// SQLite's unix VFS keeps one record per inode for all of a process's files and defers closing
// a descriptor while a lock on that inode is held, so read_file_header() opens the file through
// the default VFS (read-only, as a main database) instead. Unlike a connection, that reads the
// raw bytes only: it never replays a WAL, rolls back a hot journal or creates -wal/-shm beside
// a foreign file (Note "refuse before touching" in schema.cpp). Nothing outside SQLite may
// open a run database, its -wal or its -shm while a connection may exist.
struct FileHeader {
  std::array<unsigned char, 100> bytes{};
  std::size_t size = 0;  // bytes of the header the file holds, 1..100

  // The 16-byte magic "SQLite format 3\0" and a whole header.
  bool is_sqlite() const;
  std::int32_t user_version() const;    // offset 60, big-endian
  std::int32_t application_id() const;  // offset 68, big-endian
  // The file format read version (offset 18) is 2 in WAL mode, 1 with a rollback journal.
  bool wal() const { return bytes[18] == 2; }
};

// The header of `path` through the VFS (Note "header through the VFS"); nullopt when the file
// is absent, empty, or cannot be opened for reading (SQLite's own open then says why).
std::optional<FileHeader> read_file_header(const std::string& path);

}  // namespace lattice::storage
