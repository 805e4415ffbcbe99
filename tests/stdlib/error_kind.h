// The kind of tc::Error that fn raises (a test failure, and IOError returned, when it raises none).
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "tc/error.h"

inline tc::ErrorKind kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const tc::Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no tc::Error raised";
  return tc::ErrorKind::IOError;
}
