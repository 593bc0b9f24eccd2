// runner::forward_as_reply and perplexity's as_reply (qbc eval --as-reply): the prompt in one
// call, then one call per token, each row of logits where its position says; a runner whose
// numbers depend on the call (as a model with a second weight image per phase does) scores
// differently that way, and one whose numbers do not scores the same.
#include "qbc/runner/reply_forward.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qbc/ref/perplexity.h"
#include "test_support.h"

namespace qbc {
namespace {

/// A runner of a 4-token vocabulary whose logits row for the token at position p in a call of
/// n tokens is {p, n, token, 0} (or {0, 0, token, p} when `call_blind`), recording each call's
/// size.
class RecordingRunner final : public runner::Runner {
 public:
  explicit RecordingRunner(bool call_blind) : blind_(call_blind) {}
  Status forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) override {
    calls.push_back(static_cast<int64_t>(tokens.size()));
    logits->clear();
    for (int32_t t : tokens) {
      const float n = static_cast<float>(tokens.size()), p = static_cast<float>(pos_++);
      const std::vector<float> row = blind_ ? std::vector<float>{0, 0, static_cast<float>(t), p}
                                            : std::vector<float>{p, n, static_cast<float>(t), 0};
      logits->insert(logits->end(), row.begin(), row.end());
    }
    return ok_status();
  }
  Status forward_embeds(const std::vector<float>&, int64_t, std::vector<float>*) override {
    return unimplemented("forward_embeds");
  }
  void reset() override { pos_ = 0; }
  int64_t position() const override { return pos_; }
  int64_t vocab_size() const override { return 4; }
  int64_t hidden_size() const override { return 1; }
  Status embed(const std::vector<int32_t>&, std::vector<float>*) const override {
    return unimplemented("embed");
  }
  void set_keep_activations(bool) override {}
  Status activation(const std::string&, std::vector<float>*, std::vector<int64_t>*) const override {
    return unimplemented("activation");
  }

  std::vector<int64_t> calls;

 private:
  bool blind_;
  int64_t pos_ = 0;
};

TEST(ReplyForward, PromptInOneCallThenOneCallPerTokenEachRowInPlace) {
  RecordingRunner r(false);
  const std::vector<int32_t> ids = {3, 1, 2, 0, 1, 3};
  std::vector<float> logits;
  QBC_ASSERT_OK(runner::forward_as_reply(r, ids, 4, &logits));
  EXPECT_EQ(r.calls, (std::vector<int64_t>{4, 1, 1}));
  ASSERT_EQ(logits.size(), ids.size() * 4);
  for (size_t p = 0; p < ids.size(); ++p) {
    EXPECT_EQ(logits[p * 4 + 0], static_cast<float>(p)) << p;       // its position
    EXPECT_EQ(logits[p * 4 + 1], p < 4 ? 4.0f : 1.0f) << p;         // its call's size
    EXPECT_EQ(logits[p * 4 + 2], static_cast<float>(ids[p])) << p;  // its token
  }
  // The whole text as the prompt is one call.
  r.reset();
  r.calls.clear();
  QBC_ASSERT_OK(runner::forward_as_reply(r, ids, 6, &logits));
  EXPECT_EQ(r.calls, (std::vector<int64_t>{6}));
  // A prompt outside [1, n] is refused.
  for (int64_t bad : {0, 7}) {
    const Status s = runner::forward_as_reply(r, ids, bad, &logits);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("a prompt of " + std::to_string(bad)), std::string::npos)
        << s.message();
  }
}

TEST(ReplyForward, PerplexityAsReplyScoresTheDecodedCalls) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(i % 4);
  ref::PerplexityOptions one, reply;
  reply.as_reply = true;
  // Logits that depend on the call: the scores differ, and each chunk of 16 runs a prompt
  // of 9 tokens (up to the first scored position) and then 6 single-token calls.
  RecordingRunner aware(false);
  auto a = ref::perplexity(aware, ids, 16, -1, one);
  QBC_ASSERT_OK(a);
  EXPECT_EQ(aware.calls, std::vector<int64_t>(4, 16));
  aware.calls.clear();
  auto b = ref::perplexity(aware, ids, 16, -1, reply);
  QBC_ASSERT_OK(b);
  std::vector<int64_t> want;
  for (int c = 0; c < 4; ++c) {
    want.push_back(9);
    for (int t = 0; t < 6; ++t) want.push_back(1);
  }
  EXPECT_EQ(aware.calls, want);
  EXPECT_EQ(a->tokens_scored, b->tokens_scored);
  EXPECT_NE(a->ppl, b->ppl);
  // Logits that do not depend on the call: the same perplexity either way.
  RecordingRunner blind(true);
  auto c = ref::perplexity(blind, ids, 16, -1, one);
  auto d = ref::perplexity(blind, ids, 16, -1, reply);
  QBC_ASSERT_OK(c);
  QBC_ASSERT_OK(d);
  EXPECT_EQ(c->ppl, d->ppl);
  EXPECT_EQ(c->token_logprobs, d->token_logprobs);
}

}  // namespace
}  // namespace qbc
