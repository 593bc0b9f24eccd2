#!/usr/bin/env bash
# Installs and builds what is missing, then runs the whole test suite with ctest.
# Tests that need ../shared (or $QBC_SHARED) fail, not skip, when $CI is set.
#
# First, the hostile-input suites of the model readers (safetensors, GGUF, MXQ,
# config.json, tokenizers, ModelSource, and the seeded mutation round over every
# reader incl. compile configs, MBLT and .npy) run again in a separate build with
# AddressSanitizer and UBSan, so a reader that misbehaves on corrupt input fails
# even when its result looks right. Set QBC_SKIP_ASAN=1 to skip that part locally.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"

if [ "${QBC_SKIP_ASAN:-0}" != 1 ]; then
  asan_tests=(unit_frontend_safetensors_test unit_frontend_gguf_test unit_frontend_model_source_test
              unit_frontend_gguf_model_test unit_frontend_hparams_test unit_frontend_tokenizer_hf_json_test
              unit_frontend_tokenizer_gguf_test unit_frontend_tokenizer_roundtrip_test unit_ir_ir_test
              unit_config_load_test unit_config_validate_test unit_config_target_test
              unit_support_quote_test unit_readers_reader_mutation_test unit_runtime_mxq_hostile_test
              unit_tokenizer_vocab_json_test unit_tokenizer_chat_template_test
              unit_frontend_gguf_dequant_k_test unit_frontend_gguf_dequant_iq_test
              unit_frontend_prequant_test unit_frontend_tokenizer_ggml_vocab_test
              unit_runtime_group_stream_test unit_runtime_vec_kernels_test)
  args=()
  for t in "${asan_tests[@]}"; do args+=(--target "$t"); done
  echo "== AddressSanitizer + UBSan: model readers on hostile input"
  "$root/tools/setup.sh" --build-dir "$root/build-asan" --asan "${args[@]}"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  for t in "${asan_tests[@]}"; do
    "$root/build-asan/tests/$t" --gtest_brief=1 >"$root/build-asan/$t.log" 2>&1 || {
      cat "$root/build-asan/$t.log"; echo "ASan run of $t failed" >&2; exit 1; }
    echo "asan: $t ok"
  done
fi

cd "$root/build"
ctest --output-on-failure -j "${QBC_JOBS:-$(nproc)}" "$@"
