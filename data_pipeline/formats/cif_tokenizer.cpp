#include "data_pipeline/formats/cif_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/error.h"

namespace foldcore::data {
namespace {

inline bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

CifTokenizer::CifTokenizer(LineReader reader) : reader_(std::move(reader)), name_(reader_.name()) {}

CifTokenizer CifTokenizer::open_file(const std::string& path) {
  return CifTokenizer(LineReader(path));
}

CifTokenizer CifTokenizer::from_string(std::string text, std::string name) {
  return CifTokenizer(LineReader::from_string(std::move(text), std::move(name)));
}

void CifTokenizer::fail(int line, const std::string& message) const {
  FC_THROW(name_, ":", line, ": ", message);
}

bool CifTokenizer::advance_line() {
  if (!reader_.next(line_)) {
    have_line_ = false;
    return false;
  }
  ++line_no_;
  if (std::memchr(line_.data(), '\0', line_.size()))
    fail(line_no_, "binary data (NUL byte) in a text file: not a CIF file?");
  pos_ = 0;
  have_line_ = true;
  return true;
}

void CifTokenizer::unread(CifToken tok) {
  pending_tok_ = std::move(tok);
  pending_ = true;
}

bool CifTokenizer::next(CifToken& tok) {
  if (pending_) {
    tok = std::move(pending_tok_);
    pending_ = false;
    return true;
  }
  for (;;) {
    if (!have_line_ || pos_ >= line_.size()) {
      if (!advance_line()) return false;
      // A ';' in column 1 opens a text field running to the next line starting with ';'.
      if (!line_.empty() && line_[0] == ';') {
        const int start_line = line_no_;
        std::string text = line_.substr(1);
        bool closed = false;
        while (advance_line()) {
          if (!line_.empty() && line_[0] == ';') {
            closed = true;
            break;
          }
          text += '\n';
          text += line_;
        }
        if (!closed) fail(start_line, "unterminated ';' text field (no closing ';' line before end of file)");
        pos_ = 1;
        tok.kind = CifToken::Kind::kValue;
        tok.text = std::move(text);
        tok.quoted = true;
        tok.first_on_line = true;
        tok.line = start_line;
        return true;
      }
    }
    while (pos_ < line_.size() && is_blank(line_[pos_])) ++pos_;
    if (pos_ >= line_.size()) continue;
    const char c = line_[pos_];
    if (c == '#') {
      pos_ = line_.size();
      continue;
    }
    tok.first_on_line = (pos_ == 0) || std::all_of(line_.begin(), line_.begin() + static_cast<long>(pos_),
                                                   [](char ch) { return is_blank(ch); });
    tok.line = line_no_;
    if (c == '\'' || c == '"') {
      // The closing quote is the first matching quote followed by a blank or the end of line.
      size_t i = pos_ + 1;
      for (;; ++i) {
        if (i >= line_.size()) fail(line_no_, std::string("unterminated quoted value starting with ") + c);
        if (line_[i] == c && (i + 1 == line_.size() || is_blank(line_[i + 1]))) break;
      }
      tok.kind = CifToken::Kind::kValue;
      tok.text.assign(line_, pos_ + 1, i - pos_ - 1);
      tok.quoted = true;
      pos_ = i + 1;
      return true;
    }
    size_t end = pos_;
    while (end < line_.size() && !is_blank(line_[end])) ++end;
    const std::string_view word(line_.data() + pos_, end - pos_);
    tok.quoted = false;
    if (c == '_') {
      tok.kind = CifToken::Kind::kTag;
    } else if (starts_with_ci(word, "data_")) {
      tok.kind = CifToken::Kind::kDataBlock;
    } else if (starts_with_ci(word, "loop_") && word.size() == 5) {
      tok.kind = CifToken::Kind::kLoop;
    } else if (starts_with_ci(word, "save_")) {
      tok.kind = CifToken::Kind::kSave;
    } else if (starts_with_ci(word, "global_") && word.size() == 7) {
      tok.kind = CifToken::Kind::kGlobal;
    } else if (starts_with_ci(word, "stop_") && word.size() == 5) {
      tok.kind = CifToken::Kind::kStop;
    } else {
      tok.kind = CifToken::Kind::kValue;
    }
    if (tok.kind == CifToken::Kind::kDataBlock)
      tok.text.assign(word.substr(5));
    else
      tok.text.assign(word);
    pos_ = end;
    return true;
  }
}

int CifTable::column(std::string_view name) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    const std::string& col = columns[i];
    if (col.size() != name.size()) continue;
    bool same = true;
    for (size_t k = 0; k < col.size() && same; ++k)
      same = std::tolower(static_cast<unsigned char>(col[k])) == std::tolower(static_cast<unsigned char>(name[k]));
    if (same) return static_cast<int>(i);
  }
  return -1;
}

const CifTable* CifBlock::find(std::string_view category) const {
  for (const CifTable& t : tables)
    if (t.category == category) return &t;
  return nullptr;
}

namespace {

// Splits "_cat.item" into lower-case ("cat", "item"); a tag without '.' is its own category.
void split_tag(const CifTokenizer& tz, const CifToken& t, std::string& category, std::string& item) {
  const size_t dot = t.text.find('.');
  if (t.text.size() < 2) tz.fail(t.line, "empty tag '_'");
  if (dot == std::string::npos) {
    category = lower(std::string_view(t.text).substr(1));
    item.clear();
  } else {
    category = lower(std::string_view(t.text).substr(1, dot - 1));
    item = t.text.substr(dot + 1);  // original case, for messages; column() ignores case
  }
}

uint8_t null_kind(const CifToken& t) {
  if (t.quoted || t.text.size() != 1) return CifTable::kNotNull;
  if (t.text[0] == '?') return CifTable::kUnknown;
  if (t.text[0] == '.') return CifTable::kInapplicable;
  return CifTable::kNotNull;
}

void push_value(CifTable& table, CifToken& t) {
  table.nulls.push_back(null_kind(t));
  table.lines.push_back(t.line);
  table.values.push_back(std::move(t.text));
}

}  // namespace

CifBlock read_cif_block(CifTokenizer& tz, const std::function<bool(std::string_view)>& keep) {
  CifBlock block;
  block.source = tz.name();
  CifToken t;
  // Find the data_ header: only comments and blank lines may precede it.
  if (!tz.next(t)) tz.fail(std::max(tz.line(), 1), "empty file: no 'data_' block (not an mmCIF file?)");
  if (t.kind != CifToken::Kind::kDataBlock)
    tz.fail(t.line, "expected a 'data_' block header, found '" + t.text.substr(0, 40) + "' (not an mmCIF file?)");
  block.name = t.text;

  auto wanted = [&](const std::string& category) { return !keep || keep(category); };
  auto table_for = [&](const std::string& category) -> CifTable* {
    for (CifTable& tab : block.tables)
      if (tab.category == category) return &tab;
    return nullptr;
  };

  std::string category, item;
  while (tz.next(t)) {
    switch (t.kind) {
      case CifToken::Kind::kDataBlock:
        tz.unread(std::move(t));
        return block;  // only the first block is read
      case CifToken::Kind::kValue:
        tz.fail(t.line, "value '" + t.text.substr(0, 40) + "' without a preceding tag");
      case CifToken::Kind::kSave:
      case CifToken::Kind::kGlobal:
      case CifToken::Kind::kStop:
        tz.fail(t.line, "unsupported CIF construct '" + t.text + "' (save frames / global_ / stop_)");
      case CifToken::Kind::kTag: {
        split_tag(tz, t, category, item);
        const int tag_line = t.line;
        const std::string tag = t.text;
        CifToken v;
        if (!tz.next(v)) tz.fail(tag_line, "tag " + tag + " has no value (file truncated?)");
        if (v.kind != CifToken::Kind::kValue) tz.fail(v.line, "tag " + tag + " is followed by '" + v.text + "', not a value");
        if (!wanted(category)) break;
        CifTable* tab = table_for(category);
        if (!tab) {
          block.tables.push_back(CifTable{});
          tab = &block.tables.back();
          tab->category = category;
        }
        if (tab->is_loop) tz.fail(tag_line, "item " + tag + " of category _" + category + " already given as a loop");
        if (tab->column(item) >= 0) tz.fail(tag_line, "duplicate item " + tag);
        tab->columns.push_back(item);
        push_value(*tab, v);
        break;
      }
      case CifToken::Kind::kLoop: {
        const int loop_line = t.line;
        CifTable tab;
        tab.is_loop = true;
        std::string loop_category;
        bool more;
        while ((more = tz.next(t)) && t.kind == CifToken::Kind::kTag) {
          split_tag(tz, t, category, item);
          if (tab.columns.empty()) loop_category = category;
          if (category != loop_category)
            tz.fail(t.line, "loop mixes categories _" + loop_category + " and _" + category);
          if (tab.column(item) >= 0) tz.fail(t.line, "duplicate loop column " + t.text);
          tab.columns.push_back(item);
        }
        if (tab.columns.empty()) tz.fail(loop_line, "loop_ without tags");
        tab.category = loop_category;
        const bool store = wanted(loop_category);
        const size_t ncol = tab.columns.size();
        size_t count = 0;
        int last_line = loop_line, misaligned_line = 0;
        while (more && t.kind == CifToken::Kind::kValue) {
          // Rows normally start a line; remember where that first stops holding, so a row with
          // a missing value is reported near where it is, not at the end of the loop.
          if (count % ncol == 0 && !t.first_on_line && misaligned_line == 0) misaligned_line = t.line;
          last_line = t.line;
          ++count;
          if (store) push_value(tab, t);
          more = tz.next(t);
        }
        if (more) tz.unread(std::move(t));
        if (count == 0) tz.fail(loop_line, "loop of _" + loop_category + " has no values (file truncated?)");
        if (count % ncol != 0) {
          std::string msg = "loop of _" + loop_category + " has " + std::to_string(count) +
                            " values, not a multiple of its " + std::to_string(ncol) +
                            " columns (a row is missing values, or the file is truncated)";
          if (misaligned_line) msg += "; first row not starting a line is at line " + std::to_string(misaligned_line);
          tz.fail(misaligned_line ? misaligned_line : last_line, msg);
        }
        if (store) {
          if (table_for(loop_category)) tz.fail(loop_line, "category _" + loop_category + " given twice");
          block.tables.push_back(std::move(tab));
        }
        break;
      }
    }
  }
  return block;
}

}  // namespace foldcore::data
