// Reading raw documents for preprocessing and tokenizer training: JSONL (one JSON object
// per line, Megatron's --json-keys), plain text (one document per line, or documents
// separated by blank lines) and fortune files (documents separated by lines holding "%").
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "lattice/status.h"

namespace lattice {

enum class InputFormat { kAuto, kJsonl, kLines, kParagraphs, kFortune };
// "auto", "jsonl", "lines", "paragraphs", "fortune"; invalid_argument names --input-format.
Result<InputFormat> parse_input_format(const std::string& name);
const char* input_format_name(InputFormat format);
// kAuto resolved: .jsonl / .json -> jsonl; a line that is exactly "%" in the first 64 KiB ->
// fortune; otherwise lines.
Result<InputFormat> detect_input_format(const std::string& path);

// One document: for JSONL, the text under each requested key (in key order); for the text
// formats, a single field.
struct Document {
  std::vector<std::string> fields;
};

// Streams documents from one file. Not thread-safe.
class DocumentReader {
 public:
  static Result<DocumentReader> open(const std::string& path, InputFormat format,
                                     std::vector<std::string> json_keys);
  DocumentReader(DocumentReader&& other) noexcept;
  DocumentReader& operator=(DocumentReader&&) = delete;
  ~DocumentReader();

  // Reads up to `max_documents` documents (appended to out). Returns the number read; 0 at
  // end of input. A malformed JSONL line is an error naming the file and line.
  Result<size_t> read(size_t max_documents, std::vector<Document>& out);
  // Same, but replaces out's contents, reusing its elements' storage (for batch loops).
  Result<size_t> read_batch(size_t max_documents, std::vector<Document>& out);
  size_t bytes_read() const { return bytes_read_; }
  InputFormat format() const { return format_; }

 private:
  DocumentReader() = default;
  bool next_line(std::string& line);  // false at EOF; strips the trailing '\n' (and '\r')
  Result<size_t> read_from(size_t max_documents, std::vector<Document>& out, size_t first);

  std::FILE* file_ = nullptr;
  std::string path_;
  InputFormat format_ = InputFormat::kLines;
  std::vector<std::string> keys_;
  size_t line_number_ = 0, bytes_read_ = 0;
  bool eof_ = false;
  std::string line_;             // the current line
  char* line_buffer_ = nullptr;  // getline()'s buffer, grown as needed
  size_t line_capacity_ = 0;
};

// Every field of every document of `paths`, in order (the texts a tokenizer trains on).
Result<std::vector<std::string>> read_all_texts(const std::vector<std::string>& paths,
                                                InputFormat format,
                                                const std::vector<std::string>& json_keys);

// Every fortune file of Debian's `fortunes` package (the files with a `.dat` index beside
// them in /usr/share/games/fortunes), sorted; empty when the package is not installed.
std::vector<std::string> fortune_files(const std::string& dir = "/usr/share/games/fortunes");

}  // namespace lattice
