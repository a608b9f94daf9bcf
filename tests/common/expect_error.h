// A check that a call fails with a given ferry::Error kind and a message naming what it should
// (the what, where and how-to-fix a user reads).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "core/error.h"

namespace ferry::testing {

// Runs `f`, expects a ferry::Error of `kind` whose message contains every one of `needles`;
// returns the message ("" when nothing was thrown).
template <typename F>
std::string expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string_view> needles) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), kind) << "kind " << error_kind_name(e.kind()) << ", expected " << error_kind_name(kind) << ": "
                              << msg;
    for (std::string_view needle : needles) {
      EXPECT_NE(msg.find(needle), std::string::npos) << "message lacks \"" << needle << "\": " << msg;
    }
    return msg;
  }
  ADD_FAILURE() << "expected an Error of kind " << error_kind_name(kind) << ", nothing was thrown";
  return {};
}

}  // namespace ferry::testing
