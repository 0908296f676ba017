// The Playground's output: the prompt's text, then each generated token's text as it arrives,
// optionally shaded by the token's probability under the model (probabilityColor; the
// tooltip gives the id and log-probability). Read-only; selectable and copyable.
#pragma once

#include <QList>
#include <QTextEdit>

namespace lattice::ui {

class TokenOutput : public QTextEdit {
  Q_OBJECT

 public:
  explicit TokenOutput(QWidget* parent = nullptr);

  // Clears the output and shows the prompt's text.
  void start(const QString& promptText);
  // Appends one generated token's text (may be empty).
  void appendToken(const QString& text, int id, double logprob);
  // The whole final text (prompt and continuation); where the streamed tokens showed more
  // (a stop string, cut off at the end), the surplus is removed.
  void finish(const QString& finalText);
  void setColoured(bool coloured);
  bool coloured() const { return coloured_; }
  // The prompt's and the generated text, as shown.
  QString text() const;
  QString generatedText() const;  // the continuation alone
  int tokenCount() const { return static_cast<int>(pieces_.size()); }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct Piece {
    QString text;
    int id = 0;
    double logprob = 0;
  };
  void render();
  void insertPiece(const Piece& piece);

  QString prompt_;
  QList<Piece> pieces_;
  bool coloured_ = true;
};

// The shade of a token of log-probability `logprob` (red unlikely, yellow, green likely; on a
// log scale), for a light or dark background.
QColor probabilityColor(double logprob, bool dark);

}  // namespace lattice::ui
