// qbc-generate MODEL.mxq PROMPT [N]: loads a compiled model with the installed runtime,
// tokenizes PROMPT with the tokenizer stored in the file, greedy-generates N tokens (32 by
// default) and prints the prompt followed by the continuation, as `qbc run MODEL.mxq -p PROMPT
// -n N` does.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "qbc/runtime/generator.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s MODEL.mxq PROMPT [N]\n", argv[0]);
    return 2;
  }
  const int n = argc == 4 ? std::atoi(argv[3]) : 32;
  auto gen = qbc::runtime::Generator::create(argv[1]);
  if (!gen.ok()) {
    std::fprintf(stderr, "error: %s\n", gen.status().to_string().c_str());
    return 2;
  }
  const std::vector<int32_t> prompt = (*gen)->encode(argv[2]);
  qbc::runner::SamplingOptions greedy;  // greedy by default
  auto result = (*gen)->generate(prompt, n, greedy);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", result.status().to_string().c_str());
    return 2;
  }
  // The continuation decoded after the prompt's ids, so its first word keeps its space.
  std::printf("%s%s\n", argv[2], (*gen)->decode_continuation(prompt, result->tokens).c_str());
  return 0;
}
