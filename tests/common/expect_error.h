// Runs `f` and checks it throws a ferry::Error of `kind` whose message holds every needle (the
// what, where and how-to-fix a user reads).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace ferry::testing {

template <class F>
std::string expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string> needles) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n << " in: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return {};
}

}  // namespace ferry::testing
