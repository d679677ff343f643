// TextStream over the byte tokenizer (id b is byte b): what a streaming
// caller sees of stop strings, UTF-8 boundaries and the length limit.
#include "server/text_stream.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/byte_tokenizer.h"

namespace dikkat::server {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

class TextStreamTest : public ::testing::Test {
 protected:
  // Pushes every byte of `text` (the last one with `last`) and records the
  // pieces' texts until the stream finishes.
  std::vector<std::string> Stream(TextStream* stream, const std::string& text, bool last = false) {
    std::vector<std::string> texts;
    for (size_t i = 0; i < text.size(); ++i) {
      TextPiece piece =
          stream->Push(static_cast<unsigned char>(text[i]), last && i + 1 == text.size());
      texts.push_back(piece.text);
      finish_ = piece.finish;
      if (piece.finish) break;
    }
    return texts;
  }

  std::unique_ptr<model::Tokenizer> tokenizer_ = model::MakeByteTokenizer();
  std::optional<FinishReason> finish_;
};

TEST_F(TextStreamTest, WithoutStopStringsEveryCompleteCharacterIsSentAtOnce) {
  TextStream stream(tokenizer_.get(), {}, false);
  // "é" is two bytes: nothing is sent until the character is complete.
  EXPECT_THAT(Stream(&stream, "a\xC3\xA9"), ElementsAre("a", "", "\xC3\xA9"));
  EXPECT_EQ(finish_, std::nullopt);
}

TEST_F(TextStreamTest, StopStringEndsTheTextBeforeIt) {
  TextStream stream(tokenizer_.get(), {"ab"}, false);
  // "a" may start "ab": held back until "b" decides; the stop text is cut.
  EXPECT_THAT(Stream(&stream, "xxabyy"), ElementsAre("x", "x", "", ""));
  EXPECT_THAT(finish_, Optional(FinishReason::kStop));
}

TEST_F(TextStreamTest, IncludeStopTextKeepsTheStopString) {
  TextStream stream(tokenizer_.get(), {"ab"}, true);
  EXPECT_THAT(Stream(&stream, "xab"), ElementsAre("x", "", "ab"));
  EXPECT_THAT(finish_, Optional(FinishReason::kStop));
}

TEST_F(TextStreamTest, HeldTextThatIsNotAStopIsSentWithTheNextToken) {
  TextStream stream(tokenizer_.get(), {"abc"}, false);
  EXPECT_THAT(Stream(&stream, "abx"), ElementsAre("", "", "abx"));
  EXPECT_EQ(finish_, std::nullopt);
}

TEST_F(TextStreamTest, TheEarliestStopStringWinsWhateverItsOrder) {
  TextStream stream(tokenizer_.get(), {"cd", "bc"}, false);
  EXPECT_THAT(Stream(&stream, "abcd"), ElementsAre("a", "", ""));
  EXPECT_THAT(finish_, Optional(FinishReason::kStop));
}

TEST_F(TextStreamTest, TheLastTokenFlushesHeldTextAndPartialCharacters) {
  TextStream held(tokenizer_.get(), {"ab"}, false);
  EXPECT_THAT(Stream(&held, "xa", /*last=*/true), ElementsAre("x", "a"));
  EXPECT_THAT(finish_, Optional(FinishReason::kLength));
  TextStream partial(tokenizer_.get(), {}, false);
  EXPECT_THAT(Stream(&partial, "x\xC3", /*last=*/true), ElementsAre("x", "\xEF\xBF\xBD"));
  EXPECT_THAT(finish_, Optional(FinishReason::kLength));
}

TEST_F(TextStreamTest, EndHandsOverHeldTextWithTheCallersReason) {
  TextStream stream(tokenizer_.get(), {"ab"}, false);
  EXPECT_THAT(Stream(&stream, "xa"), ElementsAre("x", ""));
  TextPiece piece = stream.End(FinishReason::kEos);
  EXPECT_EQ(piece.text, "a");
  EXPECT_THAT(piece.finish, Optional(FinishReason::kEos));
}

// SentencePiece's rule in miniature: id 1000 + b is "▁" + byte b (a word
// start), which decodes to a space unless it is the first piece of the text;
// ids below 256 are bytes.
class WordStartTokenizer : public model::Tokenizer {
 public:
  std::string kind() const override { return "word-start"; }
  int32_t vocab_size() const override { return 1256; }
  const model::SpecialTokens& special_tokens() const override { return special_; }
  absl::StatusOr<model::Encoding> Encode(std::string_view, bool) const override {
    return absl::UnimplementedError("decode only");
  }
  std::string Decode(absl::Span<const int32_t> ids, bool) const override {
    std::string text;
    for (int32_t id : ids) {
      if (id >= 1000) {
        if (!text.empty()) text += ' ';
        text += static_cast<char>(id - 1000);
      } else {
        text += static_cast<char>(id);
      }
    }
    return text;
  }
  std::string TokenText(int32_t id) const override { return Decode({id}, false); }
  bool IsSpecial(int32_t) const override { return false; }

 private:
  model::SpecialTokens special_;
};

TEST(TextStreamContextTest, TheFirstWordKeepsItsSpaceAfterThePrompt) {
  WordStartTokenizer tok;
  const std::vector<int32_t> prompt = {1000 + 'H', 'i'};  // "Hi"
  TextStream stream(&tok, {}, false, prompt);
  EXPECT_EQ(stream.Push(1000 + 'w', false).text, " w");  // not "w": "Hi w" is the whole text
  EXPECT_EQ(stream.Push('e', false).text, "e");
  EXPECT_EQ(stream.End(FinishReason::kEos).text, "");
  EXPECT_EQ(DecodeAfter(tok, prompt, {1000 + 'w', 'e'}), " we");
  EXPECT_EQ(DecodeAfter(tok, {}, {1000 + 'w', 'e'}), "we");  // no prompt: a text's start
  TextStream alone(&tok, {}, false);
  EXPECT_EQ(alone.Push(1000 + 'w', false).text, "w");
}

TEST_F(TextStreamTest, EndFlushesAPartialCharacterAsReplacement) {
  TextStream stream(tokenizer_.get(), {}, false);
  EXPECT_EQ(stream.Push('x', false).text, "x");
  EXPECT_EQ(stream.Push(0xC3, false).text, "");  // the first byte of a two-byte character
  TextPiece piece = stream.End(FinishReason::kEos);
  EXPECT_EQ(piece.text, "\xEF\xBF\xBD");  // U+FFFD, as Decode of the whole output
  EXPECT_THAT(piece.finish, Optional(FinishReason::kEos));
}

TEST(StopPrefixHoldTest, LongestSuffixThatStartsAStop) {
  EXPECT_EQ(StopPrefixHold("hello wor", {"world", "or"}), 3u);  // "wor"
  EXPECT_EQ(StopPrefixHold("hello", {"xyz"}), 0u);
  EXPECT_EQ(StopPrefixHold("xa", {"ab"}), 1u);
  EXPECT_EQ(StopPrefixHold("ab", {"ab"}), 0u);  // only proper prefixes: "b" does not start "ab"
  EXPECT_EQ(StopPrefixHold("", {"ab"}), 0u);
}

}  // namespace
}  // namespace dikkat::server
