#pragma once
// Where a piece of text stands in the input it came from, as far as Metaspace's prepend_scheme
// "first" needs it: HF prepends the replacement only to a piece whose offsets in the original
// input start at 0 (NormalizedString::offsets_original). quartet follows HF's alignments just
// for that: a piece's `origin` is how many of its leading bytes are aligned to the input's
// first character (0 when the piece does not start the input). HF's alignments only grow along
// a text, so those bytes are always a prefix of the piece.
#include <algorithm>
#include <cstddef>
#include <string>

namespace quartet {

// A piece of text on its way through the normalizer and the pre-tokenizer.
struct TextPiece {
  std::string text;
  size_t origin = 0;
};

// The origin of the slice [begin, end) of a piece whose origin is `origin`.
inline size_t origin_of_slice(size_t origin, size_t begin, size_t end) {
  const size_t stop = std::min(origin, end);
  return stop > begin ? stop - begin : 0;
}

}  // namespace quartet
