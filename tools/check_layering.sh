#!/usr/bin/env bash
# Checks the stage boundaries of docs/architecture.md ("Dependency rules"). One source of truth:
# the qbc_* libraries each src/<stage>/CMakeLists.txt links are the stages it may include, and a
# fixed policy below (the product split) limits what some stages may link at all.
#
#   tools/check_layering.sh [--root DIR] [--print-rules]
#
#   --root DIR     check the tree at DIR (default: the repository holding this script)
#   --print-rules  print the dependency table as markdown (the one in docs/architecture.md,
#                  refreshed by tools/update-docs.sh) and exit
#
# Prints "layering: ok", or one line per violation and exits 1.
#
# Stages are the folders src/<stage>/ that have a CMakeLists.txt; nothing here names them. For a
# stage X the script reads, from every CMakeLists.txt under src/X/:
#   qbc_add_library(qbc_X ... DEPS ... PRIVATE_DEPS ...)     DEPS are public, PRIVATE_DEPS private
#   qbc_add_interface_library(qbc_X DEPS ...)                public
#   target_link_libraries(T PUBLIC|INTERFACE|PRIVATE ...)    for qbc_X and any other target
#                                                            defined there (e.g. a plugin)
#   qbc_use_torch(T)                                         T's sources may include LibTorch
# A linked qbc_* target counts as the stage whose folder defines it (qbc_ref_torch is ref); the
# targets of proto/CMakeLists.txt count as the pseudo-stage "proto", whose headers are the
# generated "<name>.pb.h" (they are not under include/qbc/); other qbc_* targets (qbc_torch,
# qbc_test_support) are helpers and not checked as stages. Non-qbc libraries are ignored.
#
# Violations:
#   - a function of include/qbc/isa/ that takes a mutable isa::Bundle or isa::Program (Bundle&,
#     Program*, ...): rewriting a program is a compiler pass, and isa ships with the runtime;
#   - a file of src/X/ or include/qbc/X/ includes qbc/Y/ (or a .pb.h for proto) while Y is not X
#     and not a qbc dependency of X; a public header (include/qbc/X/) needs a public one;
#   - a qbc dependency that no file of X includes ("drop allowances nothing uses"), or a public
#     dependency that only src/X/ includes (make it PRIVATE_DEPS). A dependency needed only at
#     link time is kept with a comment in that CMakeLists.txt, with its reason:
#         # layering: link-only qbc_foo (why it is linked but never included)
#   - a dependency the policy below forbids, in CMake or in an #include;
#   - LibTorch (<torch/...>, <ATen/...>, <c10/...>) in a header, or in a .cpp that is not a source
#     of a target calling qbc_use_torch() (today the plugin qbc_ref_torch and bench's
#     qbc-gemm-peak).
#   - a file of the CLI (tools/qbc/) that includes a stage other than driver, support and the
#     runtime's public headers (qbc/runtime/), or a .pb.h: the CLI is a shell over driver/.
#     The includes not yet moved into driver/ are listed, each with its reason, in
#     tools/layering-cli-allow.txt ("FILE | stages | why" a line); an entry whose file is gone
#     or no longer includes a stage it lists is a violation too (drop it).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=check
while [ $# -gt 0 ]; do
  case "$1" in
    --root)
      [ $# -ge 2 ] || { echo "check_layering.sh: --root needs a directory" >&2; exit 2; }
      root=$(cd "$2" && pwd) || exit 2
      shift ;;
    --print-rules) mode=rules ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "check_layering.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
cd "$root"
export LC_ALL=C

# The product-split policy, checked in addition to CMake. It applies to a stage as soon as its
# folder exists. "only" lists everything the stage may link; "never" what it must not. Every stage
# an "only" entry allows has an "only" entry itself, so the runtime's whole closure stays on the
# product side (support, numerics, runner, isa, tensorfile, mxq, tokenizer, image) without a transitive
# check.
#   stage      | kind  | stages                           | why
policy='
support    | only  |                                  | the bottom layer
numerics   | only  | support                          | the integer kernels (docs/numerics.md), shared by the fake-quant oracle and the runtime
pass       | only  | support                          | the pass framework, shared by quant and npu
runner     | only  | support                          | the IR-free Runner interface the runtime implements
isa        | only  | support                          | the NPU program types, verifier and text form, shared by the backend and the runtime
tensorfile | only  | support                          | tensor file I/O, reused by the MXQ writer
tokenizer  | only  | support                          | text <-> token ids and chat templates, shared by the frontend and the runtime
image      | only  | support                          | PNG/JPEG decoding and HF-style preprocessing, for the runtime and calibration
proto      | only  |                                  | generated protobuf messages (MBLT, compile options, MXQ metadata)
mxq        | only  | support isa proto                | the MXQ file format, read by the runtime
runtime    | only  | support numerics mxq runner isa tokenizer image | the runtime knows only MXQ, the NPU program and the tokenizer, nothing compiler-side
npu        | never | quant ref frontend calib driver  | the backend compiles quantized MBLT, not how it was made
'

# Tokenizes one CMakeLists.txt and prints what the checks need, one tab-separated record a line:
#   T file target                  a target defined here (qbc_add_library, add_library, ...)
#   D file target pub|priv dep     a qbc_* library the target links
#   S file target source           a source file of the target
#   U file target                  qbc_use_torch(target)
#   L file dep reason              a "# layering: link-only qbc_foo (reason)" marker
parse_cmake='
function flush() { if (tok != "" || quoted) { n++; tk[n] = tok } tok = ""; quoted = 0 }
{
  line = $0
  if (!inq && match(line, /#[ \t]*layering:[ \t]*link-only[ \t]+/)) {
    rest = substr(line, RSTART + RLENGTH); dep = rest; sub(/[ \t(].*/, "", dep)
    reason = substr(rest, length(dep) + 1); sub(/^[ \t]+/, "", reason); sub(/[ \t]+$/, "", reason)
    printf "L\t%s\t%s\t%s\n", FILE, dep, reason
  }
  len = length(line)
  for (i = 1; i <= len; i++) {
    c = substr(line, i, 1)
    if (inq) {
      if (c == "\\") { tok = tok substr(line, i, 2); i++ }
      else if (c == "\"") inq = 0
      else tok = tok c
      continue
    }
    if (c == "#") break
    if (c == "\"") { inq = 1; quoted = 1 }
    else if (c == " " || c == "\t" || c == "\r") flush()
    else if (c == "(" || c == ")") { flush(); n++; tk[n] = c }
    else tok = tok c
  }
  if (inq) tok = tok " "; else flush()
}
function is_qbc(t) { return t ~ /^qbc_[A-Za-z0-9_]+$/ }
END {
  for (i = 1; i < n; i++) {
    if (tk[i + 1] != "(" || tk[i] !~ /^[A-Za-z_][A-Za-z0-9_]*$/) continue
    cmd = tolower(tk[i]); na = 0; depth = 0
    for (j = i + 2; j <= n; j++) {
      if (tk[j] == "(") depth++
      else if (tk[j] == ")") { if (depth == 0) break; depth-- }
      na++; a[na] = tk[j]
    }
    i = j
    name = a[1]
    if (na == 0 || name ~ /[$]/) continue
    if (cmd == "qbc_add_library" || cmd == "qbc_add_interface_library") {
      printf "T\t%s\t%s\n", FILE, name
      kw = "deps"; vis = "pub"
      for (k = 2; k <= na; k++) {
        if (a[k] ~ /^[A-Z][A-Z_]*$/) {
          kw = (a[k] ~ /DEPS$/ || a[k] ~ /^(PUBLIC|PRIVATE|INTERFACE)$/) ? "deps" : "src"
          vis = (a[k] ~ /PRIVATE/) ? "priv" : "pub"
        } else if (kw == "src") printf "S\t%s\t%s\t%s\n", FILE, name, a[k]
        else if (is_qbc(a[k])) printf "D\t%s\t%s\t%s\t%s\n", FILE, name, vis, a[k]
      }
    } else if (cmd == "add_library" || cmd == "add_executable") {
      if (a[2] == "ALIAS" || a[2] == "IMPORTED") continue
      printf "T\t%s\t%s\n", FILE, name
      for (k = 2; k <= na; k++)
        if (a[k] !~ /^(STATIC|SHARED|MODULE|OBJECT|INTERFACE|EXCLUDE_FROM_ALL|WIN32|MACOSX_BUNDLE)$/)
          printf "S\t%s\t%s\t%s\n", FILE, name, a[k]
    } else if (cmd == "target_sources") {
      for (k = 2; k <= na; k++)
        if (a[k] !~ /^(PUBLIC|PRIVATE|INTERFACE)$/) printf "S\t%s\t%s\t%s\n", FILE, name, a[k]
    } else if (cmd == "target_link_libraries") {
      vis = "pub"
      for (k = 2; k <= na; k++) {
        if (a[k] ~ /^(PRIVATE|LINK_PRIVATE)$/) vis = "priv"
        else if (a[k] ~ /^(PUBLIC|INTERFACE|LINK_PUBLIC|LINK_INTERFACE_LIBRARIES)$/) vis = "pub"
        else if (is_qbc(a[k])) printf "D\t%s\t%s\t%s\t%s\n", FILE, name, vis, a[k]
      }
    } else if (cmd == "qbc_use_torch") printf "U\t%s\t%s\n", FILE, name
  }
}'

# Everything the checks read, as one stream of records (see also the main program's header).
facts() {
  local f d
  for d in src/*/; do
    d=${d%/}
    [ -f "$d/CMakeLists.txt" ] && printf 'G\t%s\n' "${d#src/}"
  done
  for d in include/qbc/*/; do
    [ -d "$d" ] && d=${d%/} && printf 'H\t%s\n' "${d#include/qbc/}"
  done
  while IFS= read -r f; do
    awk -v FILE="$f" "$parse_cmake" "$f"
  done < <(find . -mindepth 1 \( -name '.*' -o -name build -o -name 'build-*' -o -name 'build_*' \) -prune \
             -o -name CMakeLists.txt -print | sed 's|^\./||' | sort)
  while IFS='|' read -r stage kind list why; do
    stage=$(echo $stage)
    [ -n "$stage" ] || continue
    printf 'P\t%s\t%s\t%s\t%s\n' "$stage" $kind "$(echo $list)" "$(echo $why)"
  done <<<"$policy"
  # The CLI's allow-list (see the header): A file stages why.
  if [ -f tools/layering-cli-allow.txt ]; then
    sed -e 's/#.*//' tools/layering-cli-allow.txt | while IFS='|' read -r file list why; do
      file=$(echo $file)
      [ -n "$file" ] || continue
      printf 'A\t%s\t%s\t%s\n' "$file" "$(echo $list)" "$(echo $why)"
      if [ -f "$file" ]; then printf 'F\t%s\n' "$file"; fi
    done
  fi
  # Declarations in include/qbc/isa/ of functions taking a mutable program (see "M" below).
  if [ -d include/qbc/isa ]; then
    grep -nE '[(,][[:space:]]*(isa::)?(Bundle|Program)[[:space:]]*[&*]' \
        --include='*.h' -r include/qbc/isa 2>/dev/null |
      sed -nE 's/^([^:]+):([0-9]+):[[:space:]]*(.*)$/M\t\1\t\2\t\3/p' | sort || true
  fi
  local dirs=()
  for d in src include tools bench tests; do [ -d "$d" ] && dirs+=("$d"); done
  [ ${#dirs[@]} -gt 0 ] || return 0
  grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' \
      --include='*.h' --include='*.hh' --include='*.hpp' --include='*.inc' --include='*.def' \
      --include='*.cpp' --include='*.cc' --include='*.cxx' "${dirs[@]}" 2>/dev/null |
    sed -nE 's/^([^:]+):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*([<"])([^>"]+)[>"].*/I\t\1\t\2\t\3\t\4/p' |
    sort -t "$(printf '\t')" -k2,2 -k3,3n || true
}

# The checks and the table. Input records (tab-separated):
#   G stage | H include/qbc dir | T/D/S/U/L from parse_cmake | P policy | I file line delim header
#   M file line text: a function of include/qbc/isa/ taking a mutable Bundle or Program. isa
#     ships with the runtime and holds the program, its verifier and its text form; a function
#     that rewrites a program is a compiler pass and belongs to the backend (npu), as
#     assign_tokens does.
main='
BEGIN { FS = "\t"; nviol = 0; kCliMay = "driver support runtime" }
function viol(msg) { nviol++; if (MODE != "rules") print "layering: " msg }
function words_sorted(s,    w, m, i, j, t, out) {
  m = split(s, w, " ")
  for (i = 2; i <= m; i++) { t = w[i]; for (j = i - 1; j >= 1 && w[j] > t; j--) w[j + 1] = w[j]; w[j + 1] = t }
  out = ""; for (i = 1; i <= m; i++) if (i == 1 || w[i] != w[i - 1]) out = out (out == "" ? "" : " ") w[i]
  return out
}
function commas(s) { gsub(/ /, ", ", s); return s }
function inlist(x, s) { return index(" " s " ", " " x " ") > 0 }
# The stage a CMakeLists.txt or source path belongs to: src/X/... -> X, proto/... -> proto.
function owner_of_path(p,   q) {
  if (p ~ /^src\/[^\/]+\//) { q = substr(p, 5); sub(/\/.*/, "", q); return q }
  if (p ~ /^proto\//) return "proto"
  return ""
}
function dirname(p) { if (p !~ /\//) return "."; sub(/\/[^\/]*$/, "", p); return p }
function rule_text(x) { return x " -> " (pkind[x] == "only" ? (plist[x] == "" ? "nothing" : "only " commas(plist[x])) : "never " commas(plist[x])) }
function forbids(x, y) {
  if (!(x in pkind)) return 0
  return pkind[x] == "only" ? !inlist(y, plist[x]) : inlist(y, plist[x])
}
function label(y) { return y == "proto" ? "qbc_proto" : "qbc_" y }
$1 == "G" { stage[$2] = 1; stages = stages " " $2 }
$1 == "H" { incdir[$2] = 1 }
$1 == "T" { if (!($3 in tfile)) { tfile[$3] = $2; towner[$3] = owner_of_path($2) } }
$1 == "D" { nd++; dfile[nd] = $2; dtarget[nd] = $3; dvis[nd] = $4; ddep[nd] = $5 }
$1 == "S" { src[$2 SUBSEP $3] = src[$2 SUBSEP $3] " " $4 }
$1 == "U" { nu++; ufile[nu] = $2; utarget[nu] = $3 }
$1 == "L" { nl++; lfile[nl] = $2; ldep[nl] = $3; lreason[nl] = $4 }
$1 == "P" { pkind[$2] = $3; plist[$2] = $4; pwhy[$2] = $5; porder = porder " " $2 }
$1 == "I" { ni++; ifile[ni] = $2; iline[ni] = $3; idelim[ni] = $4; ihdr[ni] = $5 }
$1 == "A" { na_++; afile[na_] = $2; alist[na_] = $3; awhy[na_] = $4; allowed[$2] = allowed[$2] " " $3 }
$1 == "F" { afound[$2] = 1 }
$1 == "M" { viol($2 ":" $3 ": takes a mutable program (" $4 "): a compiler pass, which belongs in npu; isa ships with the runtime and only holds, checks and prints programs") }
END {
  stages = words_sorted(stages); ns = split(stages, st, " ")
  # Declared dependencies per stage: deps[X, Y] (Y a stage or proto), with where they come from.
  for (k = 1; k <= nd; k++) {
    t = dtarget[k]; d = ddep[k]
    x = (t in towner) ? towner[t] : owner_of_path(dfile[k])
    if (!(x in stage)) continue
    if (!(d in tfile)) { viol(dfile[k] ": " t " links " d ", which no CMakeLists.txt defines"); continue }
    y = towner[d]
    if (y == x) continue
    if (y == "" || (y != "proto" && !(y in stage))) {
      if (x in pkind && pkind[x] == "only")
        viol(dfile[k] ": " t " links " d "; policy \"" rule_text(x) "\" forbids it (" pwhy[x] ")")
      continue
    }
    if (!((x, y) in deps)) { deps[x, y] = d; depfile[x, y] = dfile[k]; deptarget[x, y] = t; dlist[x] = dlist[x] " " y }
    if (t == "qbc_" x && dvis[k] == "pub") pub[x, y] = 1
  }
  for (k = 1; k <= nu; k++) {
    x = owner_of_path(ufile[k])
    if (x in stage && x in pkind && pkind[x] == "only")
      viol(ufile[k] ": qbc_use_torch(" utarget[k] "); policy \"" rule_text(x) "\" forbids LibTorch (" pwhy[x] ")")
  }
  # The policy keeps the closure of an "only" stage on its side: what it allows is "only" too.
  m = split(porder, pp, " ")
  for (i = 1; i <= m; i++) {
    if (pkind[pp[i]] != "only") continue
    n2 = split(plist[pp[i]], dd, " ")
    for (j = 1; j <= n2; j++) if (pkind[dd[j]] != "only")
      viol("tools/check_layering.sh: policy \"" rule_text(pp[i]) "\" allows " dd[j] ", which has no \"only\" entry")
  }
  # Structure: every stage defines its library; every include/qbc/<dir> belongs to a stage.
  for (i = 1; i <= ns; i++) {
    x = st[i]
    if (!(("qbc_" x) in tfile) || towner["qbc_" x] != x)
      viol("src/" x "/CMakeLists.txt: defines no qbc_" x " (qbc_add_library or qbc_add_interface_library)")
  }
  for (x in incdir) if (!(x in stage)) viol("include/qbc/" x "/: no stage owns these headers (no src/" x "/CMakeLists.txt)")

  # Sources that may include LibTorch: those of targets calling qbc_use_torch().
  for (k = 1; k <= nu; k++) {
    f = ufile[k]; dir = dirname(f); m = split(src[f SUBSEP utarget[k]], ss, " ")
    for (j = 1; j <= m; j++) {
      s = ss[j]; sub(/^[$][{]CMAKE_CURRENT_SOURCE_DIR[}]\//, "", s)
      if (s ~ /[$]/) { torchdir[dir == "." ? "" : dir "/"] = 1; continue }
      torchfile[(dir == "." ? "" : dir "/") s] = 1
      torchlist = torchlist (torchlist == "" ? "" : ", ") "`" (dir == "." ? "" : dir "/") s "`"
    }
    torchtargets = torchtargets (torchtargets == "" ? "" : ", ") utarget[k]
  }

  # Includes.
  for (k = 1; k <= ni; k++) {
    f = ifile[k]; h = ihdr[k]; where = f ":" iline[k] ": includes " idelim[k] h (idelim[k] == "<" ? ">" : "\"")
    if (h ~ /^(torch|ATen|c10)\//) {
      if (f ~ /\.(h|hh|hpp|inc|def)$/) viol(where ": LibTorch in a header; only .cpp files may include it")
      else {
        ok = (f in torchfile)
        for (p in torchdir) if (index(f, p) == 1) ok = 1
        if (!ok) viol(where ": LibTorch outside the sources of a target that calls qbc_use_torch()")
      }
      continue
    }
    if (f ~ /^tools\/qbc\//) {
      if (h ~ /^qbc\/[^\/]+\//) { y = substr(h, 5); sub(/\/.*/, "", y) }
      else if (idelim[k] == "\"" && h ~ /(^|\/)[^\/]+\.pb\.h$/) y = "proto"
      else continue
      if (inlist(y, kCliMay)) continue
      cliused[f, y] = 1
      if (!inlist(y, allowed[f]))
        viol(where ": the CLI (tools/qbc/) may include only " commas(kCliMay) " (it is a shell over driver/); move this into a driver/ function, or list it with its reason in tools/layering-cli-allow.txt")
      continue
    }
    if (f ~ /^src\/[^\/]+\//) { x = substr(f, 5); sub(/\/.*/, "", x); public = 0 }
    else if (f ~ /^include\/qbc\/[^\/]+\//) { x = substr(f, 13); sub(/\/.*/, "", x); public = 1 }
    else continue
    if (!(x in stage)) continue
    if (h ~ /^qbc\/[^\/]+\//) { y = substr(h, 5); sub(/\/.*/, "", y) }
    else if (idelim[k] == "\"" && h ~ /(^|\/)[^\/]+\.pb\.h$/) y = "proto"
    else continue
    if (y == x) continue
    used[x, y] = 1; if (public) pubused[x, y] = 1
    cm = "src/" x "/CMakeLists.txt"; msg = ""
    if (y != "proto" && !(y in stage)) msg = "there is no stage " y " (no src/" y "/CMakeLists.txt)"
    else if (!((x, y) in deps)) msg = label(y) " is not a dependency of qbc_" x " in " cm
    else if (public && !((x, y) in pub)) msg = "a public header needs a public dependency, but " deps[x, y] " is private to qbc_" x " in " depfile[x, y]
    if (forbids(x, y)) msg = msg (msg == "" ? "" : "; ") "policy \"" rule_text(x) "\" forbids " y " (" pwhy[x] ")"
    if (msg != "") viol(where ": " msg)
  }

  # The allow-list of the CLI: each entry still needed, with a reason.
  for (k = 1; k <= na_; k++) {
    f = afile[k]
    if (!(f in afound)) { viol("tools/layering-cli-allow.txt: " f " does not exist; drop its entry"); continue }
    if (awhy[k] == "") viol("tools/layering-cli-allow.txt: " f " needs a reason (FILE | stages | why)")
    m = split(alist[k], aa, " ")
    for (j = 1; j <= m; j++) {
      if (inlist(aa[j], kCliMay)) viol("tools/layering-cli-allow.txt: " f " lists " aa[j] ", which the CLI may include anyway")
      else if (!((f, aa[j]) in cliused)) viol("tools/layering-cli-allow.txt: " f " no longer includes qbc/" aa[j] "/; drop it from its entry")
    }
  }

  # Link-only markers.
  for (k = 1; k <= nl; k++) {
    x = owner_of_path(lfile[k]); d = ldep[k]
    if (!(x in stage)) continue
    y = (d in towner) ? towner[d] : ""
    if (y == "" || !((x, y) in deps) || deps[x, y] != d) { viol(lfile[k] ": link-only marker for " d ", which qbc_" x " does not link"); continue }
    if (lreason[k] !~ /^[(].*[^ ].*[)]$/) viol(lfile[k] ": link-only marker for " d " needs a reason in parentheses")
    if ((x, y) in used) viol(lfile[k] ": " d " is marked link-only but qbc_" x " includes qbc/" y "/; drop the marker")
    linkonly[x, y] = lreason[k]
  }

  # Declared dependencies: policy, then use.
  for (i = 1; i <= ns; i++) {
    x = st[i]; m = split(words_sorted(dlist[x]), dd, " ")
    for (j = 1; j <= m; j++) {
      y = dd[j]; where = depfile[x, y] ": " deptarget[x, y] " links " deps[x, y]
      if (forbids(x, y)) viol(where "; policy \"" rule_text(x) "\" forbids " y " (" pwhy[x] ")")
      if ((x, y) in linkonly) continue
      what = (y == "proto") ? "a .pb.h header" : "qbc/" y "/"
      if (!((x, y) in used))
        viol(where ", but no file of src/" x "/ or include/qbc/" x "/ includes " what "; drop it (or mark it \"# layering: link-only " deps[x, y] " (reason)\")")
      else if (((x, y) in pub) && !((x, y) in pubused))
        viol(where " publicly, but only src/" x "/ includes " what " (no header in include/qbc/" x "/); make it private (PRIVATE_DEPS)")
    }
  }

  if (MODE == "rules") {
    # Stages in dependency order (a stage after everything it links), ties by name.
    placed_n = 0
    while (placed_n < ns) {
      progress = 0
      for (i = 1; i <= ns; i++) {
        x = st[i]; if (x in placed) continue
        ready = 1; m = split(dlist[x], dd, " ")
        for (j = 1; j <= m; j++) if (dd[j] in stage && !(dd[j] in placed)) ready = 0
        if (ready) { placed[x] = 1; placed_n++; order[placed_n] = x; progress = 1; break }
      }
      if (!progress) for (i = 1; i <= ns; i++) if (!(st[i] in placed)) { placed[st[i]] = 1; placed_n++; order[placed_n] = st[i] }
    }
    # The dependencies of each stage in the same order; proto right after support.
    for (i = 1; i <= ns; i++) rank[order[i]] = sprintf("%03d", i)
    rank["proto"] = ("support" in rank) ? rank["support"] "p" : "000"
    print "| stage | may include (its CMakeLists.txt) | policy (tools/check_layering.sh) |"
    print "|---|---|---|"
    for (i = 1; i <= ns; i++) {
      x = order[i]; ranked = ""; m = split(dlist[x], dd, " "); cell = ""
      for (j = 1; j <= m; j++) ranked = ranked " " rank[dd[j]] ":" dd[j]
      m = split(words_sorted(ranked), dd, " ")
      for (j = 1; j <= m; j++) {
        y = dd[j]; sub(/^[^:]*:/, "", y); c = y
        if ((x, y) in linkonly) c = c " (link-only " linkonly[x, y] ")"
        else if (!((x, y) in pub)) c = c " (src only)"
        cell = cell (cell == "" ? "" : ", ") c
      }
      pol = (x in pkind) ? rule_text(x) ": " pwhy[x] : ""
      sub(/^[^ ]+ -> /, "", pol)
      print "| " x " | " (cell == "" ? "nothing" : cell) " | " pol " |"
    }
    m = split(porder, pp, " ")
    for (j = 1; j <= m; j++) {
      x = pp[j]; if (x in stage) continue
      pol = rule_text(x) ": " pwhy[x]; sub(/^[^ ]+ -> /, "", pol)
      if (x == "proto") print "| " x " | protobuf only (generated code, `proto/`) | " pol " |"
      else print "| " x " | (planned: no src/" x "/ yet) | " pol " |"
    }
    print ""
    print "- \"src only\": only `src/<stage>/` may include it, not the public headers (a `PRIVATE_DEPS`)."
    print "- `proto` is `qbc_proto` and `qbc_mxq_proto`, the C++ generated from `proto/*.proto` (`#include \"<name>.pb.h\"`)."
    print "- The CLI (`tools/qbc/`) is a shell over `driver/`: it may include only " commas(kCliMay) " (the public headers of the runtime); the includes not yet moved are listed with their reasons in `tools/layering-cli-allow.txt`."
    if (torchlist != "") print "- LibTorch headers are allowed only in " torchlist " (" torchtargets ", which call `qbc_use_torch()`)."
    exit 0
  }
  if (nviol == 0) print "layering: ok"
  exit nviol > 0 ? 1 : 0
}'

facts | awk -v MODE="$mode" "$main"
