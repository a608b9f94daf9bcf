// String and number behaviour of the reference renderer. Chat templates must render byte for byte
// as Hugging Face's @huggingface/jinja does, and that renderer is JavaScript: string lengths and
// indices count UTF-16 code units, `trim` strips JavaScript's whitespace set, numbers are doubles
// printed by Number.prototype.toString, and JSON is JSON.stringify's. ferry keeps strings in UTF-8
// (always well formed: sources and inputs are sanitised on the way in) and reproduces those rules
// here, one function per rule, so the interpreter reads like the reference it follows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::chat::js {

// --- UTF-8 ---------------------------------------------------------------------------------------

// Decodes the code point at text[pos] (text is well-formed UTF-8) and advances pos past it.
uint32_t next_code_point(std::string_view text, size_t& pos);
void append_utf8(std::string& out, uint32_t code_point);
// A copy where every malformed sequence is replaced by U+FFFD (what a UTF-8 decoder does when
// node reads a file), so everything downstream may assume well-formed text.
std::string sanitize_utf8(std::string_view bytes);
// The code points of `text`, each as its own UTF-8 string (JavaScript's Array.from(string)).
std::vector<std::string> code_points(std::string_view text);

// --- UTF-16 view ---------------------------------------------------------------------------------

// String.prototype.length: UTF-16 code units.
size_t utf16_length(std::string_view text);
// String.prototype.at(index) (negative counts from the end), nullopt when out of range. A code
// unit that is half of a surrogate pair cannot be written as UTF-8 and becomes U+FFFD, which is
// also what the reference's output encoder makes of it.
std::optional<std::string> utf16_at(std::string_view text, double index);
// a < b as JavaScript compares strings: by UTF-16 code units. Returns -1, 0 or 1.
int compare_utf16(std::string_view a, std::string_view b);

// --- whitespace and case -------------------------------------------------------------------------

// JavaScript's WhiteSpace and LineTerminator code points (/\s/, String.prototype.trim).
bool is_space(uint32_t code_point);
bool is_line_terminator(uint32_t code_point);  // \n \r U+2028 U+2029 (where a regex ^ matches)
std::string_view trim(std::string_view text);
std::string_view trim_start(std::string_view text);
std::string_view trim_end(std::string_view text);

// toUpperCase / toLowerCase. Characters whose full case mapping differs from the simple one
// (ß -> SS, final sigma, ...) and characters the C library maps differently from the reference
// are refused with Error(Unsupported) rather than converted differently.
std::string to_upper(std::string_view text);
std::string to_lower(std::string_view text);
// The first UTF-16 code unit upper-cased, the rest unchanged (the reference's `capitalize`).
std::string capitalize(std::string_view text);
// /\b\w/g upper-cased: the first ASCII word character after a non-word character (`title`).
std::string title_case(std::string_view text);

// --- numbers -------------------------------------------------------------------------------------

// Number.prototype.toString(): shortest round-trip digits, "1e+21", "NaN", "-Infinity", ...
std::string number_to_string(double value);
// The reference's FloatValue.toString(): integral floats keep one decimal ("2.0"), -0 is "-0.0".
std::string float_to_string(double value);
// JSON.stringify(number): like number_to_string, but NaN and infinities are "null".
std::string number_to_json(double value);
// parseInt(text, 10) and parseFloat(text): NaN when no number starts the text.
double parse_int(std::string_view text);
double parse_float(std::string_view text);
// ToNumber(string) as == uses it: whole-string decimal/hex/octal/binary literal, "" is 0, else NaN.
double string_to_number(std::string_view text);
bool is_integral(double value);  // Number.isInteger

// --- JSON ----------------------------------------------------------------------------------------

// JSON.stringify(string): quotes, \" \\ \b \f \n \r \t, \u00XX for other controls, the rest as is.
std::string json_quote(std::string_view text);
// The reference's ensure_ascii: every UTF-16 code unit from U+007F up as \uXXXX (lower-case hex),
// applied to already-quoted JSON text.
std::string ascii_escape(std::string_view json);

// String.prototype.localeCompare under the reference's default (en-US) collation, for the
// printable ASCII strings ferry can order exactly; nullopt when a string has other characters.
std::optional<int> locale_compare_ascii(std::string_view a, std::string_view b);

}  // namespace ferry::chat::js
