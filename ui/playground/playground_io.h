// What the Playground reads and keeps, as plain functions (any thread): the runs of the run
// store that saved checkpoints (their `--save` directory, recorded in the run's configuration,
// holding a latest_checkpointed_iteration.txt), what a directory the user picked holds (a save
// directory or one iter_NNNNNNN directory), and its QSettings (group "playground": the
// sampling settings, the prompt, the last checkpoint, the shading).
#pragma once

#include <QList>
#include <QSettings>
#include <QString>

#include "lattice/storage/run_store.h"
#include "playground/playground_session.h"

namespace lattice::ui {

struct RunCheckpoint {
  qint64 runId = 0;
  QString runName;
  QString saveDir;    // the run's --save, absolute
  int iteration = 0;  // its latest checkpointed iteration
};

struct RunCheckpointsRead {
  QList<RunCheckpoint> runs;  // newest run first
  QString problem;            // the store could not be opened or read; empty when fine
};

// The run's --save directory from its recorded configuration; empty when it saved nowhere.
// A relative path is kept as recorded (it was relative to where the run started).
QString runSaveDir(const storage::RunInfo& run);

// The latest iteration a save directory recorded (latest_checkpointed_iteration.txt), or
// the iteration of an iter_NNNNNNN directory; -1 when `dir` is neither.
int checkpointIteration(const QString& dir);

// Every run of `database` whose save directory holds a checkpoint. A missing database file
// is no runs, not an error (a run creates it).
RunCheckpointsRead readRunCheckpoints(const QString& database);

struct PlaygroundSettings {
  PlaygroundRequest request;  // the prompt and the sampling settings
  QString checkpoint;         // the directory last loaded; empty: none
  bool colourTokens = true;
};

void savePlaygroundSettings(QSettings& settings, const PlaygroundSettings& playground);
PlaygroundSettings loadPlaygroundSettings(QSettings& settings);

}  // namespace lattice::ui
