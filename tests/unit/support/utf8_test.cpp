// The shared UTF-8 validator (support/utf8.h) against RFC 3629's rules, and quote_prefix keeping
// messages valid UTF-8 whatever bytes they quote.
#include "qbc/support/utf8.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "qbc/support/quote.h"
#include "test_support.h"

namespace qbc {
namespace {

using testing::contains;

TEST(Utf8Test, AcceptsWellFormedText) {
  for (const char* s : {"", "plain ascii", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                        "\xEF\xBF\xBF", "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF"}) {
    EXPECT_TRUE(is_valid_utf8(s)) << s;
  }
}

TEST(Utf8Test, RejectsEveryIllFormedClassAtItsFirstByte) {
  struct Case {
    std::string s;
    size_t at;
  };
  const Case cases[] = {
      {"ab\x80", 2},               // a lone continuation byte
      {"a\xC3", 1},                // cut short at the end
      {"a\xC3z", 1},               // a lead byte not followed by a continuation
      {"\xC0\xAF", 0},             // overlong '/'
      {"\xE0\x80\xAF", 0},         // overlong, 3 bytes
      {"\xF0\x80\x80\xAF", 0},     // overlong, 4 bytes
      {"x\xED\xA0\x80", 1},        // U+D800, a surrogate
      {"\xF4\x90\x80\x80", 0},     // past U+10FFFF
      {"ok\xFF", 2},               // never valid
      {"\xE2\x82\xAC\xF8\x88", 3}  // after a valid character
  };
  for (const Case& c : cases) {
    EXPECT_EQ(utf8_invalid_at(c.s), c.at) << ::testing::PrintToString(c.s);
    EXPECT_FALSE(is_valid_utf8(c.s));
    // The same rule as nlohmann's writer: what we refuse, it would throw on.
    EXPECT_THROW((void)nlohmann::json(c.s).dump(), nlohmann::json::type_error);
  }
}

TEST(Utf8Test, TextErrorsGiveLineAndColumnValueErrorsTheOffset) {
  const Status t = check_utf8_text("a: 1\nbb: \"x\xFF\"\n", "c.yaml", "the text");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.message(), "c.yaml:2:7: the text is not valid UTF-8 (byte 0xFF)");
  const Status v = check_utf8_value("abc\xC3", "key 'x'");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.message(), "key 'x' is not valid UTF-8 (byte 0xC3 at offset 3 of 4)");
  QBC_ASSERT_OK(check_utf8_text("\xC3\xA9t\xC3\xA9", "c.yaml", "the text"));
}

TEST(Utf8Test, QuotedValuesEscapeBytesOutsideUtf8) {
  EXPECT_EQ(quote_prefix("a\xFF"
                         "b\xC3\xA9"),
            "'a\\xFFb\xC3\xA9'");
  EXPECT_EQ(clip_prefix("\xED\xA0\x80"), "\\xED\\xA0\\x80");
  const std::string q = quote_prefix(std::string("\xC3", 1) + std::string(100, 'x'));
  EXPECT_TRUE(is_valid_utf8(q)) << q;
  EXPECT_TRUE(contains(q, "\\xC3"));
}

}  // namespace
}  // namespace qbc
