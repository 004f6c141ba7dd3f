// Minimal PNG plots for `foldcore predict` (no plotting library is available here): an RGB
// canvas with a tiny rasterizer (lines, rectangles, a 5x7 bitmap font), a PNG encoder (8-bit RGB,
// one zlib-deflated IDAT, CRC-32 per chunk), and the three AlphaFold/ColabFold-style figures:
// pLDDT per residue, the PAE heatmap and the MSA coverage.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace foldcore::apps::plot {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

inline constexpr Rgb kWhite{255, 255, 255};
inline constexpr Rgb kBlack{0, 0, 0};
inline constexpr Rgb kGrey{150, 150, 150};

// Row-major RGB pixels; drawing outside the canvas is clipped silently.
class Canvas {
 public:
  Canvas(int width, int height, Rgb background = kWhite);
  int width() const { return width_; }
  int height() const { return height_; }
  Rgb at(int x, int y) const;
  void set(int x, int y, Rgb c);
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // inclusive corners, any order
  // A line of `thickness` pixels (Bresenham, square pen).
  void line(int x0, int y0, int x1, int y1, Rgb c, int thickness = 1);
  // 5x7 font, each font pixel drawn as scale x scale; (x, y) is the top-left corner. Letters are
  // drawn upper-case; characters without a glyph render as blanks.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 1);
  // The same rotated 90° counter-clockwise (reads bottom to top); (x, y) is the bottom-left corner.
  void text_vertical(int x, int y, const std::string& s, Rgb c, int scale = 1);
  static int text_width(const std::string& s, int scale = 1) { return static_cast<int>(s.size()) * 6 * scale; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;  // RGB, row-major
};

// The PNG file image of `canvas`: signature, IHDR (8-bit RGB, no interlace), one IDAT (filter
// byte 0 per scanline, zlib deflate), IEND; every chunk with its CRC-32. `text` entries become
// tEXt chunks (keyword ≤ 79 Latin-1 characters, e.g. {"Warning", "random parameters"}).
std::string encode_png(const Canvas& canvas, const std::vector<std::pair<std::string, std::string>>& text = {});

// Colour maps on t ∈ [0, 1] (clamped).
Rgb colormap_pae(float t);      // dark green (0) → white (1), the AlphaFold DB PAE palette
Rgb colormap_rainbow(float t);  // blue (0) → red (1)
// AlphaFold DB pLDDT category colours: very low (<50) orange, low (<70) yellow, confident (<90)
// light blue, very high dark blue.
Rgb plddt_colour(float plddt);

// pLDDT per residue, one line per model (legend with the names), 0..100 with the 50/70/90 bands.
Canvas plot_plddt(const std::vector<std::pair<std::string, std::vector<float>>>& lines, const std::string& title);
// PAE heatmap of an n x n row-major matrix (row = scored residue, column = aligned residue),
// colour scale 0..max_value with a colour bar.
Canvas plot_pae(const std::vector<float>& pae, int64_t n, float max_value, const std::string& title);
// MSA coverage (ColabFold style): rows sorted by identity to the query (row 0), each coloured by
// its identity where it is aligned and white at gaps, plus the per-column coverage count as a
// black line. `msa` is row-major [num_rows, n] of HHblits codes (21 = gap).
Canvas plot_msa_coverage(const std::vector<int32_t>& msa, int64_t num_rows, int64_t n, const std::string& title);

// One curve of plot_series: points (x[i], y[i]); non-finite y values leave a gap.
struct Series {
  std::string name;
  std::vector<double> x, y;
};
// Line plot of several series on shared axes (training curves of `foldcore plot_metrics`), with a
// legend. The y range is [y_min, y_max] when y_min < y_max, else the data's range; log_y plots
// log10(y) (values ≤ 0 leave a gap) and says so in the axis title.
Canvas plot_series(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                   const std::string& y_label, bool log_y, double y_min = 0, double y_max = 0);
// The canvases one under the other (widths may differ; the result is as wide as the widest).
Canvas stack_vertical(const std::vector<Canvas>& parts);

}  // namespace foldcore::apps::plot
