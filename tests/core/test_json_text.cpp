// JSON string literals (core/json_text.h): json_unstring reads back what json_string writes, the
// other escapes JSON allows, and refuses malformed literals with the position.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/json_text.h"

namespace foldcore {
namespace {

TEST(JsonText, UnstringReadsBackJsonString) {
  const std::string samples[] = {"", "plain", "quote \" and backslash \\", "tab\tnewline\ncr\r", std::string("nul\0x", 5),
                                 "\x01\x1f control", "UTF-8: \xc3\xa9\xe2\x82\xac", "yaml: {a: [1, 2]}\n  b: 'x'\n"};
  for (const std::string& s : samples) {
    const std::string text = "pre " + json_string(s) + " post";
    size_t end = 0;
    EXPECT_EQ(json_unstring(text, 4, &end), s);
    EXPECT_EQ(text.substr(end), " post");
  }
}

TEST(JsonText, UnstringTakesEveryJsonEscape) {
  EXPECT_EQ(json_unstring(R"("a\/b\b\f\n\r\t\"\\")", 0), std::string("a/b\b\f\n\r\t\"\\"));
  EXPECT_EQ(json_unstring(R"("\u0041\u00e9\u20ac")", 0), "A\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(json_unstring(R"("\ud83d\ude00")", 0), "\xf0\x9f\x98\x80");  // a surrogate pair: U+1F600
}

TEST(JsonText, UnstringRefusesMalformedLiterals) {
  const std::string bads[] = {"x\"a\"", "\"unterminated", "\"bad \\q escape\"", "\"\\u12g4\"", "\"\\u12\"",
                              "\"\\ud83d alone\"", "\"\\ude00\"", "\"raw \n newline\"", "\"ends in \\"};
  for (const std::string& bad : bads)
    EXPECT_THROW(json_unstring(bad, 0), Error) << bad;
  EXPECT_THROW(json_unstring("\"a\"", 5), Error);  // past the end
}

}  // namespace
}  // namespace foldcore
