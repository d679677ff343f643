#include "client/attention_render.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dikkat::client {
namespace {

namespace v1 = ::dikkat::v1;

// Approximate label width: sans-serif glyphs average ~0.6 em.
constexpr double kCharWidthEm = 0.62;
constexpr int kTitleHeight = 26;
constexpr int kPanelGap = 24;
constexpr int kColorBarWidth = 12;
constexpr int kColorBarGap = 10;
constexpr int kColorBarLabelWidth = 44;
constexpr double kLabelAngleDegrees = 60;

// Length in bytes of the valid UTF-8 sequence at text[i], 0 if invalid.
int Utf8SequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  int length;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) lo = 0xa0;  // no overlong forms
    if (lead == 0xed) hi = 0x9f;  // no surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) lo = 0x90;
    if (lead == 0xf4) hi = 0x8f;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (int k = 2; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  // U+FFFE and U+FFFF are not XML characters.
  if (length == 3 && lead == 0xef && byte(i + 1) == 0xbf && byte(i + 2) >= 0xbe) return 0;
  return length;
}

// Cuts a printable label to `max_chars` code points.
std::string ShortLabel(std::string_view token, int max_chars) {
  std::string printable = PrintableToken(token);
  // A token of spaces would be an invisible label: show them as U+2423.
  if (!printable.empty() && printable.find_first_not_of(' ') == std::string::npos) {
    std::string visible;
    for (size_t i = 0; i < printable.size(); ++i) visible += "\xe2\x90\xa3";
    printable = visible;
  }
  size_t i = 0;
  int chars = 0;
  while (i < printable.size() && chars < max_chars) {
    i += std::max(1, Utf8SequenceLength(printable, i));
    ++chars;
  }
  if (i >= printable.size()) return printable;
  // Make room for the ellipsis by dropping the last kept character.
  size_t cut = 0, previous = 0;
  while (cut < i) {
    previous = cut;
    cut += std::max(1, Utf8SequenceLength(printable, cut));
  }
  return printable.substr(0, previous) + "\xe2\x80\xa6";
}

int LabelChars(const std::string& label) {
  int chars = 0;
  for (size_t i = 0; i < label.size(); i += std::max(1, Utf8SequenceLength(label, i))) ++chars;
  return chars;
}

// Viridis at five evenly spaced stops, linearly interpolated.
std::string ColorFor(double t) {
  static constexpr std::array<std::array<double, 3>, 5> kStops = {{
      {0x44, 0x01, 0x54},
      {0x3b, 0x52, 0x8b},
      {0x21, 0x91, 0x8c},
      {0x5e, 0xc9, 0x62},
      {0xfd, 0xe7, 0x25},
  }};
  if (!(t > 0)) t = 0;  // also NaN
  if (t > 1) t = 1;
  const double position = t * (kStops.size() - 1);
  const size_t lower = std::min(static_cast<size_t>(position), kStops.size() - 2);
  const double f = position - lower;
  int rgb[3];
  for (int c = 0; c < 3; ++c) {
    rgb[c] = static_cast<int>(
        std::lround(kStops[lower][c] + f * (kStops[lower + 1][c] - kStops[lower][c])));
  }
  return absl::StrFormat("#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

std::string FormatWeight(float w) { return absl::StrFormat("%.4g", w); }

struct PanelLayout {
  int cell = 0;
  double font = 0;
  int left = 0;    // width of the row labels
  int bottom = 0;  // height of the rotated column labels
  int width = 0;
  int height = 0;
};

PanelLayout LayOut(const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                   const SvgOptions& options) {
  PanelLayout l;
  const int longest_side = static_cast<int>(std::max({rows.size(), cols.size(), size_t{1}}));
  l.cell = std::clamp(options.panel_pixels / longest_side, options.min_cell_pixels,
                      options.max_cell_pixels);
  l.font = std::clamp(l.cell * 0.8, 4.0, 11.0);
  int row_chars = 1, col_chars = 1;
  for (const std::string& r : rows) row_chars = std::max(row_chars, LabelChars(r));
  for (const std::string& c : cols) col_chars = std::max(col_chars, LabelChars(c));
  l.left = static_cast<int>(std::ceil(row_chars * kCharWidthEm * l.font)) + 8;
  const double col_label_length = col_chars * kCharWidthEm * l.font;
  l.bottom = static_cast<int>(
                 std::ceil(col_label_length * std::sin(kLabelAngleDegrees * M_PI / 180))) +
             l.cell + 8;
  const int grid_w = l.cell * static_cast<int>(cols.size());
  const int grid_h = l.cell * static_cast<int>(rows.size());
  // Rotated labels lean left from their column; the first may stick out.
  const int lean = static_cast<int>(
      std::ceil(col_label_length * std::cos(kLabelAngleDegrees * M_PI / 180)));
  l.left = std::max(l.left, lean);
  l.width = l.left + grid_w + kColorBarGap + kColorBarWidth + kColorBarLabelWidth;
  l.height = kTitleHeight + grid_h + l.bottom;
  return l;
}

void AppendPanel(const HeatmapPanel& panel, const std::vector<std::string>& rows,
                 const std::vector<std::string>& cols, const PanelLayout& l, int x0, int y0,
                 std::string* svg) {
  const int q_len = static_cast<int>(rows.size());
  const int k_len = static_cast<int>(cols.size());
  const int grid_x = l.left;
  const int grid_y = kTitleHeight;
  const int grid_w = l.cell * k_len;
  const int grid_h = l.cell * q_len;
  float max_weight = 0;
  for (float w : panel.weights.values) {
    if (std::isfinite(w)) max_weight = std::max(max_weight, w);
  }

  absl::StrAppendFormat(svg, "<g class=\"panel\" transform=\"translate(%d,%d)\">\n", x0, y0);
  absl::StrAppendFormat(svg,
                        "<text class=\"title\" x=\"%d\" y=\"17\" font-size=\"14\" "
                        "font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
                        grid_x + grid_w / 2, XmlEscape(panel.title));
  for (int q = 0; q < q_len; ++q) {
    for (int k = 0; k < k_len; ++k) {
      const float w = panel.weights.at(q, k);
      absl::StrAppendFormat(
          svg,
          "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">"
          "<title>%s \xe2\x86\x92 %s: %s</title></rect>\n",
          grid_x + k * l.cell, grid_y + q * l.cell, l.cell, l.cell,
          ColorFor(max_weight > 0 ? w / max_weight : 0), XmlEscape(rows[q]), XmlEscape(cols[k]),
          FormatWeight(w));
    }
  }
  absl::StrAppendFormat(svg,
                        "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                        "stroke=\"#444\" stroke-width=\"0.5\"/>\n",
                        grid_x, grid_y, grid_w, grid_h);
  // Row labels: query tokens, right-aligned against the grid.
  for (int q = 0; q < q_len; ++q) {
    absl::StrAppendFormat(svg,
                          "<text class=\"row-label\" x=\"%d\" y=\"%.1f\" font-size=\"%.1f\" "
                          "text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n",
                          grid_x - 4, grid_y + (q + 0.5) * l.cell, l.font, XmlEscape(rows[q]));
  }
  // Column labels: key tokens under the grid, rotated so long tokens fit.
  for (int k = 0; k < k_len; ++k) {
    const double x = grid_x + (k + 0.5) * l.cell;
    const double y = grid_y + grid_h + 6;
    absl::StrAppendFormat(svg,
                          "<text class=\"col-label\" x=\"%.1f\" y=\"%.1f\" font-size=\"%.1f\" "
                          "text-anchor=\"end\" dominant-baseline=\"middle\" "
                          "transform=\"rotate(-%g %.1f %.1f)\">%s</text>\n",
                          x, y, l.font, kLabelAngleDegrees, x, y, XmlEscape(cols[k]));
  }
  // Color bar: the scale runs from 0 (bottom) to this panel's largest weight.
  const int bar_x = grid_x + grid_w + kColorBarGap;
  const int bar_h = std::max(grid_h, 40);
  absl::StrAppendFormat(svg,
                        "<rect class=\"colorbar\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                        "fill=\"url(#dikkat-scale)\" stroke=\"#444\" stroke-width=\"0.5\"/>\n",
                        bar_x, grid_y, kColorBarWidth, bar_h);
  for (double fraction : {0.0, 0.5, 1.0}) {
    const double y = grid_y + bar_h * (1 - fraction);
    absl::StrAppendFormat(svg,
                          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#444\"/>"
                          "<text class=\"scale-label\" x=\"%d\" y=\"%.1f\" font-size=\"9\" "
                          "dominant-baseline=\"middle\">%s</text>\n",
                          bar_x + kColorBarWidth, y, bar_x + kColorBarWidth + 3, y,
                          bar_x + kColorBarWidth + 5, y,
                          FormatWeight(static_cast<float>(max_weight * fraction)));
  }
  *svg += "</g>\n";
}

}  // namespace

std::string PrintableToken(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    const int length = Utf8SequenceLength(token, i);
    if (length == 1 && c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else if (length > 1) {
      out.append(token.substr(i, length));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += absl::StrFormat("\\x%02X", c);
    }
    i += std::max(length, 1);
  }
  return out;
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<AttentionLink> StrongestLinks(const DecodedTensor& map, int top_n) {
  std::vector<AttentionLink> links;
  if (map.shape.size() != 2 || top_n <= 0) return links;
  const int q_len = static_cast<int>(map.shape[0]);
  const int k_len = static_cast<int>(map.shape[1]);
  links.reserve(static_cast<size_t>(q_len) * k_len);
  for (int q = 0; q < q_len; ++q) {
    for (int k = 0; k < k_len; ++k) links.push_back({q, k, map.at(q, k)});
  }
  const size_t n = std::min(links.size(), static_cast<size_t>(top_n));
  std::partial_sort(links.begin(), links.begin() + n, links.end(),
                    [](const AttentionLink& a, const AttentionLink& b) {
                      if (a.weight != b.weight) return a.weight > b.weight;
                      return a.query != b.query ? a.query < b.query : a.key < b.key;
                    });
  links.resize(n);
  return links;
}

absl::StatusOr<std::string> RenderAttentionSvg(const std::vector<std::string>& query_tokens,
                                               const std::vector<std::string>& key_tokens,
                                               const std::vector<HeatmapPanel>& panels,
                                               const SvgOptions& options) {
  if (panels.empty()) return absl::InvalidArgumentError("no attention maps to render");
  for (const HeatmapPanel& panel : panels) {
    const std::vector<int64_t>& shape = panel.weights.shape;
    if (shape.size() != 2 || shape[0] != static_cast<int64_t>(query_tokens.size()) ||
        shape[1] != static_cast<int64_t>(key_tokens.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "map '", panel.title, "' has shape [", absl::StrJoin(shape, ","), "]; the labels need [",
          query_tokens.size(), ",", key_tokens.size(), "]"));
    }
  }
  std::vector<std::string> rows, cols;
  for (const std::string& t : query_tokens) rows.push_back(ShortLabel(t, options.max_label_chars));
  for (const std::string& t : key_tokens) cols.push_back(ShortLabel(t, options.max_label_chars));

  const int n = static_cast<int>(panels.size());
  int columns = options.columns > 0
                    ? options.columns
                    : std::min(4, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n)))));
  columns = std::clamp(columns, 1, n);
  const int grid_rows = (n + columns - 1) / columns;
  const PanelLayout layout = LayOut(rows, cols, options);
  const int width = kPanelGap + columns * (layout.width + kPanelGap);
  const int height = kPanelGap + grid_rows * (layout.height + kPanelGap);

  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
      "<defs><linearGradient id=\"dikkat-scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">",
      width, height, width, height);
  for (int stop = 0; stop <= 10; ++stop) {
    absl::StrAppendFormat(&svg, "<stop offset=\"%.1f\" stop-color=\"%s\"/>", stop / 10.0,
                          ColorFor(stop / 10.0));
  }
  absl::StrAppendFormat(&svg,
                        "</linearGradient></defs>\n"
                        "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
                        width, height);
  for (int i = 0; i < n; ++i) {
    const int x0 = kPanelGap + (i % columns) * (layout.width + kPanelGap);
    const int y0 = kPanelGap + (i / columns) * (layout.height + kPanelGap);
    AppendPanel(panels[i], rows, cols, layout, x0, y0, &svg);
  }
  svg += "</svg>\n";
  return svg;
}

std::string AttentionMapTitle(const v1::AttentionMap& map) {
  std::string title = map.head() < 0 ? absl::StrCat("layer ", map.layer(), " (heads aggregated)")
                                     : absl::StrCat("layer ", map.layer(), " head ", map.head());
  switch (map.kind()) {
    case v1::ATTENTION_KIND_ENCODER_SELF:
      return title + " (encoder self)";
    case v1::ATTENTION_KIND_DECODER_SELF:
      return title + " (decoder self)";
    case v1::ATTENTION_KIND_CROSS:
      return title + " (cross)";
    default:
      return title;
  }
}

absl::StatusOr<std::string> AttentionResponseToSvg(const v1::AttentionResponse& response,
                                                   const SvgOptions& options) {
  std::vector<HeatmapPanel> panels;
  for (const v1::AttentionMap& map : response.maps()) {
    absl::StatusOr<DecodedTensor> weights = DecodeTensor(map.weights());
    if (!weights.ok()) {
      return absl::Status(weights.status().code(),
                          absl::StrCat(AttentionMapTitle(map), ": ", weights.status().message()));
    }
    panels.push_back({AttentionMapTitle(map), *std::move(weights)});
  }
  return RenderAttentionSvg({response.query_tokens().begin(), response.query_tokens().end()},
                            {response.key_tokens().begin(), response.key_tokens().end()}, panels,
                            options);
}

}  // namespace dikkat::client
