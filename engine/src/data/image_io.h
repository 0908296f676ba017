// Image files for vision-language data: PNG (libpng) and JPEG (libjpeg-turbo) decoded to 8-bit
// RGB, and PNG written (the shapes generator, tests). Not a general image library: no
// colour management, no EXIF orientation, no animation. See docs/data.md, "Image-text data".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/status.h"

namespace lattice {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // (height, width, 3) row-major RGB
};

// Note [image decoding]: every file becomes 8-bit RGB as PIL's Image.open(f).convert("RGB")
// (what LLaVA does) makes it, except where noted:
// - PNG: palette -> its RGB entries; gray of any depth -> replicated; 16-bit samples -> their
//   high byte (PIL does this for RGB; for 16-bit gray PIL clips to 255 instead, Lattice takes
//   the high byte there too); alpha and tRNS transparency are dropped, not composited.
// - JPEG: RGB / YCbCr and grayscale (replicated); CMYK and YCCK are refused (convert them
//   first). Decoded with libjpeg's defaults (islow DCT, fancy upsampling), as PIL does.
// The file type comes from its first bytes, not its name. Errors are one sentence naming the
// file: io_error when it cannot be opened, corrupt when it is truncated or not a valid PNG or
// JPEG, invalid_argument for an unsupported kind (CMYK, an unknown format) or a picture of more
// than 178,956,970 pixels (PIL's decompression-bomb limit), refused before allocating. libpng's and
// libjpeg's fatal errors and warnings are caught (Note [longjmp]); nothing is printed.
// Thread-safe (each call has its own decoder).
Result<RgbImage> read_image(const std::string& path);

// Whether `path` opens and starts as a PNG or a JPEG does (its first bytes), without decoding it:
// a cheap early check of files that are decoded later (a task file's images). read_image's error
// when not; a file that starts well but is corrupt or truncated passes (read_image finds it).
Status check_image_file(const std::string& path);

// read_image of bytes in memory (a PNG or JPEG file's contents); `name` stands for the file in
// errors (e.g. "messages[0].content[1]").
Result<RgbImage> decode_image(const void* data, size_t size, const std::string& name);

// Writes `image` as an 8-bit RGB PNG (no interlace, default compression); io_error naming the
// file on failure. Thread-safe.
Status write_png(const std::string& path, const RgbImage& image);

}  // namespace lattice
