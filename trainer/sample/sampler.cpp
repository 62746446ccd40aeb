#include "trainer/sample/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/core/error.hpp"

namespace gt {

std::vector<int32_t> sample_tokens(CausalLM& model, std::vector<int32_t> context,
                                   const SampleOptions& opt) {
  const int V = model.config().vocab_size;
  const int block = model.config().block_size;
  if (context.empty()) context.push_back(static_cast<int32_t>('\n') % V);
  std::mt19937_64 rng(opt.seed);
  std::vector<int32_t> generated;
  std::vector<double> probs(static_cast<size_t>(V));
  std::vector<int> order(static_cast<size_t>(V));
  for (int n = 0; n < opt.new_tokens; ++n) {
    const int T = std::min<int>(static_cast<int>(context.size()), block);
    const int32_t* window = context.data() + context.size() - T;
    model.forward(window, nullptr, 1, T, 0.f);
    const float* logits = model.logits() + static_cast<int64_t>(T - 1) * V;
    int32_t next;
    if (opt.temperature <= 0.0) {
      next = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
    } else {
      std::iota(order.begin(), order.end(), 0);
      const int k = opt.top_k > 0 ? std::min(opt.top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return logits[a] > logits[b]; });
      const double maxv = logits[order[0]];
      double total = 0.0;
      for (int i = 0; i < k; ++i) {
        probs[i] = std::exp((logits[order[i]] - maxv) / opt.temperature);
        total += probs[i];
      }
      double u = ((rng() >> 11) * 0x1.0p-53) * total;
      int pick = k - 1;
      for (int i = 0; i < k; ++i) {
        u -= probs[i];
        if (u <= 0) {
          pick = i;
          break;
        }
      }
      next = order[pick];
    }
    context.push_back(next);
    generated.push_back(next);
  }
  return generated;
}

std::vector<int32_t> encode_bytes(const std::string& text) {
  std::vector<int32_t> out;
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::string decode_bytes(const std::vector<int32_t>& tokens) {
  std::string out;
  for (int32_t t : tokens) out.push_back(static_cast<char>(t & 0xFF));
  return out;
}

}  // namespace gt
