#include "data/documents.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "data/jsonl.h"

namespace lattice {

Result<InputFormat> parse_input_format(const std::string& name) {
  if (name == "auto") return InputFormat::kAuto;
  if (name == "jsonl") return InputFormat::kJsonl;
  if (name == "lines") return InputFormat::kLines;
  if (name == "paragraphs") return InputFormat::kParagraphs;
  if (name == "fortune") return InputFormat::kFortune;
  return Status::invalid_argument("--input-format '" + name +
                                  "' is not one of auto, jsonl, lines, paragraphs, fortune");
}

const char* input_format_name(InputFormat format) {
  switch (format) {
    case InputFormat::kAuto:
      return "auto";
    case InputFormat::kJsonl:
      return "jsonl";
    case InputFormat::kLines:
      return "lines";
    case InputFormat::kParagraphs:
      return "paragraphs";
    case InputFormat::kFortune:
      return "fortune";
  }
  return "?";
}

Result<InputFormat> detect_input_format(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".jsonl" || ext == ".json") return InputFormat::kJsonl;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::io_error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::string head(65536, '\0');
  head.resize(std::fread(head.data(), 1, head.size(), f));
  std::fclose(f);
  if (head.rfind("%\n", 0) == 0 || head.find("\n%\n") != std::string::npos)
    return InputFormat::kFortune;
  return InputFormat::kLines;
}

Result<DocumentReader> DocumentReader::open(const std::string& path, InputFormat format,
                                            std::vector<std::string> json_keys) {
  if (format == InputFormat::kAuto) {
    Result<InputFormat> detected = detect_input_format(path);
    if (!detected) return detected.status();
    format = *detected;
  }
  DocumentReader r;
  r.file_ = std::fopen(path.c_str(), "rb");
  if (!r.file_) return Status::io_error(path + ": cannot open (" + std::strerror(errno) + ")");
  r.path_ = path;
  r.format_ = format;
  r.keys_ = format == InputFormat::kJsonl ? std::move(json_keys) : std::vector<std::string>{"text"};
  if (r.keys_.empty()) r.keys_ = {"text"};
  return r;
}

DocumentReader::DocumentReader(DocumentReader&& o) noexcept
    : file_(o.file_),
      path_(std::move(o.path_)),
      format_(o.format_),
      keys_(std::move(o.keys_)),
      line_number_(o.line_number_),
      bytes_read_(o.bytes_read_),
      eof_(o.eof_),
      line_buffer_(o.line_buffer_),
      line_capacity_(o.line_capacity_) {
  o.file_ = nullptr;
  o.line_buffer_ = nullptr;
  o.line_capacity_ = 0;
}

DocumentReader::~DocumentReader() {
  if (file_) std::fclose(file_);
  std::free(line_buffer_);
}

bool DocumentReader::next_line(std::string& line) {
  line.clear();
  if (eof_) return false;
  const ssize_t n = getline(&line_buffer_, &line_capacity_, file_);
  if (n < 0) {
    eof_ = true;
    return false;
  }
  bytes_read_ += static_cast<size_t>(n);
  size_t length = static_cast<size_t>(n);
  if (length > 0 && line_buffer_[length - 1] == '\n') {
    length--;
    if (length > 0 && line_buffer_[length - 1] == '\r') length--;
  }
  line.assign(line_buffer_, length);
  line_number_++;
  return true;
}

Result<size_t> DocumentReader::read(size_t max_documents, std::vector<Document>& out) {
  return read_from(max_documents, out, out.size());
}

Result<size_t> DocumentReader::read_batch(size_t max_documents, std::vector<Document>& out) {
  return read_from(max_documents, out, 0);
}

Result<size_t> DocumentReader::read_from(size_t max_documents, std::vector<Document>& out,
                                         size_t first) {
  // Documents land in out[first], out[first + 1], ...; existing elements keep their
  // strings' storage, so a reused batch allocates nothing once warm.
  auto slot = [&](size_t i, size_t fields) -> Document& {
    if (first + i >= out.size()) out.emplace_back();
    Document& d = out[first + i];
    d.fields.resize(fields);
    return d;
  };
  size_t count = 0;
  while (count < max_documents) {
    if (format_ == InputFormat::kJsonl || format_ == InputFormat::kLines) {
      if (!next_line(line_)) break;
      if (format_ == InputFormat::kLines) {
        slot(count, 1).fields[0].assign(line_);
      } else {
        if (line_.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
        Document& doc = slot(count, keys_.size());
        for (size_t k = 0; k < keys_.size(); k++) {
          Result<std::string> text = jsonl_field(line_, keys_[k]);
          if (!text)
            return Status::invalid_argument(path_ + ":" + std::to_string(line_number_) + ": " +
                                            text.status().message());
          doc.fields[k] = std::move(*text);
        }
      }
      count++;
      continue;
    }
    // Paragraphs and fortunes: gather lines up to a separator.
    std::string& text = slot(count, 1).fields[0];
    text.clear();
    bool any = false;
    while (next_line(line_)) {
      const bool separator = format_ == InputFormat::kFortune ? line_ == "%" : line_.empty();
      if (separator) {
        if (any) break;
        continue;
      }
      if (any) text += '\n';
      text += line_;
      any = true;
    }
    if (!any) break;
    count++;
  }
  out.resize(first + count);  // drops a slot taken for a document that did not arrive
  return count;
}

Result<std::vector<std::string>> read_all_texts(const std::vector<std::string>& paths,
                                                InputFormat format,
                                                const std::vector<std::string>& json_keys) {
  std::vector<std::string> texts;
  for (const std::string& path : paths) {
    Result<DocumentReader> reader = DocumentReader::open(path, format, json_keys);
    if (!reader) return reader.status();
    std::vector<Document> docs;
    while (true) {
      Result<size_t> n = reader->read(4096, docs);
      if (!n) return n.status();
      if (*n == 0) break;
    }
    for (Document& d : docs)
      for (std::string& field : d.fields) texts.push_back(std::move(field));
  }
  return texts;
}

std::vector<std::string> fortune_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::filesystem::path p = entry.path();
    if (p.has_extension()) continue;  // .dat indexes and .u8 links
    if (std::filesystem::exists(p.string() + ".dat") && std::filesystem::is_regular_file(p))
      files.push_back(p.string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace lattice
