// PNG and JPEG files to RGB and back (image_io.h), over libpng and libjpeg-turbo.
//
// Note [longjmp]: both libraries report a fatal error by calling a handler that must not
// return; ours longjmp()s back to the setjmp() of the function that called into the library.
// A longjmp that skips a frame holding a C++ object with a destructor is undefined behaviour,
// so every function that calls setjmp() (the *_stage functions) holds only plain data (the
// library structs, a FILE*, raw pointers into buffers its caller owns) and calls only C
// functions; the vectors and strings live in the callers, which call a stage, check its bool
// and build the Status from the message the handler copied into the plain struct. Warnings
// from libjpeg (corrupt data, a premature end of file, which it would otherwise pad with grey)
// are treated as errors; libpng's warnings (benign ancillary chunks) are ignored.
#include "data/image_io.h"

#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

namespace lattice {

namespace {

// PIL's decompression-bomb limit (2 x Image.MAX_IMAGE_PIXELS): a header claiming more pixels is
// refused before any memory is allocated for them.
constexpr uint64_t kMaxPixels = 178956970;

Status too_large(const std::string& path, uint64_t width, uint64_t height) {
  return Status::invalid_argument("image '" + path + "' is " + std::to_string(width) + "x" +
                                  std::to_string(height) + ", more than " +
                                  std::to_string(kMaxPixels) + " pixels");
}

struct File {
  explicit File(const std::string& path, const char* mode) : f(std::fopen(path.c_str(), mode)) {}
  ~File() {
    if (f) std::fclose(f);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  FILE* f;
};

// ---- PNG ------------------------------------------------------------------------------------

struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  FILE* file = nullptr;
  std::jmp_buf jump;
  char message[256] = "";
};

void png_fatal(png_structp png, png_const_charp message) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof s->message, "%s", message);
  std::longjmp(s->jump, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

// Reads the header and sets the transforms of Note [image decoding]. Note [longjmp].
bool png_header_stage(PngState* s, uint32_t* width, uint32_t* height) {
  if (setjmp(s->jump)) return false;
  png_init_io(s->png, s->file);
  png_read_info(s->png, s->info);
  const int color = png_get_color_type(s->png, s->info);
  const int depth = png_get_bit_depth(s->png, s->info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s->png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);
  if (depth == 16) png_set_strip_16(s->png);
  if ((color & PNG_COLOR_MASK_ALPHA) || png_get_valid(s->png, s->info, PNG_INFO_tRNS))
    png_set_strip_alpha(s->png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(s->png);
  png_set_interlace_handling(s->png);
  png_read_update_info(s->png, s->info);
  *width = png_get_image_width(s->png, s->info);
  *height = png_get_image_height(s->png, s->info);
  if (png_get_channels(s->png, s->info) != 3 || png_get_bit_depth(s->png, s->info) != 8)
    png_error(s->png, "the transforms did not give 8-bit RGB");
  return true;
}

bool png_rows_stage(PngState* s, png_bytep* rows) {
  if (setjmp(s->jump)) return false;
  png_read_image(s->png, rows);
  png_read_end(s->png, nullptr);
  return true;
}

Result<RgbImage> read_png(const std::string& path, FILE* file) {
  PngState s;
  s.file = file;
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_fatal, png_ignore_warning);
  if (s.png) s.info = png_create_info_struct(s.png);
  if (!s.png || !s.info) {
    png_destroy_read_struct(s.png ? &s.png : nullptr, nullptr, nullptr);
    return Status::resource_exhausted("libpng could not start reading image '" + path + "'");
  }
  uint32_t width = 0, height = 0;
  RgbImage image;
  std::vector<png_bytep> rows;
  bool ok = png_header_stage(&s, &width, &height);
  if (ok && uint64_t{width} * height > kMaxPixels) {
    png_destroy_read_struct(&s.png, &s.info, nullptr);
    return too_large(path, width, height);
  }
  if (ok) {
    image.width = static_cast<int>(width);
    image.height = static_cast<int>(height);
    image.pixels.resize(size_t{width} * height * 3);
    for (uint32_t y = 0; y < height; y++) rows.push_back(&image.pixels[size_t{y} * width * 3]);
    ok = png_rows_stage(&s, rows.data());
  }
  png_destroy_read_struct(&s.png, &s.info, nullptr);
  if (!ok)
    return Status::corrupt("image '" + path +
                           "' is not a valid PNG or is truncated (libpng: " + s.message + ")");
  return image;
}

// ---- JPEG -----------------------------------------------------------------------------------

struct JpegState {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr errors;
  FILE* file = nullptr;
  bool created = false, cmyk = false;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
};

void jpeg_fatal(j_common_ptr cinfo) {
  auto* s = static_cast<JpegState*>(cinfo->client_data);
  (*cinfo->err->format_message)(cinfo, s->message);
  std::longjmp(s->jump, 1);
}

// msg_level -1 is a warning about corrupt data (libjpeg would go on and invent pixels).
void jpeg_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) jpeg_fatal(cinfo);
}

void jpeg_silent(j_common_ptr) {}

bool jpeg_header_stage(JpegState* s) {
  if (setjmp(s->jump)) return false;
  jpeg_create_decompress(&s->cinfo);
  s->created = true;
  jpeg_stdio_src(&s->cinfo, s->file);
  jpeg_read_header(&s->cinfo, TRUE);
  if (s->cinfo.jpeg_color_space == JCS_CMYK || s->cinfo.jpeg_color_space == JCS_YCCK) {
    s->cmyk = true;
    return false;
  }
  s->cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&s->cinfo);
  return true;
}

bool jpeg_rows_stage(JpegState* s, uint8_t* pixels) {
  if (setjmp(s->jump)) return false;
  const size_t stride = size_t{s->cinfo.output_width} * 3;
  while (s->cinfo.output_scanline < s->cinfo.output_height) {
    JSAMPROW row = pixels + s->cinfo.output_scanline * stride;
    jpeg_read_scanlines(&s->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&s->cinfo);
  return true;
}

Result<RgbImage> read_jpeg(const std::string& path, FILE* file) {
  JpegState s;
  std::memset(&s.cinfo, 0, sizeof s.cinfo);
  s.cinfo.err = jpeg_std_error(&s.errors);
  s.cinfo.client_data = &s;  // kept by jpeg_create_decompress
  s.errors.error_exit = jpeg_fatal;
  s.errors.emit_message = jpeg_message;
  s.errors.output_message = jpeg_silent;
  s.file = file;
  RgbImage image;
  bool ok = jpeg_header_stage(&s);
  if (ok) {
    if (uint64_t{s.cinfo.output_width} * s.cinfo.output_height > kMaxPixels) {
      const uint64_t width = s.cinfo.output_width, height = s.cinfo.output_height;
      jpeg_destroy_decompress(&s.cinfo);
      return too_large(path, width, height);
    }
    if (s.cinfo.output_components != 3) {
      ok = false;
      std::snprintf(s.message, sizeof s.message, "%d output components, not 3",
                    s.cinfo.output_components);
    } else {
      image.width = static_cast<int>(s.cinfo.output_width);
      image.height = static_cast<int>(s.cinfo.output_height);
      image.pixels.resize(size_t{s.cinfo.output_width} * s.cinfo.output_height * 3);
      ok = jpeg_rows_stage(&s, image.pixels.data());
    }
  }
  if (s.created) jpeg_destroy_decompress(&s.cinfo);
  if (s.cmyk)
    return Status::invalid_argument("image '" + path +
                                    "' is a CMYK JPEG, which Lattice does not convert; save it "
                                    "as RGB first");
  if (!ok)
    return Status::corrupt("image '" + path +
                           "' is not a valid JPEG or is truncated (libjpeg: " + s.message + ")");
  return image;
}

// ---- PNG writing ----------------------------------------------------------------------------

bool png_write_stage(PngState* s, uint32_t width, uint32_t height, png_bytep* rows) {
  if (setjmp(s->jump)) return false;
  png_init_io(s->png, s->file);
  png_set_IHDR(s->png, s->info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(s->png, s->info);
  png_write_image(s->png, rows);
  png_write_end(s->png, nullptr);
  return true;
}

}  // namespace

namespace {
enum class Format { kPng, kJpeg };

// `file`'s format by its first bytes (`file` rewound after), or why it has none we decode.
Result<Format> sniff_format(const std::string& path, FILE* file) {
  unsigned char magic[8] = {};
  const size_t got = std::fread(magic, 1, sizeof magic, file);
  std::rewind(file);
  if (got == 0) return Status::corrupt("image '" + path + "' is empty");
  if (got == 8 && png_sig_cmp(magic, 0, 8) == 0) return Format::kPng;
  if (got >= 3 && magic[0] == 0xFF && magic[1] == 0xD8 && magic[2] == 0xFF) return Format::kJpeg;
  return Status::invalid_argument("image '" + path +
                                  "' is neither a PNG nor a JPEG (judged by its first bytes)");
}

// The decoder of both entries: `file` open for reading at its start, `path` its name in errors.
Result<RgbImage> read_image_file(const std::string& path, FILE* file) {
  Result<Format> format = sniff_format(path, file);
  if (!format) return format.status();
  return *format == Format::kPng ? read_png(path, file) : read_jpeg(path, file);
}

Status cannot_open(const std::string& path) {
  return Status::io_error("cannot open image '" + path + "': " + std::strerror(errno));
}
}  // namespace

Result<RgbImage> read_image(const std::string& path) {
  File file(path, "rb");
  if (!file.f) return cannot_open(path);
  return read_image_file(path, file.f);
}

Status check_image_file(const std::string& path) {
  File file(path, "rb");
  if (!file.f) return cannot_open(path);
  Result<Format> format = sniff_format(path, file.f);
  return format ? Status::ok() : format.status();
}

Result<RgbImage> decode_image(const void* data, size_t size, const std::string& name) {
  if (size == 0) return Status::corrupt("image '" + name + "' is empty");
  // fmemopen: the same FILE*-based decoders read the bytes (one decoder for files and memory).
  FILE* f = fmemopen(const_cast<void*>(data), size, "rb");
  if (!f) return Status::io_error("cannot read image '" + name + "': " + std::strerror(errno));
  Result<RgbImage> image = read_image_file(name, f);
  std::fclose(f);
  return image;
}

Status write_png(const std::string& path, const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != size_t(image.width) * image.height * 3)
    return Status::invalid_argument("write_png: pixels do not hold width x height x 3 bytes");
  File file(path, "wb");
  if (!file.f)
    return Status::io_error("cannot write image '" + path + "': " + std::strerror(errno));
  PngState s;
  s.file = file.f;
  s.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s, png_fatal, png_ignore_warning);
  if (s.png) s.info = png_create_info_struct(s.png);
  std::vector<png_bytep> rows;
  for (int y = 0; y < image.height; y++)
    rows.push_back(const_cast<png_bytep>(&image.pixels[size_t(y) * image.width * 3]));
  const bool ok = s.png && s.info &&
                  png_write_stage(&s, static_cast<uint32_t>(image.width),
                                  static_cast<uint32_t>(image.height), rows.data());
  png_destroy_write_struct(s.png ? &s.png : nullptr, s.info ? &s.info : nullptr);
  if (!ok) return Status::io_error("cannot write image '" + path + "' (libpng: " + s.message + ")");
  if (std::fflush(file.f) != 0)
    return Status::io_error("cannot write image '" + path + "': " + std::strerror(errno));
  return Status::ok();
}

}  // namespace lattice
