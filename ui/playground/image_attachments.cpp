// Attached images (image_attachments.h).
#include "playground/image_attachments.h"

#include <QFile>
#include <QFileInfo>
#include <algorithm>

#include "data/image_io.h"
#include "infer/prompt_images.h"

namespace lattice::ui {

Result<PromptImage> readPromptImage(const QString& path) {
  const std::string name = QFileInfo(path).fileName().toStdString();
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly))
    return Status::io_error(name + " cannot be read: " + file.errorString().toStdString());
  PromptImage image{path, file.readAll()};
  // Decoded once here so that a file that is not an image is refused when it is attached, not
  // when the request runs; the pixels are made again then (the model may have changed).
  Result<RgbImage> decoded =
      decode_image(image.bytes.constData(), static_cast<size_t>(image.bytes.size()), name);
  if (!decoded) return decoded.status();
  return image;
}

int maxPromptImages(const ModelConfig& config, int context, std::string* problem) {
  if (Status s = check_image_model(config, "images"); !s) {
    if (problem) *problem = s.message();
    return 0;
  }
  const int Np = config.vision.patches();
  const int fit = Np > 0 ? (context - 1) / Np : 0;
  if (fit < 1 && problem)
    *problem = "an image takes " + std::to_string(Np) + " tokens, more than the context of " +
               std::to_string(context) + " leaves for one";
  return std::max(0, fit);
}

Result<std::vector<float>> promptImagePixels(const ModelConfig& config,
                                             const QList<PromptImage>& images) {
  if (Status s = check_image_model(config, "the attached images"); !s) return s;
  std::vector<float> pixels;
  for (const PromptImage& image : images) {
    Result<RgbImage> decoded =
        decode_image(image.bytes.constData(), static_cast<size_t>(image.bytes.size()),
                     QFileInfo(image.name).fileName().toStdString());
    if (!decoded) return decoded.status();
    append_prompt_image(config, *decoded, pixels);
  }
  return pixels;
}

QImage promptThumbnail(const PromptImage& image, int height) {
  QImage read = QImage::fromData(image.bytes);
  if (read.isNull()) {
    QImage grey(height, height, QImage::Format_RGB32);
    grey.fill(Qt::gray);
    return grey;
  }
  return read.scaledToHeight(height, Qt::SmoothTransformation);
}

}  // namespace lattice::ui
