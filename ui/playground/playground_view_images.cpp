// PlaygroundView's attached images: the drop on the prompt or the view, "Attach image…", the
// strip of thumbnails above the prompt, and the refusals (no vision tower, not an image, too
// many). The files are read and checked by image_attachments.h; the session decodes them again
// for the request.
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QToolButton>

#include "plan/text_format.h"
#include "playground/image_attachments.h"
#include "playground/playground_view.h"

namespace lattice::ui {

namespace {
constexpr int kThumbnailHeight = 56;
}  // namespace

QWidget* PlaygroundView::buildImageStrip(QWidget* parent) {
  imageStrip_ = new QWidget(parent);
  imageStrip_->setObjectName(QStringLiteral("playgroundImages"));
  thumbnails_ = new QHBoxLayout(imageStrip_);
  thumbnails_->setContentsMargins(0, 2, 0, 2);
  thumbnails_->addStretch(1);
  imageStrip_->setVisible(false);
  attachButton_ = new QPushButton(tr("Attach image…"), parent);
  attachButton_->setObjectName(QStringLiteral("playgroundAttachImage"));
  connect(attachButton_, &QPushButton::clicked, this, &PlaygroundView::pickImages);
  prompt_->viewport()->installEventFilter(this);
  setAcceptDrops(true);
  return imageStrip_;
}

void PlaygroundView::pickImages() {
  const QStringList files = QFileDialog::getOpenFileNames(this, tr("Attach images"), QString(),
                                                          tr("Images (*.png *.jpg *.jpeg)"));
  if (!files.isEmpty()) attachImages(files);
}

bool PlaygroundView::attachImages(const QStringList& paths) {
  if (loaded_.isEmpty()) {
    showError(tr("Load a vision-language checkpoint before attaching images."));
    return false;
  }
  if (maxImages_ == 0) {
    showError(imageTokens_ == 0
                  ? tr("This model has no vision tower, so it cannot read images: load a "
                       "checkpoint trained with --vision-model-type.")
                  : tr("This model takes no images: %1.").arg(imageProblem_));
    return false;
  }
  QStringList problems;
  for (const QString& path : paths) {
    if (attachments_.size() >= maxImages_) {
      problems << tr("This model's prompt holds at most %1 (%2 tokens each); remove one to "
                     "attach %3.")
                      .arg(plural(maxImages_, "image", "images"))
                      .arg(imageTokens_)
                      .arg(QFileInfo(path).fileName());
      break;
    }
    Result<PromptImage> image = readPromptImage(path);
    if (image)
      attachments_ << *image;
    else
      problems << tr("Cannot attach %1: %2")
                      .arg(QFileInfo(path).fileName(),
                           QString::fromStdString(image.status().message()));
  }
  showError(problems.join(QLatin1Char('\n')));
  updateImageStrip();
  return problems.isEmpty();
}

void PlaygroundView::removeImage(int index) {
  if (index < 0 || index >= attachments_.size()) return;
  attachments_.removeAt(index);
  updateImageStrip();
}

void PlaygroundView::updateImageStrip() {
  while (thumbnails_->count() > 1) {  // the stretch stays last
    QLayoutItem* item = thumbnails_->takeAt(0);
    item->widget()->hide();
    item->widget()->deleteLater();  // its remove button may be the one being clicked
    delete item;
  }
  for (int i = 0; i < attachments_.size(); i++) {
    const PromptImage& image = attachments_[i];
    auto* cell = new QWidget(imageStrip_);
    auto* picture = new QLabel(cell);
    picture->setPixmap(QPixmap::fromImage(promptThumbnail(image, kThumbnailHeight)));
    picture->setToolTip(image.name);
    auto* remove = new QToolButton(cell);
    remove->setObjectName(QStringLiteral("playgroundRemoveImage"));
    remove->setText(QStringLiteral("×"));
    remove->setAutoRaise(true);
    remove->setToolTip(tr("Remove %1").arg(QFileInfo(image.name).fileName()));
    connect(remove, &QToolButton::clicked, this, [this, i] { removeImage(i); });
    auto* row = new QHBoxLayout(cell);
    row->setContentsMargins(0, 0, 0, 0);
    row->setSpacing(0);
    row->addWidget(picture);
    row->addWidget(remove, 0, Qt::AlignTop);
    thumbnails_->insertWidget(i, cell);
  }
  imageStrip_->setVisible(!attachments_.isEmpty());
  attachButton_->setEnabled(maxImages_ > 0);
  attachButton_->setToolTip(
      maxImages_ > 0
          ? tr("A PNG or JPEG for the model to read (up to %1 a prompt); or drop files on the "
               "prompt")
                .arg(maxImages_)
          : tr("The loaded model has no vision tower: it reads text only"));
}

// ---- drag and drop -----------------------------------------------------------------------

QStringList PlaygroundView::droppedFiles(const QMimeData* mime) {
  QStringList files;
  if (!mime || !mime->hasUrls()) return files;
  for (const QUrl& url : mime->urls())
    if (url.isLocalFile()) files << url.toLocalFile();
  return files;
}

void PlaygroundView::dragEnterEvent(QDragEnterEvent* event) {
  if (!droppedFiles(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void PlaygroundView::dropEvent(QDropEvent* event) {
  const QStringList files = droppedFiles(event->mimeData());
  if (files.isEmpty()) return;
  event->acceptProposedAction();
  attachImages(files);
}

// Files dropped on the prompt are attached instead of pasted as their paths; dragged text still
// goes to the editor.
bool PlaygroundView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == prompt_->viewport()) {
    const QEvent::Type type = event->type();
    if (type == QEvent::DragEnter || type == QEvent::DragMove || type == QEvent::Drop) {
      auto* drop = static_cast<QDropEvent*>(event);  // QDragEnterEvent, QDragMoveEvent are ones
      const QStringList files = droppedFiles(drop->mimeData());
      if (!files.isEmpty()) {
        drop->acceptProposedAction();
        if (type == QEvent::Drop) attachImages(files);
        return true;
      }
    }
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace lattice::ui
