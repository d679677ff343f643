// Human-readable views of attention maps: the strongest query->key links as a
// list, and SVG heatmaps. Pure functions; no I/O.
#ifndef DIKKAT_CLIENT_ATTENTION_RENDER_H_
#define DIKKAT_CLIENT_ATTENTION_RENDER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "client/tensor.h"
#include "dikkat/v1/dikkat.pb.h"

namespace dikkat::client {

struct AttentionLink {
  int query = 0;  // row index
  int key = 0;    // column index
  float weight = 0;
};

// The `top_n` largest weights of a 2-D map [q_len, k_len], largest first;
// equal weights keep row-major order.
std::vector<AttentionLink> StrongestLinks(const DecodedTensor& map, int top_n);

// One heatmap: a 2-D [q_len, k_len] weight map and its title.
struct HeatmapPanel {
  std::string title;
  DecodedTensor weights;
};

struct SvgOptions {
  int columns = 0;          // panels per row; 0 = ceil(sqrt(n)), at most 4
  int panel_pixels = 480;   // the longer side of a map's grid aims at this
  int min_cell_pixels = 3;
  int max_cell_pixels = 28;
  int max_label_chars = 14; // longer token labels are cut with "..."
};

// One standalone SVG document holding every panel in a grid. Each panel has
// its title above, query tokens as row labels on the left, key tokens as
// column labels below (rotated), cells colored by a viridis-like scale from 0
// to that panel's largest weight, and a color bar with the scale's values.
// Every cell carries a <title> tooltip "query -> key: weight". Token labels
// are made printable (control bytes and invalid UTF-8 shown as \xNN) and
// XML-escaped. INVALID_ARGUMENT when a panel is not 2-D or its shape does
// not match the label counts.
absl::StatusOr<std::string> RenderAttentionSvg(const std::vector<std::string>& query_tokens,
                                               const std::vector<std::string>& key_tokens,
                                               const std::vector<HeatmapPanel>& panels,
                                               const SvgOptions& options = {});

// Decodes every map of `response` and renders them with RenderAttentionSvg,
// titled by AttentionMapTitle().
absl::StatusOr<std::string> AttentionResponseToSvg(const dikkat::v1::AttentionResponse& response,
                                                   const SvgOptions& options = {});

// "layer L head H", "layer L (heads aggregated)"; the kind is appended for
// encoder-decoder maps, e.g. "layer 1 head 0 (cross)".
std::string AttentionMapTitle(const dikkat::v1::AttentionMap& map);

// A token string made printable on one line: valid UTF-8 stays, control
// characters and invalid bytes become \n, \t, \xNN.
std::string PrintableToken(std::string_view token);

// Escapes &, <, >, " and ' for XML text and attribute values.
std::string XmlEscape(std::string_view text);

}  // namespace dikkat::client

#endif  // DIKKAT_CLIENT_ATTENTION_RENDER_H_
