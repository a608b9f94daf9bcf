// Differential test of single constructs: several hundred small templates, each aimed at one
// rule of the reference renderer (number printing, loose equality, filter dispatch per type,
// loop variables, scoping, whitespace control, error cases...), rendered by ferry and by
// @huggingface/jinja with the same variables. Output must be byte-identical; where the reference
// throws, ferry must throw; ferry may refuse with Error(Unsupported) (listed in the output).
#include <gtest/gtest.h>

#include <cstdlib>

#include "chat/chat_template.h"
#include "core/error.h"
#include "reference_renders.h"

namespace ferry {
namespace {

using ojson = nlohmann::ordered_json;

const char* const
    kSnippets
        [] =
            {
                // literals and number printing
                R"J({{ 1 }}|{{ 1.0 }}|{{ -0.0 }}|{{ 0.5 }}|{{ -3 }}|{{ 007 }}|{{ 1.50 }})J",
                R"J({{ 10/4 }}|{{ 10//4 }}|{{ -7//2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 7.5 % 2 }}|{{ 2**10 }}|{{ 2**-1 }}|{{ 2**0.5 }})J",
                R"J({{ 1/0 }}|{{ -1/0 }}|{{ 0/0 }}|{{ 1//0 }}|{{ 5 % 0 }})J",
                R"J({{ 10**21 }}|{{ 10**20 }}|{{ 10.0**21 }}|{{ 10.0**20 }}|{{ 2**53 + 1 }}|{{ 0.1 + 0.2 }}|{{ 1.0 * 3 }})J",
                R"J({{ 0.000001 }}|{{ 0.0000001 }}|{{ 123456789.125 }}|{{ 1.5 * 1000000 }}|{{ 1 / 3 }}|{{ 2 / 3 * 3 }})J",
                R"J({{ 0 ** -1 }})J",
                R"J({{ (-8) ** 0.5 }})J",
                R"J({{ 2 ** 3 ** 2 }}|{{ 2 + 3 * 4 }}|{{ (2 + 3) * 4 }}|{{ -2 ** 2 }}|{{ 10 - 2 - 3 }})J",
                R"J({{ true }}|{{ True }}|{{ false }}|{{ none }}|{{ None }}|{{ undefined_name }}|x)J",
                R"J({{ "a" "b" 'c' }}|{{ 'it''s' }}|{{ "tab\there" }}|{{ "nl\nx" }}|{{ "q\"q" }}|{{ 'q\'q' }}|{{ "\x41\u00e9" }})J",
                R"J({{ "\uD83D\uDE00" }})J",
                R"J({{ "bad \q escape" }})J",
                R"J({{ [1, 2.5, "x", none, true, undefined_name] }}|{{ {"a": 1, "b": [1, {"c": none}]} }}|{{ [] }}|{{ {} }})J",
                R"J({{ (1, 2) }})J",
                R"J({{ {"a": {"b": 1}} }}|{{ {"k": "}}"} }})J",
                R"J({{ [1, 2 3] }})J",
                // string concatenation and conversion
                R"J({{ "a" ~ 1 ~ 1.0 ~ 2.5 ~ true ~ [1, 2] ~ {"a": 1} ~ [1.0, "x", [2, 3]] }})J",
                R"J({{ "a" + 1 }}|{{ 1 + "a" }}|{{ "a" + 1.0 }}|{{ [1] + [2] }}|{{ (1, 2) + [3] }}|{{ "x" + [1, 2] }})J",
                R"J({{ none ~ "x" }})J",
                R"J({{ undefined_name ~ "x" }})J",
                R"J({{ "x" + none }})J",
                R"J({{ 1 + true }})J",
                R"J({{ "a" * 3 }})J",
                R"J({{ [1] * 2 }})J",
                // equality and membership
                R"J({{ 1 == "1" }}|{{ 1 == 1.0 }}|{{ none == undefined_name }}|{{ true == 1 }}|{{ "" == 0 }}|{{ " " == 0 }}|{{ "0x10" == 16 }})J",
                R"J({{ [1] == [1] }}|{{ lst == lst }}|{{ [1] == 1 }}|{{ "1,2" == [1, 2] }}|{{ {} == "[object Map]" }}|{{ none == 0 }}|{{ none != none }})J",
                R"J({{ "abc" == "abc" }}|{{ 1.5 == "1.5" }}|{{ true == "1" }}|{{ false == "" }}|{{ [] == "" }}|{{ [none] == "" }}|{{ [[1, 2], 3] == "1,2,3" }})J",
                R"J({{ 1 in [1, 2] }}|{{ "1" in [1] }}|{{ 1.0 in [1] }}|{{ "a" in "abc" }}|{{ "a" in {"a": 1} }}|{{ "z" not in {"a": 1} }})J",
                R"J({{ "a" in undefined_name }}|{{ "a" not in undefined_name }}|{{ d in [d] }}|{{ {} in [{}] }})J",
                R"J({{ lst in [lst] }})J",
                R"J({{ none in [none] }})J",
                R"J({{ 1 in "123" }})J",
                R"J({{ undefined_name in [1] }})J",
                R"J({{ "a" in none }})J",
                R"J({{ 1 < 2.5 }}|{{ 2 >= 2 }}|{{ 3 <= 2 }}|{{ 1 != 2 }}|{{ 0/0 == 0/0 }})J",
                R"J({{ "a" < "b" }})J",
                R"J({{ true < 2 }})J",
                R"J({{ "a" in "abc" == true }}|{{ 1 == 1 == true }}|{{ 1 in [1] == true }})J",
                R"J({{ "a" in "abc" in "xyz" }})J",
                R"J({{ 1 < 2 < 3 }})J",
                // logic
                R"J({{ 0 or "x" }}|{{ [] or {} }}|{{ "a" and "b" }}|{{ none and 1 }}|{{ 0 and 1 }}|{{ not none }}|{{ not [] }}|{{ not not 1 }})J",
                R"J({{ not 1 == 2 }}|{{ not 1 in [1] }}|{{ 1 not in [1] }}|{{ not "" and "x" }}|{{ namespace() and "ns" }}|{{ range and "fn" }})J",
                R"J({{ -true }}|{{ +1.5 }}|{{ - - 1 }}|{{ -(3) }}|{{ -(1.0) }}|{{ -(0) }}|{{ -(0.0) }})J",
                R"J({{ -undefined_name }})J",
                R"J({{ "y" if 1 else "n" }}|{{ "y" if 0 }}|{{ "a" if 0 else "b" if 0 else "c" }}|{{ ("y" if 0) is defined }})J",
                // filters on lists
                R"J({{ lst|first }}|{{ lst|last }}|{{ lst|length }}|{{ lst|reverse }}|{{ lst|list }}|{{ lst|string }}|{{ lst|join }}|{{ lst|join(", ") }})J",
                R"J({{ strs|sort }}|{{ strs|sort(reverse=true) }}|{{ strs|sort(case_sensitive=true) }}|{{ [3, 1.5, true, 2]|sort }}|{{ strs|join("-") }})J",
                R"J({{ [1, none, "a", 1.0, [2, 3], true, undefined_name]|join("|") }}|{{ [1, 1, "1", 2, 1.0, lst, lst]|unique|length }})J",
                R"J({{ messages|sort(attribute="role")|map(attribute="content")|join("/") }}|{{ [[2, "b"], [1, "a"]]|sort(attribute=0) }})J",
                R"J({{ [{"a": {"b": 2}}, {"a": {"b": 1}}]|sort(attribute="a.b")|tojson }})J",
                R"J({{ [1, "a"]|sort }})J",
                R"J({{ [none, none]|sort }}|{{ [[1], [2]]|length }})J",
                R"J({{ [[1], [2]]|sort }})J",
                R"J({{ lst|sum }})J",
                R"J({{ lst|min }})J",
                R"J({{ []|first }})J",
                R"J({% set e = []|first %}{{ e is defined }}|{{ e }}|{{ ([]|first) is number }})J",
                R"J({{ ([]|last)|default("d") }})J",
                R"J({{ lst|default }})J",
                R"J({{ lst|tojson }}|{{ lst|safe }}|{{ [1, [2, [3]]]|tojson(indent=2) }}|{{ [[], {}]|tojson(indent=2) }})J",
                R"J({{ (1, 2)|list }})J",
                R"J({{ (1, 2)|string }})J",
                R"J({{ (1, 2)|length }}|{{ (1, 2)|first }}|{{ (1, 2)|join("-") }}|{{ (1, 2)|reverse }}|{{ (1, 2) is iterable }}|{{ (1, 2) is sequence }})J",
                R"J({{ (1,)|length }})J",
                // filters on strings
                R"J({{ s|length }}|{{ s|upper }}|{{ s|lower }}|{{ "hello world foo-bar x1y_z"|title }}|{{ "hELLO wORLD"|capitalize }}|{{ "  x  "|trim }})J",
                "{{ \"a\\nb\\n\\nc\"|indent }}|{{ \"a\\nb\"|indent(2, true) }}|{{ \"a\\n\\nb\"|indent(first=true, "
                "blank=true) "
                "}}|{{ \"a\\nb\"|indent(width=1) }}",
                R"J({{ "abc"|join("-") }}|{{ "abc"|join }}|{{ "abc"|string }}|{{ "42abc"|int }}|{{ "x"|int }}|{{ "3.5e2x"|float }}|{{ "  -12"|int }})J",
                R"J({{ "x"|int(7) }}|{{ "x"|float(default=1.5) }}|{{ ".5"|float }}|{{ "1e400"|float }}|{{ "-Infinity"|float }}|{{ "0x1A"|int }}|{{ "12.9"|int }})J",
                R"J({{ "abc"|replace("b", "X") }}|{{ "aaa"|replace("a", "b", 2) }}|{{ "abc"|replace("", "-") }}|{{ "aaa"|replace("a", "b", count=1) }})J",
                R"J({{ "abc"|reverse }})J",
                R"J({{ "abc"|items }})J",
                R"J({{ "a"|indent("  ") }})J",
                R"J({{ uni|length }}|{{ uni|upper }}|{{ uni|capitalize }}|{{ uni|title }}|{{ "ÉCOLE Ñ ǅ"|lower }}|{{ "école"|upper }})J",
                R"J({{ "straße"|upper }})J",
                // numbers and booleans
                R"J({{ -3|abs }}|{{ -3.5|abs }}|{{ 3.7|int }}|{{ -3.7|int }}|{{ 3|float }}|{{ 2.5|string }}|{{ 3|string }}|{{ 3.7|int(0) }})J",
                R"J({{ true|int }}|{{ false|string }}|{{ true|bool }}|{{ true|float }}|{{ 3|tojson }}|{{ 3.0|tojson }}|{{ (1/0)|tojson }})J",
                R"J({{ 3|length }})J",
                R"J({{ 3|round }})J",
                R"J({{ none|string }})J",
                R"J({{ undefined_name|length }})J",
                R"J({{ undefined_name|default("dflt") }}|{{ ""|default("e") }}|{{ ""|default("e", true) }}|{{ none|default("n") }}|{{ 0|default("z", boolean=true) }})J",
                // dicts
                R"J({{ d|items }}|{{ d|length }}|{{ d|dictsort }}|{{ d|dictsort(by="value", reverse=true) }}|{{ d.items() }}|{{ d.keys() }}|{{ d.values() }})J",
                R"J({{ d.get("a") }}|{{ d.get("zz", "def") }}|{{ d.get("zz") }}|{{ d|tojson }}|{{ d|keys }}|{{ d|values }}|{{ keyorder|tojson }})J",
                R"J({{ d|string }})J",
                R"J({{ d|upper }})J",
                R"J({{ d.get(1) }})J",
                R"J({{ d["a"] }}|{{ d.a }}|{{ d.zz }}|{{ d.zz.yy }}|{{ none.x }}|{{ undefined_name.y }}|{{ nested.x.y[2].z }}|{{ nested["x"]["y"][-1]["z"] }})J",
                R"J({{ undefined_name[0] }})J",
                R"J({{ d[0] }})J",
                R"J({{ {"items": 5}.items }}|{{ {"get": 1}.get }})J",
                R"J({{ d.items }})J",
                // tojson options
                R"J({{ {"a": [1, 2.5, "x\"y\n", none, true]}|tojson }}|{{ d|tojson(indent=2) }}|{{ "é😀"|tojson }}|{{ "é😀\x7f"|tojson(ensure_ascii=true) }})J",
                R"J({{ {"b": 1, "a": 2, "B": 3, "_": 4, "a1": 5, "A": 6}|tojson(sort_keys=true) }}|{{ d|tojson(separators=(",", ":")) }}|{{ d|tojson(indent=0) }})J",
                R"J({{ undefined_name|tojson }}|{{ [undefined_name]|tojson }}|{{ [undefined_name]|string }}|{{ "\u0001\u001f"|tojson }})J",
                R"J({{ {" ": 0, "!": 1, "\"": 2, "#": 3, "$": 4, "%": 5, "&": 6, "'": 7, "(": 8, ")": 9, "*": 10, "+": 11, ",": 12, "-": 13, ".": 14, "/": 15, "0": 16, "1": 17, "2": 18, "3": 19, "4": 20, "5": 21, "6": 22, "7": 23, "8": 24, "9": 25, ":": 26, ";": 27, "<": 28, "=": 29, ">": 30, "?": 31, "@": 32, "A": 33, "B": 34, "C": 35, "D": 36, "E": 37, "F": 38, "G": 39, "H": 40, "I": 41, "J": 42, "K": 43, "L": 44, "M": 45, "N": 46, "O": 47, "P": 48, "Q": 49, "R": 50, "S": 51, "T": 52, "U": 53, "V": 54, "W": 55, "X": 56, "Y": 57, "Z": 58, "[": 59, "\\": 60, "]": 61, "^": 62, "_": 63, "`": 64, "a": 65, "b": 66, "c": 67, "d": 68, "e": 69, "f": 70, "g": 71, "h": 72, "i": 73, "j": 74, "k": 75, "l": 76, "m": 77, "n": 78, "o": 79, "p": 80, "q": 81, "r": 82, "s": 83, "t": 84, "u": 85, "v": 86, "w": 87, "x": 88, "y": 89, "z": 90, "{": 91, "|": 92, "}": 93, "~": 94}|tojson(sort_keys=true) }})J",
                R"J({{ {"aB": 0, "Ab": 1, "ab": 2, "AB": 3, "a-b": 4, "a_b": 5, "a b": 6, "ab-": 7, "aB1": 8, "a1": 9, "A1": 10, "a": 11, "A": 12, "ba": 13, "Ba": 14, "b": 15}|tojson(sort_keys=true) }})J",
                R"J({{ (1, 2)|tojson }})J",
                R"J({{ d|tojson(indent="  ") }})J",
                R"J({{ namespace(a=1)|tojson }}|{{ namespace(a=[1, 2]) }})J",
                R"J({{ d|tojson(indent=2, separators=(", ", " = ")) }}|{{ [1,2]|tojson(separators=("; ", ":")) }})J",
                // selectattr / rejectattr / map
                R"J({{ messages|selectattr("role", "equalto", "user")|map(attribute="content")|join(",") }}|{{ messages|rejectattr("role", "equalto", "user")|list|length }})J",
                R"J({{ messages|selectattr("content")|list|length }}|{{ messages|selectattr("role", "defined")|list|length }}|{{ messages|selectattr("nope")|list }})J",
                R"J({{ messages|map(attribute="role")|list }}|{{ messages|map(attribute="missing", default="d")|list }}|{{ messages|map(attribute="missing")|list }})J",
                R"J({{ [1, 2]|selectattr("x") }})J",
                R"J({{ messages|selectattr(role_name) }})J",
                R"J({{ messages|selectattr("role", "eq", "system")|list|length }}|{{ messages|selectattr("role", "none")|list|length }})J",
                R"J({{ messages|selectattr("role", "sameas", "system")|list }})J",
                R"J({{ ["a"]|map("upper")|list }})J",
                R"J({{ [1]|map(attribute="x")|list }})J",
                // tests
                R"J({{ 1 is odd }}|{{ 2 is even }}|{{ none is none }}|{{ undefined_name is defined }}|{{ undefined_name is undefined }}|{{ "a" is string }}|{{ 1 is number }})J",
                R"J({{ 1.5 is integer }}|{{ [] is iterable }}|{{ "x" is iterable }}|{{ {} is mapping }}|{{ "ab" is lower }}|{{ "AB" is upper }}|{{ 3 is lower }}|{{ "Ab" is lower }})J",
                R"J({{ true is true }}|{{ 1 is true }}|{{ false is false }}|{{ true is boolean }}|{{ range is callable }}|{{ "x" is callable }}|{{ {} is sequence }}|{{ 1 is sequence }})J",
                R"J({{ 1 is not none }}|{{ none is not none }}|{{ 1 is not odd }}|{{ (1 is odd) is true }}|{{ 1 is odd is true }}|{{ not 1 is odd }})J",
                R"J({{ 4 * 4 is number }})J",
                R"J({{ 1.0 is odd }})J",
                R"J({{ 1 is sameas 1 }})J",
                R"J({{ 1 is divisibleby 2 }})J",
                R"J({{ 1 is equalto }})J",
                R"J({{ 1 is boolean_thing }})J",
                // string methods
                R"J([{{ "  a b  ".strip() }}|{{ "  a b  ".lstrip() }}|{{ "  a b  ".rstrip() }}|{{ "abc".upper() }}|{{ "ABC".lower() }}|{{ "hello there".title() }}|{{ "abc".capitalize() }}])J",
                R"J({{ "a,b,,c".split(",") }}|{{ " a  b ".split() }}|{{ "a b c".split(none, 1) }}|{{ "a,b,c".split(",", 1) }}|{{ "a,b,c".split(",", 0) }}|{{ "abc".split("x") }})J",
                R"J({{ "a b c".split(" ", -2) }}|{{ " a b c ".split(none, 0) }}|{{ "".split() }}|{{ "".split(",") }}|{{ "a\u3000b\u00a0c".split() }})J",
                R"J({{ "abc".split("") }})J",
                R"J({{ "abc".startswith("a") }}|{{ "abc".endswith(("x", "c")) }}|{{ "abc".startswith(["z"]) }}|{{ "abc".endswith("") }}|{{ "abc".length }}|{{ "😀x".length }})J",
                R"J({{ "abc".startswith(1) }})J",
                R"J({{ "abc".replace("b", "B") }}|{{ "a.b.c".replace(".", "", 1) }}|{{ "x".replace("x", "y", none) }})J",
                R"J({{ "{} {}".format(1, 2) }})J",
                R"J({{ "abc".join(["x"]) }})J",
                R"J({{ "abc".missing }}|{{ [1].missing }}|{{ (1).missing }})J",
                // indexing and slicing
                R"J({{ lst[0] }}|{{ lst[-1] }}|{{ lst[5] }}|{{ lst[-9] }}|{{ lst[1:] }}|{{ lst[:-1] }}|{{ lst[::-1] }}|{{ lst[::2] }}|{{ lst[1:2:] }}|{{ lst[5:] }})J",
                R"J({{ "hello"[1:3] }}|{{ "hello"[::-1] }}|{{ "hello"[-1] }}|{{ "héllo😀x"[5] }}|{{ "héllo😀x"[:6] }}|{{ "héllo😀x"[6] }}|{{ "😀"|length }}|{{ "héllo😀x"[::-1] }})J",
                R"J({{ lst.0 }}|{{ [[1, 2]].0.1 }}|{{ lst["length"] }}|{{ lst.length }}|{{ messages[0]["content"] }}|{{ messages[-1].role }}|{{ lst[-1:-3:-1] }}|{{ lst[::0] }})J",
                R"J({{ lst[1.5] }})J",
                R"J({{ lst["a":] }})J",
                R"J({{ 5[0] }})J",
                R"J({{ lst[:] }}|{{ lst[0:3:2] }}|{{ [][::-1] }}|{{ lst[10:0:-1] }}|{{ lst[-10:] }})J",
                // loops
                R"J({% for x in lst %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %})J",
                R"J({% for x in [] %}a{% else %}empty{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %})J",
                R"J({% for x in lst if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }}{% endfor %}|{% for x in lst if x > 9 %}a{% else %}none{% endfor %})J",
                R"J({% for x in lst %}a{% if x == 2 %}{% continue %}{% endif %}b{{ x }}{% endfor %})J",
                R"J({% for x in lst %}<{% if x == 2 %}{% break %}{% endif %}{{ x }}>{% endfor %})J",
                R"J({% for x in lst %}{% continue %}{% else %}E{% endfor %}|{% for x in lst %}{{ x }}{% break %}{% else %}E{% endfor %})J",
                R"J({% for x in "abc" %}{{ x }}{% endfor %})J",
                R"J({% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }};{% endfor %})J",
                R"J({% for a, b in [(1, 2)] %}{{ a }}{% endfor %})J",
                R"J({% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %})J",
                R"J({% for x in lst %}{% for y in strs %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %})J",
                R"J({% for x in lst %}{% set y = x %}{% endfor %}[{{ y }}]|{% for x in lst %}{% set t = (t or 0) + x %}{{ t }},{% endfor %}[{{ t }}])J",
                R"J({% set ns = namespace(c=0) %}{% for x in lst %}{% set ns.c = ns.c + x %}{% endfor %}{{ ns.c }}|{{ x }})J",
                R"J({% for x in none %}{% endfor %})J",
                R"J({% for x in undefined_name %}{% endfor %})J",
                R"J({% for m in messages %}{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}|{{ loop }})J",
                R"J({% for x in lst %}{{ loop.cycle("a", "b") }}{% endfor %})J",
                R"J({% for x in [[]|first, 1] %}[{{ x }}]{{ loop.previtem }}{% endfor %})J",
                R"J({% break %})J",
                R"J({% macro m() %}{% break %}{% endmacro %}{% for x in lst %}{{ x }}{{ m() }}{% endfor %}end)J",
                // set
                R"J({% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set c = 3 %}{{ c }}|{% set (e, f) = [4, 5] %}{{ e }}{{ f }})J",
                R"J({% set a, b = [1] %})J",
                R"J({% set x %}inner {{ 1 }}{% endset %}[{{ x }}])J",
                R"J({% set d.x = 1 %})J",
                R"J({% set ns = namespace() %}{% set ns.x = [1] %}{{ ns.x }}{{ ns }}|{{ namespace(a=1, b="x") }}|{{ namespace({"a": 1}, b=2) }})J",
                R"J({{ namespace([["a", 1], "bc"]) }}|{{ namespace(a=1).a }}|{{ namespace(a=1)["a"] }}|{{ namespace(a=1).b }})J",
                R"J({{ namespace(1) }})J",
                R"J({{ namespace({}, {}) }})J",
                R"J({% set ns = namespace(a=1) %}{% set ns["a"] = 2 %}{{ ns.a }})J",
                R"J({% set ns = namespace() %}{% set ns.self = ns %}{{ ns.self is defined }})J",
                R"J({% set ns = namespace() %}{% set ns.self = ns %}{{ ns|tojson }})J",
                R"J({% set namespace = 1 %}{{ namespace }}{% for x in [1] %}{{ namespace is callable }}{% endfor %})J",
                R"J({% set true = 5 %}{{ true }})J",
                // macros and call blocks
                R"J({% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 3) }} {{ m(b=5, a=4) }} {{ m() }})J",
                R"J({% macro m() %}{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}|{{ m() }})J",
                R"J({% macro m(a) %}{% endmacro %}{{ m(1, 2) }})J",
                R"J({% macro m(a) %}{% endmacro %}{{ m(b=1) }})J",
                R"J({% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}body{% endcall %})J",
                R"J({% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(a, b) m() %}{{ a + b }}{% endcall %})J",
                R"J({% macro m() %}{{ outer }}{% endmacro %}{% set outer = "O" %}{{ m() }})J",
                R"J({% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }})J",
                R"J({% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(*[1, 2]) }}{{ m(**{"a": 3, "b": 4}) }}{{ m(5, **{"b": 6}) }})J",
                R"J({% macro m(a, b=a) %}{{ b }}{% endmacro %}{{ m(7) }})J",
                R"J({% macro m(x) %}{{ x }}{% endmacro %}{{ m(x=1, x=2) }})J",
                R"J({% macro m() %}{% endmacro %}{{ m }})J",
                R"J({% macro f() %}{{ f() }}{% endmacro %}{{ f() }})J",
                R"J({{ m() }}{% macro m() %}x{% endmacro %})J",
                // filter blocks
                R"J({% filter upper %}hello {{ "x" }}{% endfilter %}|{% filter replace("l", "L") %}hello{% endfilter %})J",
                "{% filter indent(2, true) %}a\nb{% endfilter %}",
                // whitespace control and comments
                "a  {{- \" b \" -}}  c|x {%- if true -%} y {%- endif -%} z",
                "  {% if true %}\n  yes\n  {% endif %}\nafter\n",
                "a {# c #} b|a {#- c -#} b|{# multi\nline #}x",
                "line1\n{%- set x = 1 %}\nline2\n{% set y = 2 -%}\n  line3",
                "\t{% if true %}\t\n{{ 'x' }}\n{% endif %}\n\n",
                "a\r\n  {% if true %}b{% endif %}\r\n",
                "{{ 'a' }}\n{{ 'b' }}\n",
                "  {{ 'a' }}\n  {%+ if true %}x{% endif %}",
                "a {% generation %} b {% endgeneration %} c|a {%- generation -%} b|{%generation%}x",
                "{{- 'x' -}}   \n  {# c #}  \n",
                "{%- if true %}\u00a0 text \u00a0{%- endif %}",
                "{% if true -%}\u3000x{%- endif %}",
                // errors the reference raises too
                R"J({{ raise_exception("boom") }})J",
                R"J({{ raise_exception() }})J",
                R"J({% endif %})J",
                R"J({% if %}{% endif %})J",
                R"J({{ 1 + }})J",
                R"J({% include "x" %})J",
                R"J({% raw %}x{% endraw %})J",
                R"J({{ "unterminated }})J",
                R"J({# open)J",
                R"J({{ a.b( }})J",
                R"J({% for %}{% endfor %})J",
                R"J({% if true %}no end)J",
                R"J({{ 1 }} {{)J",
                R"J({{ x | }})J",
                R"J({{ @ }})J",
                R"J({% set %})J",
                R"J({{ [1, 2][] }})J",
                R"J({{ lst[1:2:3:4] }})J",
                R"J({% macro m(a=1, b) %}{% endmacro %})J",
                R"J({{ f(a=1, 2) }})J",
                R"J({% macro m(a, a) %}{% endmacro %})J",
                R"J({{ 1.5e3 }})J",
                R"J({% for x in lst %}{% endif %})J",
                R"J({{ "x" ]})J",
                R"J({{ not }})J",
                R"J({{ - }})J",
                // globals
                R"J({{ range(3) }}|{{ range(1, 7, 2) }}|{{ range(5, 0, -2) }}|{{ range(0) }}|{{ range(0.5, 2) }}|{{ range(3)|length }})J",
                R"J({{ range(1, 2, 0) }})J",
                R"J({{ strftime_now("%Y-%m-%d %B %b %% %Z") == strftime_now("%Y-%m-%d %B %b %% %Z") }}|{{ strftime_now("%Y")|length }})J",
                R"J({{ strftime_now("%d %b %Y")|length > 5 }})J",
                R"J({{ range }})J",
                R"J({{ undefined_fn() }})J",
                R"J({{ lst() }})J",
                // scoping
                R"J({% if true %}{% set s1 = 1 %}{% endif %}{{ s1 }}|{% for i in [1] %}{% set s2 = 2 %}{% endfor %}[{{ s2 }}])J",
                R"J({% set v = 1 %}{% for i in [1] %}{% set v = 2 %}{{ v }}{% endfor %}{{ v }})J",
                R"J({% set lst = [9] %}{{ lst }}|{{ messages|length }})J",
                // realistic template fragments
                R"J({%- for m in messages -%}<|{{ m.role }}|>{{ m.content | trim }}{%- if not loop.last %}\n{% endif -%}{%- endfor -%}{%- if add_generation_prompt %}<|assistant|>{% endif -%})J",
                R"J({{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}[INST] {{ message['content'] }} [/INST]{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %})J",
                R"J({%- set system = messages[0].content if messages[0].role == "system" else none -%}{{ system or "no system" }})J",
                R"J({{ messages[1:]|map(attribute="content")|list|length }}|{{ (messages|last).content }}|{{ messages[0:1]|map(attribute="role")|first }})J",
};

ojson snippet_variables() {
  return ojson::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi there "},
                 {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "n": 5, "f": 2.5, "s": "Hello World", "empty": "", "lst": [1, 2, 3], "strs": ["b", "A", "c", "B", "a"],
    "d": {"b": 1, "a": 2}, "keyorder": {"b": 1, "10": 2, "a": 3, "2": 4, "01": 5},
    "nested": {"x": {"y": [10, 20, {"z": "deep"}]}}, "flag": true, "nothing": null,
    "uni": "héllo wörld 😀 ǆx", "role_name": "role", "big": 1e300, "float_int": 2.0
  })");
}

TEST(ReferenceSnippets, RenderLikeTheReference) {
  std::vector<std::string> sources(std::begin(kSnippets), std::end(kSnippets));
  std::vector<std::pair<size_t, ojson>> cases;
  for (size_t i = 0; i < sources.size(); ++i) cases.emplace_back(i, snippet_variables());
  const auto expected = testing::render_with_reference(sources, cases);
  ASSERT_EQ(expected.size(), sources.size());
  int identical = 0, both_failed = 0, refused = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    std::string got, error;
    bool ok = false;
    ErrorKind kind = ErrorKind::Internal;
    try {
      got = chat::ChatTemplate::parse(sources[i], "snippet").render(snippet_variables());
      ok = true;
    } catch (const Error& e) {
      error = e.what();
      kind = e.kind();
    }
    const auto& want = expected[i];
    SCOPED_TRACE("snippet: " + sources[i]);
    if (!want.ok) {
      EXPECT_FALSE(ok) << "the reference failed (" << want.error << ") but ferry rendered: " << got;
      if (std::getenv("FERRY_CHAT_VERBOSE") != nullptr) {
        std::printf("both failed: %s\n  reference: %s\n  ferry: %s\n", sources[i].c_str(), want.error.c_str(),
                    error.c_str());
      }
      ++both_failed;
    } else if (!ok) {
      EXPECT_EQ(kind, ErrorKind::Unsupported) << "ferry failed where the reference rendered " << want.output << "\n"
                                              << error;
      if (kind == ErrorKind::Unsupported) {
        ++refused;
        std::printf("refused: %s\n  -> %s\n", sources[i].c_str(), error.c_str());
      }
    } else {
      EXPECT_EQ(got, want.output);
      if (got == want.output) ++identical;
    }
  }
  std::printf("snippets: %zu; identical %d, both failed %d, ferry refused %d\n", sources.size(), identical, both_failed,
              refused);
}

}  // namespace
}  // namespace ferry
