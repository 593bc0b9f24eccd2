// std::bit_cast for C++17: the bits of one trivially copyable value as another type of the
// same size (float <-> uint32_t in the numerics kernels and their tests).
#pragma once

#include <cstring>
#include <type_traits>

namespace qbc {

template <typename To, typename From>
To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of different sizes");
  static_assert(std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>,
                "bit_cast of a type that is not trivially copyable");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

}  // namespace qbc
