#include "quartet/model/tokenizer/bpe.hpp"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

namespace {
// The cache is a plain map; clearing it when full keeps memory bounded without LRU bookkeeping
// on the hot path (a prompt set's words fit many times over).
constexpr size_t kMaxCacheEntries = 1 << 17;
// Only words shorter than this are cached, as HF does: without a pre-tokenizer a whole text is
// one word, and caching those would only fill the cache.
constexpr size_t kMaxCachedWord = 256;
}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int64_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, Options options,
                   const std::string& where)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  for (const auto& [token, id] : vocab_)
    QUARTET_CHECK(id >= 0 && id < (int64_t{1} << 31),
                  where + ": model.vocab['" + token + "'] = " + std::to_string(id) + " is out of range");
  if (options_.unk_token) {
    auto it = vocab_.find(*options_.unk_token);
    QUARTET_CHECK(it != vocab_.end(),
                  where + ": model.unk_token '" + *options_.unk_token + "' is not in model.vocab");
    unk_id_ = it->second;
  }
  byte_ids_.fill(-1);
  if (options_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = vocab_.find(name);
      if (it != vocab_.end()) byte_ids_[static_cast<size_t>(b)] = it->second;
    }
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
    QUARTET_CHECK(ia != vocab_.end() && ib != vocab_.end() && ic != vocab_.end(),
                  where + ": model.merges[" + std::to_string(rank) + "] ('" + a + "', '" + b +
                      "') uses a token that is not in model.vocab");
    // A repeated merge keeps its first (best) rank, as HF's map construction does.
    merges_.emplace(pair_key(ia->second, ib->second),
                    MergeTarget{static_cast<int32_t>(rank), ic->second});
  }
}

void BpeModel::encode_word(const std::string& word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    // Llama-3: a word that is itself a token is taken whole, whatever the merges would give.
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int64_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (word.size() >= kMaxCachedWord) return;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(word, std::move(ids));
}

std::vector<int64_t> BpeModel::initial_symbols(const std::string& word) const {
  std::vector<int64_t> ids;
  ids.reserve(word.size());
  std::optional<int64_t> pending_unk;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    auto it = vocab_.find(word.substr(i, n));
    const size_t begin = i;
    i += n;
    if (it != vocab_.end()) {
      if (pending_unk) ids.push_back(*pending_unk);
      pending_unk.reset();
      ids.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback &&
        std::all_of(word.begin() + begin, word.begin() + i, [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
      for (size_t k = begin; k < i; ++k) ids.push_back(byte_ids_[static_cast<unsigned char>(word[k])]);
      continue;
    }
    if (!unk_id_) continue;
    if (pending_unk && !options_.fuse_unk) ids.push_back(*pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk) ids.push_back(*pending_unk);
  return ids;
}

std::vector<int64_t> BpeModel::merge_word(const std::string& word) const {
  // Symbols form a doubly linked list so that a merge is O(1); a min-heap on (rank, position)
  // picks the next merge, which makes a word O(n log n) instead of the textbook O(n^2) rescans.
  struct Symbol {
    int64_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  for (int64_t id : initial_symbols(word)) sym.push_back({id, 0, 0, true});
  const int n = static_cast<int>(sym.size());
  for (int i = 0; i < n; ++i) {
    sym[i].prev = i - 1;
    sym[i].next = i + 1 < n ? i + 1 : -1;
  }

  struct Candidate {
    int32_t rank;
    int pos;
    int64_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int left) {
    int right = sym[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    // The entry is stale when either side has merged since it was pushed.
    auto it = merges_.find(pair_key(left.id, sym[left.next].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    Symbol& right = sym[left.next];
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }

  std::vector<int64_t> ids;
  for (int i = n > 0 ? 0 : -1; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
  return ids;
}

}  // namespace quartet
