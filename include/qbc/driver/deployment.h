// The configuration translated into the structs of the stages it configures, once, for
// every command that needs them (qbc compile, plan, run/eval --backend npu): the import
// options of the frontend and the backend's target.
#pragma once

#include "qbc/config/config.h"
#include "qbc/frontend/importer.h"
#include "qbc/npu/compile.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The frontend's import options of `cfg`: the KV capacity compiled into every attention
/// node (llm.attributes.maxCacheLength).
frontend::ImportOptions import_options(const config::ResolvedConfig& cfg);

/// The backend's numbers of target profile `t`; kInvalidArgument (naming the key and the
/// profile) when dmaAlignBytes is not a power of two.
StatusOr<npu::Target> npu_target(const config::TargetProfile& t);

}  // namespace qbc::driver
