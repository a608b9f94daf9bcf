// The JavaScript string and number rules the reference renderer follows, checked against values
// JavaScript itself gives (written down by hand from the language's specification).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "chat/js_text.h"
#include "core/error.h"

namespace ferry::chat::js {
namespace {

TEST(JsText, NumberToStringFollowsEcmaScript) {
  EXPECT_EQ(number_to_string(0), "0");
  EXPECT_EQ(number_to_string(-0.0), "0");
  EXPECT_EQ(number_to_string(42), "42");
  EXPECT_EQ(number_to_string(-1.5), "-1.5");
  EXPECT_EQ(number_to_string(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(number_to_string(1e21), "1e+21");
  EXPECT_EQ(number_to_string(1e20), "100000000000000000000");
  EXPECT_EQ(number_to_string(123456789012345680000.0), "123456789012345680000");
  EXPECT_EQ(number_to_string(1.5e300), "1.5e+300");
  EXPECT_EQ(number_to_string(0.000001), "0.000001");
  EXPECT_EQ(number_to_string(0.0000001), "1e-7");
  EXPECT_EQ(number_to_string(1.25e-7), "1.25e-7");
  EXPECT_EQ(number_to_string(9007199254740993.0), "9007199254740992");
  EXPECT_EQ(number_to_string(std::nan("")), "NaN");
  EXPECT_EQ(number_to_string(-std::numeric_limits<double>::infinity()), "-Infinity");
}

TEST(JsText, FloatsKeepOneDecimal) {
  EXPECT_EQ(float_to_string(2.0), "2.0");
  EXPECT_EQ(float_to_string(-0.0), "-0.0");
  EXPECT_EQ(float_to_string(2.5), "2.5");
  EXPECT_EQ(float_to_string(1e20), "100000000000000000000.0");
  EXPECT_EQ(float_to_string(1e21), "1e+21");
  EXPECT_EQ(number_to_json(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(number_to_json(3.0), "3");
}

TEST(JsText, ParseIntAndParseFloat) {
  EXPECT_EQ(parse_int("  42abc"), 42);
  EXPECT_EQ(parse_int("-7"), -7);
  EXPECT_EQ(parse_int("12.9"), 12);
  EXPECT_EQ(parse_int("0x1A"), 0);
  EXPECT_TRUE(std::isnan(parse_int("abc")));
  EXPECT_TRUE(std::isnan(parse_int("")));
  EXPECT_EQ(parse_float("3.5e2x"), 350);
  EXPECT_EQ(parse_float(".5"), 0.5);
  EXPECT_EQ(parse_float("-Infinity"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_float("1e400"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_float("5."), 5);
  EXPECT_TRUE(std::isnan(parse_float("e5")));
}

TEST(JsText, StringToNumberIsWholeString) {
  EXPECT_EQ(string_to_number(""), 0);
  EXPECT_EQ(string_to_number("  12  "), 12);
  EXPECT_EQ(string_to_number("0x10"), 16);
  EXPECT_EQ(string_to_number("0b101"), 5);
  EXPECT_EQ(string_to_number("-1.5e1"), -15);
  EXPECT_TRUE(std::isnan(string_to_number("12px")));
  EXPECT_TRUE(std::isnan(string_to_number("-0x10")));
}

TEST(JsText, Utf16LengthAndIndexing) {
  EXPECT_EQ(utf16_length("abc"), 3u);
  EXPECT_EQ(utf16_length("é"), 1u);
  EXPECT_EQ(utf16_length("😀"), 2u);
  EXPECT_EQ(utf16_at("héllo", 1), "é");
  EXPECT_EQ(utf16_at("héllo", -1), "o");
  EXPECT_EQ(utf16_at("a😀b", 1), "\xEF\xBF\xBD");  // half of the pair
  EXPECT_EQ(utf16_at("a😀b", 3), "b");
  EXPECT_FALSE(utf16_at("abc", 3).has_value());
  EXPECT_FALSE(utf16_at("abc", -4).has_value());
}

TEST(JsText, CompareByUtf16CodeUnits) {
  EXPECT_EQ(compare_utf16("a", "b"), -1);
  EXPECT_EQ(compare_utf16("ab", "a"), 1);
  EXPECT_EQ(compare_utf16("x", "x"), 0);
  // U+FF5E (one unit 0xFF5E) sorts after U+1F600 (units 0xD83D 0xDE00) in UTF-16, before it in UTF-8.
  EXPECT_EQ(compare_utf16("\xEF\xBD\x9E", "😀"), 1);
}

TEST(JsText, WhitespaceIsJavaScripts) {
  EXPECT_EQ(trim(" \t\n\u00a0x\u3000\ufeff"), "x");
  EXPECT_EQ(trim_start("\u2028 y "), "y ");
  EXPECT_EQ(trim_end(" y \u200a"), " y");
  EXPECT_EQ(trim("\u200b"), "\u200b");  // a zero-width space is not whitespace
}

TEST(JsText, CaseMapping) {
  EXPECT_EQ(to_upper("abc é ǆ ω"), "ABC É Ǆ Ω");
  EXPECT_EQ(to_lower("ABC É Ǆ Ω"), "abc é ǆ ω");
  EXPECT_EQ(capitalize("hELLO"), "HELLO");
  EXPECT_EQ(capitalize("éa"), "Éa");
  EXPECT_EQ(capitalize("😀a"), "😀a");
  EXPECT_EQ(title_case("hello world-wide x1y_z éa"), "Hello World-Wide X1y_z éA");
  // Full case mappings that change length are refused, not approximated.
  EXPECT_THROW(to_upper("straße"), Error);
  EXPECT_THROW(to_lower("ΣΑΣ"), Error);
}

TEST(JsText, JsonQuoting) {
  EXPECT_EQ(json_quote("a\"b\\c\n\t\x01/é"), "\"a\\\"b\\\\c\\n\\t\\u0001/é\"");
  EXPECT_EQ(ascii_escape("\"é😀\x7f\""), "\"\\u00e9\\ud83d\\ude00\\u007f\"");
}

TEST(JsText, LocaleCompareOrdersLikeIcuRoot) {
  // Punctuation before digits before letters; a letter's cases together, lower case first.
  EXPECT_LT(*locale_compare_ascii("_", "-"), 0);
  EXPECT_LT(*locale_compare_ascii("-", "1"), 0);
  EXPECT_LT(*locale_compare_ascii("9", "a"), 0);
  EXPECT_LT(*locale_compare_ascii("a", "A"), 0);
  EXPECT_LT(*locale_compare_ascii("A", "b"), 0);
  EXPECT_LT(*locale_compare_ascii("aB", "Ab"), 0);
  EXPECT_LT(*locale_compare_ascii("ab-", "aB1"), 0);
  EXPECT_EQ(*locale_compare_ascii("same", "same"), 0);
  EXPECT_FALSE(locale_compare_ascii("é", "e").has_value());
}

TEST(JsText, SanitizeReplacesMalformedUtf8) {
  EXPECT_EQ(sanitize_utf8("ok"), "ok");
  EXPECT_EQ(sanitize_utf8("a\xFF"
                          "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), "\xEF\xBF\xBD");                              // truncated: one replacement
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(code_points("a😀é").size(), 3u);
}

}  // namespace
}  // namespace ferry::chat::js
