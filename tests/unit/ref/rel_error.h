// The error measure the float reference tests share: max |a − b| / max(1, max |b|) of a
// session's values `a` against a float64 reference `b`. Header-only because tests/unit/ref
// builds one binary per *_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace qbc::ref::testing {

template <typename T>
double rel_error(const std::vector<T>& a, const std::vector<double>& b) {
  double err = 0.0, scale = 1.0;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / scale;
}

}  // namespace qbc::ref::testing
