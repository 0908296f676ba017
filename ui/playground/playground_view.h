// The Playground view: pick a checkpoint (a run of the run store that saved one, or a
// directory), type a prompt, set the sampling, and read the continuation as it is generated
// with its token count, tokens/s and time to the first token. The model is loaded and run by
// a PlaygroundSession off the UI thread and kept while the same checkpoint stays selected;
// what was loaded, and why a checkpoint could not be, is shown above the prompt. A vision-language
// model's prompt takes images (dropped or attached).
#pragma once

#include <QFutureWatcher>
#include <QWidget>

#include "playground/playground_io.h"

class QCheckBox;
class QComboBox;
class QDragEnterEvent;
class QDropEvent;
class QHBoxLayout;
class QMimeData;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTabBar;
class QTextBrowser;

namespace lattice::ui {

class TokenOutput;

class PlaygroundView : public QWidget {
  Q_OBJECT

 public:
  explicit PlaygroundView(QWidget* parent = nullptr);

  // The run store whose runs' checkpoints the list offers; re-read now, off the UI thread.
  void setDatabase(const QString& path);
  const QString& database() const { return database_; }
  void refreshRuns();
  // Loads a save directory, an iter_NNNNNNN directory or a GPT-2 safetensors file (added to
  // the list when new).
  void openCheckpoint(const QString& path);
  // Selects and loads the run's checkpoint (once the run list has it).
  void openRun(qint64 runId);

  PlaygroundSettings settings() const;
  // Applies the settings; the checkpoint is loaded when the view is first shown.
  void setSettings(const PlaygroundSettings& settings);
  PlaygroundRequest request() const;

  // Completion continues the prompt as typed; Chat sends the message box as the user's turn of
  // a conversation, rendered with the checkpoint's chat template, and appends the reply as the
  // assistant's turn (playground_view_chat.cpp).
  enum class Mode { kCompletion, kChat };
  void setMode(Mode mode);
  Mode mode() const { return mode_; }
  const QList<ChatTurn>& conversation() const { return conversation_; }
  void setSystemPrompt(const QString& text);
  void newChat();                    // forgets the conversation
  QString chatTemplateText() const;  // the template's name, or why there is none
  QTextBrowser* chatLog() const { return chatLog_; }

  // Images for a vision-language model (playground_view_images.cpp): dropped on the prompt (or
  // anywhere on the view) or picked with "Attach image…", shown as a strip of thumbnails with a
  // remove button each, sent with the next request; chat mode moves them into the user's turn.
  // Refused, with a sentence in the view: no model with a vision tower loaded, a file that is
  // not a PNG or JPEG, more images than the model's prompt holds. False when any was refused.
  bool attachImages(const QStringList& paths);
  void removeImage(int index);
  const QList<PromptImage>& attachedImages() const { return attachments_; }
  QWidget* imageStrip() const { return imageStrip_; }
  QPushButton* attachButton() const { return attachButton_; }

  void generate();
  void stop();
  bool isGenerating() const { return generating_; }
  bool isLoading() const { return loads_ > 0; }

  QString loadedCheckpoint() const { return loaded_; }  // empty: none
  QString modelText() const;                            // what was loaded
  QString errorText() const;                            // empty: none
  QString statsText() const;
  TokenOutput* output() const { return output_; }
  QComboBox* checkpointList() const { return checkpoints_; }
  QPlainTextEdit* promptEdit() const { return prompt_; }
  QPushButton* generateButton() const { return generateButton_; }
  QPushButton* stopButton() const { return stopButton_; }

 signals:
  void modelLoaded(const QString& path);
  void modelFailed(const QString& message);
  void runsRead();
  // A generation ended: "length", "eod", "stop", "cancelled", or "error".
  void generationEnded(const QString& finish);

 protected:
  void showEvent(QShowEvent* event) override;
  void changeEvent(QEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;  // drops on the prompt

 private:
  QWidget* buildCheckpointBar();
  QWidget* buildSamplingPanel();
  QWidget* buildPromptPanel();
  QWidget* buildChatBar(QWidget* parent);
  QWidget* buildImageStrip(QWidget* parent);
  void pickImages();
  void updateImageStrip();
  static QStringList droppedFiles(const QMimeData* mime);
  bool startChatTurn();  // false with a message when there is nothing to send
  void updateChatLog();
  void updateModeTexts();
  void connectSession();
  void onRunsRead();
  void onSelectionChanged();
  void loadPath(const QString& path);
  void showError(const QString& text);
  void updateButtons();
  void updateStats();
  void updateLegend();
  int indexOfPath(const QString& path) const;

  PlaygroundSession* session_;
  QString database_;
  QString loaded_;   // the checkpoint the session holds
  QString asked_;    // the checkpoint last asked for
  QString pending_;  // a checkpoint to load when the view is first shown
  qint64 pendingRun_ = 0;
  int loads_ = 0;  // loads asked for and not answered yet
  bool generating_ = false;
  quint64 generation_ = 0;  // the generation whose signals are shown
  QFutureWatcher<RunCheckpointsRead> runsReader_;
  bool rereadWanted_ = false;
  QList<RunCheckpoint> runs_;
  QStringList directories_;  // opened by hand, shown after the runs

  // The live figures of the generation shown.
  int tokens_ = 0, promptTokens_ = 0;
  double firstMs_ = -1, lastMs_ = 0;
  QString finish_;

  QComboBox* checkpoints_ = nullptr;
  QLabel* model_ = nullptr;
  QLabel* error_ = nullptr;
  QSpinBox* tokensToGenerate_ = nullptr;
  QDoubleSpinBox* temperature_ = nullptr;
  QSpinBox* topK_ = nullptr;
  QDoubleSpinBox* topP_ = nullptr;
  QLineEdit* seed_ = nullptr;
  QCheckBox* stopAtEod_ = nullptr;
  QLineEdit* stopText_ = nullptr;
  QCheckBox* colour_ = nullptr;
  QLabel* legend_ = nullptr;
  QPlainTextEdit* prompt_ = nullptr;
  QPushButton* generateButton_ = nullptr;
  QPushButton* stopButton_ = nullptr;
  TokenOutput* output_ = nullptr;
  QLabel* stats_ = nullptr;

  Mode mode_ = Mode::kCompletion;
  QList<ChatTurn> conversation_;
  QString pendingReply_;                // the reply streamed so far; null when none is under way
  bool chatGeneration_ = false;         // the generation shown is a chat reply
  QString chatTemplate_, chatProblem_;  // of the loaded checkpoint
  QTabBar* modeBar_ = nullptr;
  QWidget* chatBar_ = nullptr;
  QLineEdit* system_ = nullptr;
  QLabel* templateLabel_ = nullptr;
  QTextBrowser* chatLog_ = nullptr;

  QList<PromptImage> attachments_;
  int maxImages_ = 0;     // of the loaded model; 0: it takes none (imageProblem_ says why)
  int imageTokens_ = 0;   // placeholder tokens per image
  QString imageProblem_;  // why the loaded model takes no images
  QWidget* imageStrip_ = nullptr;
  QHBoxLayout* thumbnails_ = nullptr;
  QPushButton* attachButton_ = nullptr;
};

}  // namespace lattice::ui
