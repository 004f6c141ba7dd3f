#include "core/json_text.h"

#include <cstdio>

#include "core/error.h"

namespace foldcore {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

namespace {

void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The four hex digits of a \u escape at text[i..i+3].
unsigned hex4(const std::string& text, size_t i) {
  FC_CHECK(i + 4 <= text.size(), "JSON string: \\u escape cut short at position ", i);
  unsigned v = 0;
  for (size_t k = i; k < i + 4; ++k) {
    const char c = text[k];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    FC_CHECK(d >= 0, "JSON string: '", c, "' is not a hex digit in the \\u escape at position ", i);
    v = v * 16 + static_cast<unsigned>(d);
  }
  return v;
}

}  // namespace

std::string json_unstring(const std::string& text, size_t pos, size_t* end) {
  FC_CHECK(pos < text.size() && text[pos] == '"', "JSON string: expected '\"' at position ", pos);
  std::string out;
  for (size_t i = pos + 1; i < text.size();) {
    const char c = text[i];
    if (c == '"') {
      if (end != nullptr) *end = i + 1;
      return out;
    }
    FC_CHECK(static_cast<unsigned char>(c) >= 0x20, "JSON string: raw control character at position ", i);
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    FC_CHECK(i + 1 < text.size(), "JSON string: escape cut short at position ", i);
    const char e = text[i + 1];
    i += 2;
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        unsigned cp = hex4(text, i);
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {
          FC_CHECK(i + 6 <= text.size() && text[i] == '\\' && text[i + 1] == 'u', "JSON string: lone surrogate before position ", i);
          const unsigned lo = hex4(text, i + 2);
          FC_CHECK(lo >= 0xDC00 && lo < 0xE000, "JSON string: lone surrogate before position ", i);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          i += 6;
        } else {
          FC_CHECK(cp < 0xDC00 || cp >= 0xE000, "JSON string: lone surrogate before position ", i);
        }
        append_utf8(out, cp);
        break;
      }
      default: FC_THROW("JSON string: unknown escape '\\", e, "' at position ", i - 2);
    }
  }
  FC_THROW("JSON string: no closing quote for the string at position ", pos);
}

}  // namespace foldcore
