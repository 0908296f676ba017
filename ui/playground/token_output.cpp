// TokenOutput: the generated text with per-token shading and tooltips.
#include "playground/token_output.h"

#include <QEvent>
#include <QTextCursor>
#include <algorithm>
#include <cmath>

namespace lattice::ui {

QColor probabilityColor(double logprob, bool dark) {
  // On a log scale, so that a small model's tokens do not all look alike: red at p <= e^-6
  // (0.25 %), yellow at p = e^-3 (5 %), green at p = 1. Light tints on a light background,
  // deep ones on a dark background.
  const double t = std::clamp(1.0 + logprob / 6.0, 0.0, 1.0);
  return QColor::fromHsvF(static_cast<float>(t / 3.0), dark ? 0.7f : 0.35f, dark ? 0.45f : 1.0f);
}

TokenOutput::TokenOutput(QWidget* parent) : QTextEdit(parent) {
  setReadOnly(true);
  setAcceptRichText(false);
  setUndoRedoEnabled(false);
  setLineWrapMode(QTextEdit::WidgetWidth);
}

void TokenOutput::start(const QString& promptText) {
  prompt_ = promptText;
  pieces_.clear();
  render();
}

void TokenOutput::appendToken(const QString& text, int id, double logprob) {
  pieces_.append({text, id, logprob});
  insertPiece(pieces_.back());
}

void TokenOutput::finish(const QString& finalText) {
  if (text() == finalText) return;
  if (finalText.startsWith(prompt_) && text().startsWith(finalText)) {
    qsizetype surplus = text().size() - finalText.size();
    while (surplus > 0 && !pieces_.isEmpty()) {
      Piece& last = pieces_.back();
      const qsizetype cut = std::min(surplus, last.text.size());
      last.text.chop(cut);
      surplus -= cut;
      if (last.text.isEmpty() && surplus > 0) pieces_.removeLast();
    }
  } else {
    // The streamed pieces do not add up to the final text (a tokenizer that rewrites earlier
    // text): show the final text, unshaded.
    pieces_ = {{finalText.mid(prompt_.size()), -1, 0.0}};
  }
  render();
}

void TokenOutput::setColoured(bool coloured) {
  if (coloured_ == coloured) return;
  coloured_ = coloured;
  render();
}

QString TokenOutput::text() const {
  return prompt_ + generatedText();
}

QString TokenOutput::generatedText() const {
  QString out;
  for (const Piece& p : pieces_) out += p.text;
  return out;
}

void TokenOutput::changeEvent(QEvent* event) {
  QTextEdit::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) render();
}

void TokenOutput::render() {
  clear();
  QTextCursor cursor(document());
  QTextCharFormat promptFormat;
  promptFormat.setFontWeight(QFont::DemiBold);
  cursor.insertText(prompt_, promptFormat);
  for (const Piece& p : pieces_) insertPiece(p);
}

void TokenOutput::insertPiece(const Piece& piece) {
  if (piece.text.isEmpty()) return;
  QTextCursor cursor(document());
  cursor.movePosition(QTextCursor::End);
  QTextCharFormat format;
  if (piece.id >= 0) {
    const double p = std::exp(piece.logprob);
    format.setToolTip(tr("token %1 · log p %2 · p %3")
                          .arg(piece.id)
                          .arg(piece.logprob, 0, 'f', 3)
                          .arg(p, 0, 'f', 3));
    if (coloured_) {
      const bool dark = palette().color(QPalette::Base).lightness() < 128;
      format.setBackground(probabilityColor(piece.logprob, dark));
    }
  }
  cursor.insertText(piece.text, format);
}

}  // namespace lattice::ui
