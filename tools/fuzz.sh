#!/usr/bin/env bash
# Coverage-guided fuzzing of every reader with libFuzzer (docs/testing.md, "Fuzzing").
#
#   tools/fuzz.sh build                      configure build-fuzz/ (clang++, -DQBC_FUZZ=ON) and
#                                            build the targets
#   tools/fuzz.sh corpus                     write the seed corpora to build-fuzz/corpus/<reader>/
#                                            from the shared assets (tools/fuzz_seeds.py)
#   tools/fuzz.sh run [--time S] [--runs N] [--timeout T] [READER...]
#                                            run each target S seconds (default 120), or until
#                                            N executions when --runs is given (then S, if
#                                            given, caps the time), one process, and print its
#                                            executions and findings; an input running longer
#                                            than T wall-clock seconds (default 20) is a finding:
#                                            raise T on a machine busy with other work (a
#                                            starved target's ordinary input passes 20 s)
#   tools/fuzz.sh all [--time S]             build, corpus, run
#
# Readers: safetensors gguf config_json prequant_config prequant_model tokenizer_json vocab_json chat_template compile_config_json
# compile_config_yaml mblt mblt_text npy mxq kv_cache image (target fuzz_<reader>; kv_cache loads the
# model build-fuzz/kv_cache-model.mxq that `corpus` compiles). Environment: QBC_SHARED (default ../shared), QBC_JOBS (build
# jobs, default 1), QBC_FUZZ_DIR (default build-fuzz). Crashes and the inputs that caused them go
# to build-fuzz/findings/<reader>/; the run log of each target to build-fuzz/<reader>.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${QBC_FUZZ_DIR:-$root/build-fuzz}
shared=${QBC_SHARED:-$root/../shared}
readers=(safetensors gguf config_json prequant_config prequant_model tokenizer_json vocab_json chat_template compile_config_json
         compile_config_yaml mblt mblt_text npy mxq kv_cache image)

build() {
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache} CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" -DQBC_FUZZ=ON >/dev/null
  cmake --build "$dir" -j "${QBC_JOBS:-1}" --target fuzzers
}

corpus() {
  local qbc=()
  [ -x "$root/build/tools/qbc" ] && qbc=(--qbc "$root/build/tools/qbc")
  python3 "$root/tools/fuzz_seeds.py" "$dir/corpus" --shared "$shared" "${qbc[@]}"
}

run() {
  local seconds=120 runs="" timed="" timeout=20 chosen=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --time) seconds=$2; timed=1; shift ;;
      --runs) runs=$2; shift ;;
      --timeout) timeout=$2; shift ;;
      *) chosen+=("$1") ;;
    esac
    shift
  done
  [ ${#chosen[@]} -gt 0 ] || chosen=("${readers[@]}")
  local status=0
  for r in "${chosen[@]}"; do
    local bin="$dir/fuzz/fuzz_$r" work="$dir/work/$r" found="$dir/findings/$r"
    [ -x "$bin" ] || { echo "fuzz: $bin not built (tools/fuzz.sh build)" >&2; exit 2; }
    mkdir -p "$work" "$found" "$dir/corpus/$r"
    # An MXQ seed is a whole compiled model (1.3 MB): inputs may be that long.
    local extra=()
    [ "$r" = mxq ] && extra=(-max_len=1400000)
    # --runs N: N executions, with no time limit unless --time was given too.
    local limit=(-max_total_time="$seconds")
    if [ -n "$runs" ]; then
      limit=(-runs="$runs")
      [ -n "$timed" ] && limit+=(-max_total_time="$seconds")
    fi
    # The evolving corpus lives in work/ (new inputs are written to the first folder); the seeds
    # stay as they are.
    local t0
    t0=$(date +%s)
    QBC_FUZZ_KV_MODEL="$dir/kv_cache-model.mxq" \
    ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
      "$bin" "$work" "$dir/corpus/$r" "${limit[@]}" \
      -rss_limit_mb=4096 -malloc_limit_mb=4096 -timeout="$timeout" -print_final_stats=1 "${extra[@]}" \
      -artifact_prefix="$found/" >"$dir/$r.log" 2>&1 || status=1
    local execs
    execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$dir/$r.log" | tail -1 | grep -o '[0-9]*$' || true)
    local n
    n=$(find "$found" -type f | wc -l)
    echo "fuzz_$r: ${execs:-?} executions in $(($(date +%s) - t0))s, $n finding(s)$( [ "$n" -gt 0 ] && echo " in $found")"
  done
  return $status
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  build) build ;;
  corpus) corpus ;;
  run) run "$@" ;;
  all) build; corpus; run "$@" ;;
  -h|--help|"") awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; [ -n "$cmd" ] ;;
  *) echo "fuzz.sh: unknown command $cmd" >&2; exit 2 ;;
esac
