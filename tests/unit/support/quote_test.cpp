// quote_prefix / clip_prefix (support/quote.h) and parse_json_text (support/json_parse.h).
#include "qbc/support/quote.h"

#include <gtest/gtest.h>

#include <string>

#include "qbc/support/json_parse.h"
#include "test_support.h"

namespace qbc {
namespace {

using testing::contains;

TEST(QuotePrefixTest, ShortValuesAreQuotedWhole) {
  EXPECT_EQ(quote_prefix("abc"), "'abc'");
  EXPECT_EQ(quote_prefix(""), "''");
  EXPECT_EQ(quote_prefix(std::string(64, 'a')), "'" + std::string(64, 'a') + "'");
  EXPECT_EQ(clip_prefix("abc"), "abc");
}

TEST(QuotePrefixTest, LongValuesShowAPrefixAndTheirSize) {
  const std::string huge(20 << 20, 'x');
  const std::string q = quote_prefix(huge);
  EXPECT_EQ(q, "'" + std::string(64, 'x') + "\xE2\x80\xA6' (20971520 bytes)");
  EXPECT_LT(q.size(), 100u);
  EXPECT_EQ(quote_prefix("abcdef", 3), "'abc\xE2\x80\xA6' (6 bytes)");
  EXPECT_EQ(clip_prefix("abcdef", 3), "abc\xE2\x80\xA6 (6 bytes)");
}

TEST(QuotePrefixTest, CutsAtACharacterBoundaryAndEscapesControls) {
  // "é" is 2 bytes; a cut after 3 bytes of "aéé" would split the second one.
  EXPECT_EQ(quote_prefix("a\xC3\xA9\xC3\xA9", 4), "'a\xC3\xA9\xE2\x80\xA6' (5 bytes)");
  EXPECT_EQ(quote_prefix("a\nb\x01"), "'a\\x0Ab\\x01'");
}

TEST(ParseJsonTextTest, ParsesValidJson) {
  auto j = parse_json_text("{\"a\": [1, 2.5, \"x\"], \"b\": {\"c\": null}}", "t.json");
  QBC_ASSERT_OK(j);
  EXPECT_EQ((*j)["a"][2], "x");
}

TEST(ParseJsonTextTest, OverflowingNumbersAreLocatedErrors) {
  auto j = parse_json_text("{\n  \"quantization\": {\"weightBits\": 1e999999}}", "c.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(j.status().message(), "c.json:2:")) << j.status().message();
  EXPECT_TRUE(contains(j.status().message(), "at key 'quantization.weightBits'"))
      << j.status().message();
  EXPECT_TRUE(contains(j.status().message(), "number overflow parsing '1e999999'"))
      << j.status().message();
  EXPECT_FALSE(contains(j.status().message(), "[json.exception")) << j.status().message();
}

TEST(ParseJsonTextTest, SyntaxErrorsNameLineColumnAndKey) {
  auto j = parse_json_text("{\"a\": [1, 2, {\"b\": tru}]}", "t.json");
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(contains(j.status().message(), "t.json:1:")) << j.status().message();
  EXPECT_TRUE(contains(j.status().message(), "at key 'a[2].b'")) << j.status().message();
  EXPECT_TRUE(contains(j.status().message(), "invalid literal")) << j.status().message();
}

TEST(ParseJsonTextTest, DeepNestingAndDuplicatesAreRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto j = parse_json_text(deep, "deep.json");
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(contains(j.status().message(), "nesting deeper than 512 levels"))
      << j.status().message();
  EXPECT_LT(j.status().message().size(), 300u);

  JsonParseOptions strict;
  strict.reject_duplicate_keys = true;
  auto d = parse_json_text("{\"w\": {\"dtype\": 1, \"dtype\": 2}}", "", strict);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.status().message(), "duplicate key 'dtype' in entry 'w'"))
      << d.status().message();
  QBC_ASSERT_OK(parse_json_text("{\"w\": {\"dtype\": 1, \"dtype\": 2}}", ""));
}

TEST(ParseJsonTextTest, AHugeBadTokenIsNotEchoed) {
  const std::string text = "{\"x\": \"" + std::string(20 << 20, 'a') + "\\q\"}";
  auto j = parse_json_text(text, "big.json");
  ASSERT_FALSE(j.ok());
  EXPECT_LT(j.status().message().size(), 300u) << j.status().message().substr(0, 400);
}

}  // namespace
}  // namespace qbc
