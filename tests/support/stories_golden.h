// llama.cpp's greedy text for stories260K, read from the shared golden files, for the tests
// that check the text qbc prints (run, the runtime's Generator, examples/generate).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.h"

namespace qbc::testing {

/// golden/greedy.json, run "F32": "<s> Once upon a time|, there was ..." is llama.cpp's
/// detokenization of the prompt ids (with BOS) and, after the "|", of the 32 greedy ids. As one
/// text without "<s> " and "|": "Once upon a time, there was a little girl named Lily. ...".
inline std::string stories260k_greedy_text(const std::filesystem::path& stories_dir) {
  const auto golden = nlohmann::json::parse(read_file(stories_dir / "golden/greedy.json"));
  std::string text = golden["runs"]["F32"]["text"].get<std::string>();
  const std::string bos = "<s> ";
  EXPECT_EQ(text.rfind(bos, 0), 0u) << text;
  if (text.rfind(bos, 0) == 0) text.erase(0, bos.size());
  const size_t bar = text.find('|');
  EXPECT_NE(bar, std::string::npos) << text;
  if (bar != std::string::npos) text.erase(bar, 1);
  return text;
}

/// The same text generated from the one-word prompt "Once" takes 35 tokens: llama.cpp's
/// logits for "Once upon a time, there was" (golden/logits_golden.json, short_8) have their
/// argmax after "<s> Once" at " upon", " a", " time", so greedy decoding from "Once" reaches
/// the golden prompt and continues as greedy.json. Checks that, and returns 35.
inline int stories260k_tokens_after_once(const std::filesystem::path& stories_dir) {
  const auto logits = nlohmann::json::parse(read_file(stories_dir / "golden/logits_golden.json"));
  const auto& s = logits["sequences"][0];
  EXPECT_EQ(s["name"], "short_8");
  const auto ids = s["ids"].get<std::vector<int>>();
  const auto argmax = s["argmax"].get<std::vector<int>>();
  const auto greedy = nlohmann::json::parse(read_file(stories_dir / "golden/greedy.json"));
  const auto prompt = greedy["runs"]["F32"]["prompt_ids"].get<std::vector<int>>();
  EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + 5), prompt);  // <s> Once upon a time
  for (size_t i = 1; i + 1 < prompt.size(); ++i) EXPECT_EQ(argmax[i], prompt[i + 1]) << i;
  return static_cast<int>(prompt.size()) - 2 + 32;
}

}  // namespace qbc::testing
