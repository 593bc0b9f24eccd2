# Run at build time (cmake -P): writes OUT with `#define QBC_GIT_DESCRIBE "<git describe>"`
# only when the text changed, so the revision in `qbc --version` and in every file qbc
# writes is the one that was built, not the one that was configured.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --tags
                OUTPUT_VARIABLE describe OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT describe)
  set(describe "unknown")
endif()
set(content "#pragma once\n#define QBC_GIT_DESCRIBE \"${describe}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
