// libFuzzer target: the .npy reader (header dict, dtype, shape against the data), read as f32.
#include <vector>

#include "fuzz_util.h"
#include "qbc/calib/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = qbc::fuzz::write_input(data, size, "sample.npy");
  std::vector<float> values;
  std::vector<int64_t> shape;
  qbc::fuzz::check(qbc::calib::read_npy(path, &values, &shape));
  return 0;
}
