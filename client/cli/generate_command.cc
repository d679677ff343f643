// `dikkat generate`: streams generated text to stdout as it arrives.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cli/commands.h"

namespace dikkat::client::cli {
namespace {

class GenerateCommand : public Command {
 public:
  std::string name() const override { return "generate"; }
  std::string summary() const override { return "generate text, streamed as it is produced"; }
  std::string description() const override {
    return "usage: dikkat generate [flags] [PROMPT...]\n\n"
           "Generates a continuation of PROMPT (the arguments joined by spaces; '-' reads\n"
           "stdin) or of --ids, printing text to stdout as the server streams it. For\n"
           "encoder-decoder models PROMPT is the source sequence. Sampling flags left unset\n"
           "take the server's defaults (temperature 1, top-p 1, ...); --temperature=0 is\n"
           "greedy. Statistics, log-probabilities and prompt ids go to stderr, so stdout\n"
           "holds only the text. Ctrl-C cancels the generation on the server.\n\n"
           "--n=N returns N samples (printed one after the other once all have finished);\n"
           "--prompt-logprobs=K prints each prompt token's log-probability and K\n"
           "alternatives, the total and the perplexity; with --max-tokens=0 it only scores.\n"
           "--beam-width=K decodes with beam search and prints the --n best hypotheses.";
  }

  void RegisterFlags(FlagSet* f) override {
    f->String("prompt", &prompt_, "the prompt (instead of positional words)");
    f->IntList("ids", &ids_, "the prompt as token ids, e.g. 1,2,3 (instead of text)");
    f->Bool("add-special-tokens", &add_special_tokens_,
            "add the model's special tokens around the text prompt (e.g. BOS)");
    f->String("decoder-prefix", &decoder_prefix_,
              "encoder-decoder models: text the decoder starts from");
    f->OptionalInt("max-tokens", &max_tokens_,
                   "tokens to generate at most (default: the server's)");
    f->Bool("strict-max-tokens", &strict_max_tokens_,
            "refuse the request if prompt + --max-tokens exceeds the model's context "
            "(default: stop at the context)");
    f->OptionalDouble("temperature", &temperature_, "sampling temperature >= 0; 0 = greedy");
    f->Int("top-k", &top_k_, "sample among the k most likely tokens; 0 = the model's default (its "
                                "generation_config.json; else off), -1 = off");
    f->OptionalDouble("top-p", &top_p_, "nucleus sampling mass in (0, 1]");
    f->Double("min-p", &min_p_, "drop tokens below min-p times the top probability; 0 = off");
    f->OptionalDouble("repetition-penalty", &repetition_penalty_,
                      "penalty > 0 for tokens already present; 1 = off");
    f->Double("presence-penalty", &presence_penalty_, "in [-2, 2]");
    f->Double("frequency-penalty", &frequency_penalty_, "in [-2, 2]");
    f->OptionalUint64("seed", &seed_, "random seed; same seed and prompt give the same text");
    f->IdValueMap("logit-bias", &logit_bias_,
                  "add BIAS (-100..100) to token ID's logit before sampling, e.g. "
                  "50256=-100 bans token 50256 (reported logprobs exclude it)");
    f->Strings("stop", &stop_, "stop when the text contains this string");
    f->IntList("stop-ids", &stop_ids_, "stop when one of these token ids is generated");
    f->Bool("ignore-eos", &ignore_eos_, "keep generating past the end-of-sequence token");
    f->Bool("include-stop-text", &include_stop_text_, "keep the matched stop string");
    f->OptionalInt("logprobs", &logprobs_,
                   "print each token's log-probability and this many alternatives (0..20) "
                   "to stderr");
    f->Bool("echo-prompt", &echo_prompt_, "print the prompt's token ids to stderr");
    f->OptionalInt("prompt-logprobs", &prompt_logprobs_,
                   "print each prompt token's log-probability and this many alternatives "
                   "(0..20), the sum and the perplexity to stderr");
    f->Int("n", &n_, "samples to return (1..16; needs a temperature > 0)");
    f->Int("best-of", &best_of_,
           "samples to generate, of which the n most likely are returned (n..16; 0 = n)");
    f->Int("beam-width", &beam_width_,
           "beam search with this many beams (2..16), printing the --n best hypotheses");
    f->OptionalDouble("length-penalty", &length_penalty_,
                      "beam search: rank by logprob sum / length^penalty (default 1)");
    f->Bool("early-stopping", &early_stopping_,
            "beam search: stop once beam-width hypotheses have ended");
    f->Int("priority", &priority_,
           "scheduling priority -100..100; larger is admitted first and preempted last");
    f->Bool("show-stats", &show_stats_,
            "print finish reason, token counts, time to first token and speed to stderr");
  }

  int Run(const CommandContext& context, const std::vector<std::string>& args) override {
    v1::GenerateRequest request;
    const std::string text = prompt_.empty() ? JoinedText(args) : prompt_;
    if (!ids_.empty() && !text.empty()) {
      return UsageError(name(), "give a text prompt or --ids, not both");
    }
    if (ids_.empty() && text.empty()) return UsageError(name(), "no prompt given");
    *request.mutable_input() = ids_.empty() ? TextInput(text) : TokenInput(ids_);
    if (add_special_tokens_) request.mutable_input()->set_add_special_tokens(true);
    if (!decoder_prefix_.empty()) *request.mutable_decoder_prefix() = TextInput(decoder_prefix_);
    v1::SamplingOptions* s = request.mutable_sampling();
    if (temperature_) s->set_temperature(static_cast<float>(*temperature_));
    s->set_top_k(top_k_);
    if (top_p_) s->set_top_p(static_cast<float>(*top_p_));
    s->set_min_p(static_cast<float>(min_p_));
    if (repetition_penalty_) s->set_repetition_penalty(static_cast<float>(*repetition_penalty_));
    s->set_presence_penalty(static_cast<float>(presence_penalty_));
    s->set_frequency_penalty(static_cast<float>(frequency_penalty_));
    if (seed_) s->set_seed(*seed_);
    for (const auto& [id, bias] : logit_bias_) {
      (*s->mutable_logit_bias())[id] = static_cast<float>(bias);
    }
    if (max_tokens_) request.set_max_new_tokens(*max_tokens_);
    if (strict_max_tokens_) {
      if (!max_tokens_) return UsageError(name(), "--strict-max-tokens needs --max-tokens");
      request.set_strict_max_new_tokens(true);
    }
    for (const std::string& stop : stop_) request.add_stop(stop);
    for (int id : stop_ids_) request.add_stop_token_ids(id);
    request.set_ignore_eos(ignore_eos_);
    request.set_include_stop_text(include_stop_text_);
    if (logprobs_) request.set_top_logprobs(*logprobs_);
    request.set_echo_prompt_tokens(echo_prompt_);
    request.set_priority(priority_);
    if (prompt_logprobs_) request.set_prompt_logprobs(*prompt_logprobs_);
    request.set_n(n_);
    request.set_best_of(best_of_);
    request.set_beam_width(beam_width_);
    if (length_penalty_) request.set_length_penalty(static_cast<float>(*length_penalty_));
    request.set_early_stopping(early_stopping_);
    if (n_ > 1 || best_of_ > 1 || beam_width_ > 1) return RunSamples(context, request);

    GenerateResult result;
    bool ends_with_newline = true;
    const absl::Time start = absl::Now();
    absl::Status status = context.client->GenerateStream(
        request,
        [&](const v1::GenerateResponse& chunk) {
          if (!chunk.text().empty()) {
            std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
            std::fflush(stdout);
            ends_with_newline = chunk.text().back() == '\n';
          }
          if (chunk.tokens_size() > 0 && result.time_to_first_token == absl::InfiniteDuration()) {
            result.time_to_first_token = absl::Now() - start;
          }
          result.tokens.insert(result.tokens.end(), chunk.tokens().begin(), chunk.tokens().end());
          result.prompt_token_ids.insert(result.prompt_token_ids.end(),
                                         chunk.prompt_token_ids().begin(),
                                         chunk.prompt_token_ids().end());
          result.prompt_logprobs.insert(result.prompt_logprobs.end(),
                                        chunk.prompt_logprobs().begin(),
                                        chunk.prompt_logprobs().end());
          ++result.chunks;
          if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
            result.finish_reason = chunk.finish_reason();
            result.stats = chunk.stats();
          }
          return true;
        },
        context.Call());
    result.total_time = absl::Now() - start;
    if (!ends_with_newline) std::fputs("\n", stdout);
    std::fflush(stdout);
    if (!status.ok()) return ReportError(status, context);
    if (echo_prompt_) PrintPromptIds(result);
    if (prompt_logprobs_) PrintPromptLogprobs(result);
    if (logprobs_) PrintLogprobs(result.tokens);
    if (show_stats_) PrintStats(result);
    return kExitOk;
  }

 private:
  // n > 1 / best_of > 1: collects the whole call, then prints each sample.
  int RunSamples(const CommandContext& context, const v1::GenerateRequest& request) {
    absl::StatusOr<GenerateResult> result = context.client->Generate(request, context.Call());
    if (!result.ok()) return ReportError(result.status(), context);
    for (size_t i = 0; i < result->samples.size(); ++i) {
      const GenerateSample& sample = result->samples[i];
      if (request.beam_width() > 1) {
        std::fprintf(stdout, "--- hypothesis %zu (finish: %s, score %.4f, logprob sum %.4f) ---\n",
                     i, FinishReasonName(sample.finish_reason).c_str(), sample.beam_score,
                     sample.cumulative_logprob);
      } else {
        std::fprintf(stdout, "--- sample %zu (finish: %s, cumulative logprob %.4f) ---\n", i,
                     FinishReasonName(sample.finish_reason).c_str(), sample.cumulative_logprob);
      }
      std::fwrite(sample.text.data(), 1, sample.text.size(), stdout);
      if (sample.text.empty() || sample.text.back() != '\n') std::fputs("\n", stdout);
      if (logprobs_) PrintLogprobs(sample.tokens);
    }
    std::fflush(stdout);
    if (echo_prompt_) PrintPromptIds(*result);
    if (prompt_logprobs_) PrintPromptLogprobs(*result);
    if (show_stats_) PrintStats(*result);
    return kExitOk;
  }

  static void PrintPromptLogprobs(const GenerateResult& result) {
    std::cerr << "prompt tokens after the first (id, logprob, alternatives):\n";
    double sum = 0.0;
    for (const v1::GeneratedToken& token : result.prompt_logprobs) {
      sum += token.logprob();
      std::cerr << absl::StrFormat("  %6d %9.4f", token.id(), token.logprob());
      for (const v1::TokenLogprob& alt : token.top_logprobs()) {
        std::cerr << absl::StrFormat("  %s %.3f", Quoted(alt.text()), alt.logprob());
      }
      std::cerr << "\n";
    }
    const size_t n = result.prompt_logprobs.size();
    std::cerr << absl::StrFormat("prompt logprob sum %.4f over %zu tokens", sum, n);
    if (n > 0) std::cerr << absl::StrFormat("  perplexity %.4f", std::exp(-sum / n));
    std::cerr << "\n";
  }

  static void PrintPromptIds(const GenerateResult& result) {
    std::cerr << "prompt ids:";
    for (int id : result.prompt_token_ids) std::cerr << " " << id;
    std::cerr << "\n";
  }

  static void PrintLogprobs(const std::vector<v1::GeneratedToken>& tokens) {
    std::cerr << "tokens (id, logprob, alternatives):\n";
    for (const v1::GeneratedToken& token : tokens) {
      std::cerr << absl::StrFormat("  %6d %9.4f", token.id(), token.logprob());
      for (const v1::TokenLogprob& alt : token.top_logprobs()) {
        std::cerr << absl::StrFormat("  %s %.3f", Quoted(alt.text()), alt.logprob());
      }
      std::cerr << "\n";
    }
  }

  static void PrintStats(const GenerateResult& r) {
    const v1::GenerateStats& s = r.stats;
    const double decode_seconds = s.total_seconds() - s.time_to_first_token_seconds();
    std::cerr << absl::StrFormat(
        "finish: %s  prompt tokens: %d (%d from the prefix cache)  generated tokens: %d  "
        "chunks: %d  seed: %d\n",
        FinishReasonName(r.finish_reason), s.prompt_tokens(), s.cached_prompt_tokens(),
        s.generated_tokens(), r.chunks, s.seed());
    std::cerr << absl::StrFormat(
        "server: queue %.3f s  time to first token %.3f s  total %.3f s", s.queue_seconds(),
        s.time_to_first_token_seconds(), s.total_seconds());
    if (s.generated_tokens() > 1 && decode_seconds > 0) {
      std::cerr << absl::StrFormat("  decode %.1f tokens/s",
                                   (s.generated_tokens() - 1) / decode_seconds);
    }
    std::cerr << "\n";
    std::cerr << absl::StrFormat(
        "client: time to first token %s  total %.3f s\n",
        r.time_to_first_token == absl::InfiniteDuration()
            ? std::string("-")
            : absl::StrFormat("%.3f s", absl::ToDoubleSeconds(r.time_to_first_token)),
        absl::ToDoubleSeconds(r.total_time));
  }

  std::string prompt_;
  std::vector<int> ids_;
  bool add_special_tokens_ = false;
  std::string decoder_prefix_;
  std::optional<int> max_tokens_;
  std::optional<double> temperature_;
  int top_k_ = 0;
  int priority_ = 0;
  std::optional<double> top_p_;
  double min_p_ = 0;
  std::optional<double> repetition_penalty_;
  double presence_penalty_ = 0;
  std::map<int, double> logit_bias_;
  double frequency_penalty_ = 0;
  std::optional<uint64_t> seed_;
  std::vector<std::string> stop_;
  std::vector<int> stop_ids_;
  bool ignore_eos_ = false;
  bool include_stop_text_ = false;
  std::optional<int> logprobs_;
  std::optional<int> prompt_logprobs_;
  int n_ = 1;
  int best_of_ = 0;
  int beam_width_ = 0;
  std::optional<double> length_penalty_;
  bool early_stopping_ = false;
  bool strict_max_tokens_ = false;
  bool echo_prompt_ = false;
  bool show_stats_ = false;
};

}  // namespace

std::unique_ptr<Command> NewGenerateCommand() { return std::make_unique<GenerateCommand>(); }

}  // namespace dikkat::client::cli
