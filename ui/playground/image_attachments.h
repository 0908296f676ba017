// The Playground's attached images: a file read and checked with the decoder `lattice generate
// --image` uses (data/image_io.h), how many images a loaded model's prompt can hold, a request's
// images as the generator's pixels (engine/src/infer/prompt_images.h: the same preprocessing), and the
// thumbnails the prompt strip and the chat transcript show. Not a widget.
#pragma once

#include <QImage>
#include <QList>
#include <QString>
#include <string>
#include <vector>

#include "lattice/model_config.h"
#include "lattice/status.h"
#include "playground/playground_session.h"

namespace lattice::ui {

// The file at `path` as an attachment. Errors name the file: it cannot be read, or it is not a
// PNG or JPEG that decodes.
Result<PromptImage> readPromptImage(const QString& path);

// How many images a prompt of `config`'s model holds within `context` tokens: each takes the
// tower's Np placeholder tokens and one token is left for text. 0, with `problem` saying why,
// for a model without a vision tower or with one the generator cannot feed.
int maxPromptImages(const ModelConfig& config, int context, std::string* problem);

// The images decoded and preprocessed as `lattice generate --image` does, (I, 3, img_h, img_w).
// Errors: the model takes no images; an image that does not decode (naming its file).
Result<std::vector<float>> promptImagePixels(const ModelConfig& config,
                                             const QList<PromptImage>& images);

// The image scaled to `height` pixels (its aspect kept); a grey square when Qt cannot read it.
QImage promptThumbnail(const PromptImage& image, int height);

}  // namespace lattice::ui
