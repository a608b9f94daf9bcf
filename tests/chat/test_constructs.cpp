// One test per template construct, with the expected text written by hand (what Jinja as the
// reference renderer runs it produces), independent of ferry's implementation.
#include <gtest/gtest.h>

#include <ctime>

#include "chat/chat_template.h"
#include "core/error.h"

namespace ferry {
namespace {

using ojson = nlohmann::ordered_json;

const ojson& vars() {
  static const ojson v = ojson::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
                 {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}],
    "lst": [3, 1, 2], "words": ["b", "A", "c"], "d": {"b": 1, "a": 2}, "s": "Hello World",
    "people": [{"name": "Ann", "age": 30, "admin": true}, {"name": "Bob", "age": 25, "admin": false}],
    "text": "  padded\n", "nothing": null, "flag": true
  })");
  return v;
}

std::string render(const std::string& source, const ojson& variables = vars()) {
  return chat::ChatTemplate::parse(source, "test").render(variables);
}

// The error a template raises, as kind and message.
std::pair<ErrorKind, std::string> error_of(const std::string& source, const ojson& variables = vars(),
                                           const chat::RenderLimits& limits = {}) {
  try {
    chat::ChatTemplate::parse(source, "test.jinja").render(variables, limits);
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  ADD_FAILURE() << "no error from " << source;
  return {ErrorKind::Internal, ""};
}

// --- output and whitespace -----------------------------------------------------------------------

TEST(Constructs, TextAndExpressions) {
  EXPECT_EQ(render("plain text"), "plain text");
  EXPECT_EQ(render("{{ 1 + 2 }} {{ 'a' ~ 'b' }} {{ s }}"), "3 ab Hello World");
  EXPECT_EQ(render("[{{ nothing }}][{{ missing }}]"), "[][]");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 2 }} {{ 2 ** 8 }} {{ 2.0 * 2 }}"), "3.5 3 1 256 4.0");
  EXPECT_EQ(render("{{ true }} {{ none is none }} {{ [1, 'a'] }} {{ {'k': 1} }}"), "true true [1, \"a\"] {\"k\": 1}");
}

TEST(Constructs, WhitespaceControl) {
  EXPECT_EQ(render("a   {{- 'b' -}}   c"), "abc");
  EXPECT_EQ(render("a \n {%- if true -%} \n b \n {%- endif -%} \n c"), "abc");
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it goes.
  EXPECT_EQ(render("{% if true %}\n    yes\n    {% endif %}\nend"), "    yes\nend");
  // One trailing newline of the template is dropped.
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  // A newline after {{ }} stays.
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
}

TEST(Constructs, Comments) {
  EXPECT_EQ(render("a{# a comment #}b"), "ab");
  EXPECT_EQ(render("a  {#- trimmed -#}  b"), "ab");
  EXPECT_EQ(render("{# line one\nline two #}x"), "x");
}

TEST(Constructs, GenerationMarkersAreDropped) {
  EXPECT_EQ(render("a{% generation %}b{% endgeneration %}c"), "abc");
}

// --- control flow --------------------------------------------------------------------------------

TEST(Constructs, IfElifElse) {
  const std::string t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %}";
  EXPECT_EQ(render(t, {{"x", 1}}), "one");
  EXPECT_EQ(render(t, {{"x", 2}}), "two");
  EXPECT_EQ(render(t, {{"x", 3}}), "other");
  EXPECT_EQ(render("{% if [] %}a{% elif {} %}b{% elif 'x' %}c{% endif %}"), "c");
}

TEST(Constructs, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in lst %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "1032truefalse3;2121falsefalse3;3210falsetrue3;");
  EXPECT_EQ(render("{% for x in lst %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }} {% endfor %}"),
            ">3>1 3>1>2 1>2> ");
}

TEST(Constructs, ForElseFilterAndUnpacking) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in lst if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}"), "3/2 2/2 ");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}"), "b=1 a=2 ");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}"), "ba");
  EXPECT_EQ(render("{% for m in messages|selectattr('role', 'equalto', 'user') %}[{{ m.content }}]{% endfor %}"),
            "[ Hi ][Bye]");
}

TEST(Constructs, BreakAndContinue) {
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "12");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "13");
  // The reference drops what an interrupted iteration already rendered.
  EXPECT_EQ(render("{% for x in [1, 2] %}<{% if x == 2 %}{% continue %}{% endif %}{{ x }}>{% endfor %}"), "<1>");
}

TEST(Constructs, LoopScope) {
  // A set inside a loop is not seen after it; a namespace carries values out.
  EXPECT_EQ(render("{% for x in lst %}{% set last = x %}{% endfor %}[{{ last }}]"), "[]");
  EXPECT_EQ(render("{% set ns = namespace(total=0) %}{% for x in lst %}{% set ns.total = ns.total + x %}{% endfor %}"
                   "{{ ns.total }}"),
            "6");
}

TEST(Constructs, SetForms) {
  EXPECT_EQ(render("{% set a = 5 %}{{ a }}"), "5");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set block %}x{{ 1 }}y{% endset %}[{{ block }}]"), "[x1y]");
  EXPECT_EQ(render("{% set ns = namespace(a=1, b='two') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}"), "2two");
}

TEST(Constructs, MacrosAndCallBlocks) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(punct='.', name='Cy') }}"),
            "Hi Ann! Hi Bob? Hi Cy.");
  EXPECT_EQ(render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside{% endcall %}"), "<inside>");
  EXPECT_EQ(render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(item) each([1, 2]) %}({{ item }}){% endcall %}"),
            "(1)(2)");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "321");
}

TEST(Constructs, FilterBlock) {
  EXPECT_EQ(render("{% filter upper %}shout {{ 'it' }}{% endfilter %}"), "SHOUT IT");
}

// --- filters -------------------------------------------------------------------------------------

TEST(Filters, Strings) {
  EXPECT_EQ(render("[{{ text|trim }}]"), "[padded]");
  EXPECT_EQ(render("{{ s|upper }} {{ s|lower }} {{ 'hello world'|title }} {{ 'hELLO'|capitalize }}"),
            "HELLO WORLD hello world Hello World HELLO");
  EXPECT_EQ(render("{{ s|length }} {{ s|replace('o', '0') }} {{ 'aaa'|replace('a', 'b', 2) }}"), "11 Hell0 W0rld bba");
  EXPECT_EQ(render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}"), "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(render("{{ '42'|int + 1 }} {{ '2.5'|float * 2 }} {{ 'x'|int }} {{ 3.9|int }}"), "43 5.0 0 3");
  EXPECT_EQ(render("{{ 'abc'|join('-') }} {{ 5|string ~ 'x' }}"), "a-b-c 5x");
}

TEST(Filters, Lists) {
  EXPECT_EQ(render("{{ lst|length }} {{ lst|first }} {{ lst|last }} {{ lst|join(',') }} {{ lst|sort|list }}"),
            "3 3 2 3,1,2 [1, 2, 3]");
  EXPECT_EQ(render("{{ words|sort }} {{ words|sort(reverse=true) }} {{ lst|reverse }}"),
            "[\"A\", \"b\", \"c\"] [\"c\", \"b\", \"A\"] [2, 1, 3]");
  EXPECT_EQ(render("{{ [1, 2, 1, 3, 2]|unique }} {{ lst|string }}"), "[1, 2, 3] [3, 1, 2]");
  EXPECT_EQ(render("{{ people|selectattr('admin')|map(attribute='name')|join }}"), "Ann");
  EXPECT_EQ(render("{{ people|rejectattr('admin')|map(attribute='name')|join }}"), "Bob");
  EXPECT_EQ(render("{{ people|selectattr('name', 'equalto', 'Bob')|map(attribute='age')|first }}"), "25");
  EXPECT_EQ(render("{{ people|map(attribute='nick', default='?')|join(',') }}"), "?,?");
  EXPECT_EQ(render("{{ people|sort(attribute='age')|map(attribute='name')|join(',') }}"), "Bob,Ann");
}

TEST(Filters, Dicts) {
  EXPECT_EQ(render("{{ d|length }} {{ d|items|list }} {{ d|dictsort }}"),
            "2 [[\"b\", 1], [\"a\", 2]] [[\"a\", 2], [\"b\", 1]]");
  EXPECT_EQ(render("{% for k, v in d|dictsort(reverse=true) %}{{ k }}{% endfor %}"), "ba");
}

TEST(Filters, Default) {
  EXPECT_EQ(render("{{ missing|default('x') }} {{ nothing|default('x') }} {{ ''|default('x', true) }}"), "x  x");
}

TEST(Filters, ToJson) {
  EXPECT_EQ(render("{{ {'a': [1, 2.5, 'x'], 'b': none, 'c': true}|tojson }}"),
            "{\"a\": [1, 2.5, \"x\"], \"b\": null, \"c\": true}");
  EXPECT_EQ(render("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  // ensure_ascii is off by default (unlike Python's json.dumps).
  EXPECT_EQ(render("{{ 'é\"\n'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }}"), "\"é\\\"\\n\" \"\\u00e9\"");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2, 'B': 3}|tojson(sort_keys=true) }}"), "{\"a\": 2, \"b\": 1, \"B\": 3}");
  EXPECT_EQ(render("{{ d|tojson(separators=(',', ':')) }}"), "{\"b\":1,\"a\":2}");
}

TEST(Filters, UnknownFilterIsUnsupportedNamingItAndTheLine) {
  const auto [kind, message] = error_of("line one\n{{ lst|round }}");
  EXPECT_EQ(kind, ErrorKind::Unsupported);
  EXPECT_NE(message.find("'round'"), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  EXPECT_NE(message.find("test.jinja"), std::string::npos) << message;
}

// --- tests ---------------------------------------------------------------------------------------

TEST(Tests, TypeAndValueTests) {
  EXPECT_EQ(render("{{ missing is defined }}{{ s is defined }}{{ nothing is none }}{{ missing is none }}"),
            "falsetruetruefalse");
  EXPECT_EQ(render("{{ s is string }}{{ d is mapping }}{{ lst is sequence }}{{ lst is iterable }}{{ 1 is number }}"),
            "truetruetruetruetrue");
  EXPECT_EQ(render("{{ flag is boolean }}{{ 3 is odd }}{{ 3 is even }}{{ s is not string }}{{ 'ab' is lower }}"),
            "truetruefalsefalsetrue");
}

TEST(Tests, UnknownTestIsUnsupported) {
  EXPECT_EQ(error_of("{{ 1 is prime }}").first, ErrorKind::Unsupported);
}

// --- methods, operators, indexing ----------------------------------------------------------------

TEST(Methods, StringMethods) {
  EXPECT_EQ(render("[{{ text.strip() }}][{{ text.lstrip() }}][{{ ' x '.rstrip() }}]"), "[padded][padded\n][ x]");
  EXPECT_EQ(render("{{ 'a,b,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }}"),
            "[\"a\", \"b\", \"c\"] [\"a\", \"b\"] [\"a\", \"b,c\"]");
  EXPECT_EQ(render("{{ s.startswith('Hell') }}{{ s.endswith(('x', 'ld')) }}{{ s.upper() }}{{ s.replace('l', '') }}"),
            "truetrueHELLO WORLDHeo Word");
  EXPECT_EQ(render("{{ 'hello there'.title() }}"), "Hello There");
  // str.format does not exist in the reference renderer.
  const auto [kind, message] = error_of("{{ '{}'.format(1) }}");
  EXPECT_EQ(kind, ErrorKind::Unsupported);
  EXPECT_NE(message.find(".format()"), std::string::npos) << message;
}

TEST(Methods, DictMethods) {
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('z', 'dflt') }} [{{ d.get('z') }}]"), "2 dflt []");
  EXPECT_EQ(render("{{ d.keys() }} {{ d.values() }} {{ d.items() }}"),
            "[\"b\", \"a\"] [1, 2] [[\"b\", 1], [\"a\", 2]]");
}

TEST(Operators, MembershipConcatenationComparison) {
  EXPECT_EQ(render("{{ 1 in lst }}{{ 9 not in lst }}{{ 'ell' in s }}{{ 'a' in d }}"), "truetruetruetrue");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none is none }}"), "a1true");
  EXPECT_EQ(render("{{ 1 < 2 }}{{ 2 <= 1 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 1 is not none }}"),
            "truefalsetruetruetrue");
  EXPECT_EQ(render("{{ 'yes' if flag else 'no' }} {{ 'yes' if not flag else 'no' }}"), "yes no");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not [] }}"), "x y true");
}

TEST(Operators, IndexingAndSlicing) {
  EXPECT_EQ(render("{{ lst[0] }} {{ lst[-1] }} {{ lst[1:] }} {{ lst[:2] }} {{ lst[::-1] }} {{ s[0:5] }} {{ s[::-1] }}"),
            "3 2 [1, 2] [3, 1] [2, 1, 3] Hello dlroW olleH");
  EXPECT_EQ(render("{{ messages[0]['role'] }} {{ messages[-1].content }} {{ messages|length }}"), "system Bye 4");
}

// --- globals -------------------------------------------------------------------------------------

TEST(Globals, RaiseExceptionIsAUsageErrorWithTheMessage) {
  const auto [kind, message] =
      error_of("{% if true %}\n{{ raise_exception('Only user and assistant roles') }}{% endif %}");
  EXPECT_EQ(kind, ErrorKind::Usage);
  EXPECT_NE(message.find("Only user and assistant roles"), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
}

TEST(Globals, RangeAndStrftime) {
  EXPECT_EQ(render("{{ range(3) }} {{ range(1, 6, 2) }} {{ range(3, 0, -1) }}"), "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  localtime_r(&now, &t);
  EXPECT_EQ(render("{{ strftime_now('%Y') }}"), std::to_string(t.tm_year + 1900));
  EXPECT_EQ(render("{{ strftime_now('%d %b')|length }}"), "6");
}

TEST(Globals, ContextCannotRedefineBuiltins) {
  EXPECT_EQ(error_of("x", {{"namespace", 1}}).first, ErrorKind::Usage);
  EXPECT_EQ(error_of("x", {{"true", 1}}).first, ErrorKind::Usage);
}

// --- errors --------------------------------------------------------------------------------------

TEST(Errors, SyntaxErrorsNameTheLine) {
  const auto [kind, message] = error_of("ok\nok\n{% if %}{% endif %}");
  EXPECT_EQ(kind, ErrorKind::Format);
  EXPECT_NE(message.find("line 3"), std::string::npos) << message;
  EXPECT_EQ(error_of("{% for x in lst %}").first, ErrorKind::Format);
  EXPECT_EQ(error_of("{{ 'open }}").first, ErrorKind::Format);
}

TEST(Errors, StatementsTheReferenceLacksAreUnsupported) {
  for (const char* t : {"{% raw %}x{% endraw %}", "a\n{% include 'other.jinja' %}", "{% extends 'base' %}"}) {
    const auto [kind, message] = error_of(t);
    EXPECT_EQ(kind, ErrorKind::Unsupported) << t;
    EXPECT_NE(message.find("not supported"), std::string::npos) << message;
  }
  EXPECT_NE(error_of("a\n{% include 'x' %}").second.find("line 2"), std::string::npos);
}

TEST(Errors, TypeErrorsAtRenderTime) {
  EXPECT_EQ(error_of("{{ missing|trim }}").first, ErrorKind::Usage);
  EXPECT_EQ(error_of("{% for x in nothing %}{% endfor %}").first, ErrorKind::Usage);
  EXPECT_EQ(error_of("{{ nothing ~ 'x' }}").first, ErrorKind::Usage);
}

// --- limits --------------------------------------------------------------------------------------

TEST(Limits, RenderingIsBounded) {
  chat::RenderLimits small;
  small.max_steps = 10'000;
  small.max_output_bytes = 1000;
  small.max_depth = 50;
  small.max_list_length = 100;
  EXPECT_EQ(
      error_of("{% for i in range(99) %}{% for j in range(99) %}{{ i }}{% endfor %}{% endfor %}", vars(), small).first,
      ErrorKind::Unsupported);
  EXPECT_EQ(
      error_of("{% for i in range(90) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", vars(), small).first,
      ErrorKind::Unsupported);
  EXPECT_EQ(error_of("{{ range(1000) }}", vars(), small).first, ErrorKind::Unsupported);
  EXPECT_EQ(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", vars(), small).first, ErrorKind::Unsupported);
  EXPECT_EQ(error_of("{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                     vars(), small)
                .first,
            ErrorKind::Unsupported);
  EXPECT_EQ(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}").first, ErrorKind::Unsupported);
  // Values kept alive step after step count against the allocation budget.
  chat::RenderLimits budget;
  budget.max_allocated_bytes = 1 << 20;
  EXPECT_EQ(error_of("{% set ns = namespace(l=[]) %}{% for i in range(3000) %}{% set ns.l = ns.l + [s ~ i] %}"
                     "{% endfor %}",
                     vars(), budget)
                .first,
            ErrorKind::Unsupported);
  EXPECT_EQ(error_of("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}").first,
            ErrorKind::Unsupported);
  // Long chains build a deep tree without nesting brackets: refused at parse time as well.
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_EQ(error_of(chain + " }}").first, ErrorKind::Unsupported);
  std::string ifs;
  for (int i = 0; i < 300; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 300; ++i) ifs += "{% endif %}";
  EXPECT_EQ(error_of(ifs).first, ErrorKind::Unsupported);
  // A chain the parser accepts but deeper than the evaluation limit.
  std::string medium = "{{ 1";
  for (int i = 0; i < 600; ++i) medium += " ~ 1";
  EXPECT_EQ(error_of(medium + " }}").first, ErrorKind::Unsupported);
}

// --- the chat API --------------------------------------------------------------------------------

TEST(ChatApi, ApplyPassesTheStandardInputs) {
  const auto t = chat::ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if tools is none %}[no tools]{% endif %}{% if add_generation_prompt %}<assistant>{% endif %}"
      "{% if enable_thinking is defined and not enable_thinking %}[no think]{% endif %}{{ eos_token }}",
      "api");
  chat::ChatInputs in;
  in.messages = ojson::array({ojson{{"role", "user"}, {"content", "Hi"}}});
  in.add_generation_prompt = true;
  in.bos_token = "<s>";
  in.extra["enable_thinking"] = false;
  EXPECT_EQ(t.apply(in), "<s><user>Hi[no tools]<assistant>[no think]");
  in.extra["messages"] = 1;
  EXPECT_THROW(t.apply(in), Error);
}

}  // namespace
}  // namespace ferry
