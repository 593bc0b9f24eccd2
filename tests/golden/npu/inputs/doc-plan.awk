# Prints the first fenced block of a Markdown file whose first line starts "plan of graph "
# (docs/npu.md's print_plan example), without its fences.
/^```/ {
  if (inblock && isplan) exit
  inblock = !inblock; first = 1; isplan = 0; n = 0
  next
}
inblock && first { first = 0; isplan = ($0 ~ /^plan of graph /) }
inblock && isplan { print }
