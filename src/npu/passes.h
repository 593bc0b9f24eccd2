// Internal to the backend: the passes, one file each (docs/npu.md "Passes"); compile.cpp
// registers them and holds the pipelines.
#pragma once

#include <memory>

#include "backend.h"
#include "qbc/pass/pass.h"

namespace qbc::npu {

using PassPtr = std::unique_ptr<pass::Pass<Context>>;

PassPtr make_plan_tiles();     // plan_tiles.cpp
PassPtr make_plan_memory();    // plan_memory.cpp
PassPtr make_check_fit();      // plan_memory.cpp
PassPtr make_fill_weights();   // fill_weights.cpp
PassPtr make_lower();          // lower.cpp
PassPtr make_assign_tokens();  // assign_tokens.cpp
PassPtr make_check_context();  // check_context.cpp

}  // namespace qbc::npu
