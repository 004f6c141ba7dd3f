// CIF 1.1 / mmCIF tokenizer and a generic data-block reader.
//
// Tokens: `data_NAME` block headers, `loop_`, tags (`_category.item`), and values. Values are
// unquoted runs of non-blank characters, '...' or "..." quoted strings (a quote closes only when
// followed by whitespace or the end of the line, so `'5'-O'` style names need no escaping),
// or ';' text fields (a line starting with ';' up to the next line starting with ';'; the value
// is the text between, newlines kept). Unquoted `?` (unknown) and `.` (inapplicable) are nulls;
// quoted "?" is the literal string. `#` at the start of a token begins a comment.
//
// Input is streamed line by line from a plain or gzip file through data_pipeline/formats/text_reader.h.
// Every error is a foldcore::Error "<file>:<line>: <reason>".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {

struct CifToken {
  enum class Kind { kDataBlock, kLoop, kTag, kValue, kSave, kGlobal, kStop };
  Kind kind = Kind::kValue;
  std::string text;             // block name (without "data_"), tag, or value
  bool quoted = false;          // value came from quotes or a text field
  bool first_on_line = false;   // the token starts its line (row alignment checks)
  int line = 0;                 // 1-based line where the token starts
};

class CifTokenizer {
 public:
  explicit CifTokenizer(LineReader reader);
  static CifTokenizer open_file(const std::string& path);
  static CifTokenizer from_string(std::string text, std::string name);

  // Reads the next token; false at the end of input.
  bool next(CifToken& tok);
  // Pushes one token back: the next call to next() returns it again.
  void unread(CifToken tok);

  const std::string& name() const { return name_; }
  int line() const { return line_no_; }
  // Throws foldcore::Error("<name>:<line>: <message>").
  [[noreturn]] void fail(int line, const std::string& message) const;

 private:
  bool advance_line();

  LineReader reader_;
  std::string name_;
  std::string line_;
  size_t pos_ = 0;
  int line_no_ = 0;
  bool have_line_ = false;
  bool pending_ = false;
  CifToken pending_tok_;
};

// One category of a data block: a loop, or the key-value items of that category (one row).
// The category is stored lower-case (CIF names are case-insensitive) without the leading '_'
// ("atom_site"); column names keep the file's case ("Cartn_x") and are looked up ignoring case.
struct CifTable {
  enum Null : uint8_t { kNotNull = 0, kUnknown = 1, kInapplicable = 2 };  // '?' and '.'
  std::string category;
  std::vector<std::string> columns;
  std::vector<std::string> values;  // row-major, rows × columns
  std::vector<uint8_t> nulls;       // per value
  std::vector<int> lines;           // per value: source line
  bool is_loop = false;

  size_t num_rows() const { return columns.empty() ? 0 : values.size() / columns.size(); }
  // Index of a column (name without the category, any case), or -1.
  int column(std::string_view name) const;
  const std::string& at(size_t row, int col) const { return values[row * columns.size() + col]; }
  bool is_null(size_t row, int col) const { return nulls[row * columns.size() + col] != kNotNull; }
  int line_of(size_t row, int col) const { return lines[row * columns.size() + col]; }
};

struct CifBlock {
  std::string name;    // after "data_"
  std::string source;  // file name, for error messages
  std::vector<CifTable> tables;
  const CifTable* find(std::string_view category) const;  // lower-case, without '_'
};

// Reads the first data block. `keep(category)` selects which categories are stored (all when
// empty); the others are still checked for syntax. Stops at the next data_ header.
// Errors: empty input, content before data_, a value without a tag, a tag without a value,
// a loop whose value count is not a multiple of its column count, duplicate items.
CifBlock read_cif_block(CifTokenizer& tok, const std::function<bool(std::string_view)>& keep = {});

}  // namespace foldcore::data
