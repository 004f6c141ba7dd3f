#include "apps/png_plot.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace foldcore::apps::plot {
namespace {

// 5x7 glyphs: 7 rows, the low 5 bits of each row, bit 4 = leftmost pixel.
struct Glyph {
  char c;
  std::array<uint8_t, 7> rows;
};

constexpr std::array<Glyph, 47> kFont = {{
    {'0', {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110}},
    {'1', {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'2', {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111}},
    {'3', {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110}},
    {'4', {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010}},
    {'5', {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110}},
    {'6', {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110}},
    {'7', {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000}},
    {'8', {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110}},
    {'9', {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100}},
    {'A', {0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001}},
    {'B', {0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110}},
    {'C', {0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110}},
    {'D', {0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100}},
    {'E', {0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111}},
    {'F', {0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000}},
    {'G', {0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111}},
    {'H', {0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001}},
    {'I', {0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'J', {0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100}},
    {'K', {0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001}},
    {'L', {0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111}},
    {'M', {0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001}},
    {'N', {0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001}},
    {'O', {0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110}},
    {'P', {0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000}},
    {'Q', {0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101}},
    {'R', {0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001}},
    {'S', {0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110}},
    {'T', {0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100}},
    {'U', {0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110}},
    {'V', {0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100}},
    {'W', {0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010}},
    {'X', {0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001}},
    {'Y', {0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100}},
    {'Z', {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111}},
    {'.', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b01100}},
    {'-', {0b00000, 0b00000, 0b00000, 0b11111, 0b00000, 0b00000, 0b00000}},
    {'_', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b11111}},
    {'(', {0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010}},
    {')', {0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000}},
    {'/', {0b00000, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b00000}},
    {'%', {0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011}},
    {':', {0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b01100, 0b00000}},
    {'=', {0b00000, 0b00000, 0b11111, 0b00000, 0b11111, 0b00000, 0b00000}},
    {'+', {0b00000, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0b00000}},
    {',', {0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b00100, 0b01000}},
}};

const Glyph* find_glyph(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const Glyph& g : kFont)
    if (g.c == c) return &g;
  return nullptr;
}

void append_u32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
}

// Chunk = length (big-endian), type, data, CRC-32 over type + data (ISO 3309, zlib's crc32).
void append_chunk(std::string& out, const char type[4], const std::string& data) {
  append_u32(out, static_cast<uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  append_u32(out, static_cast<uint32_t>(crc));
}

Rgb lerp(Rgb a, Rgb b, float t) {
  auto mix = [t](uint8_t x, uint8_t y) {
    return static_cast<uint8_t>(std::lround(static_cast<float>(x) + (static_cast<float>(y) - x) * t));
  };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

float clamp01(float t) { return std::isnan(t) ? 0.0f : std::clamp(t, 0.0f, 1.0f); }

// "Nice" tick spacing: 1, 2 or 5 × 10^k giving at most ~max_ticks ticks over `range`.
double tick_step(double range, int max_ticks) {
  if (range <= 0) return 1;
  const double raw = range / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

std::string format_tick(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A plotting frame: data ranges mapped onto the pixel box [left, right] x [top, bottom].
struct Axes {
  int left, top, right, bottom;
  double x0, x1, y0, y1;
  int px(double x) const { return left + static_cast<int>(std::lround((x - x0) / (x1 - x0) * (right - left))); }
  int py(double y) const { return bottom - static_cast<int>(std::lround((y - y0) / (y1 - y0) * (bottom - top))); }
};

// Box, ticks with labels, axis titles and the figure title.
void draw_axes(Canvas& c, const Axes& a, const std::string& title, const std::string& x_label,
               const std::string& y_label) {
  c.line(a.left, a.top, a.left, a.bottom, kBlack);
  c.line(a.left, a.bottom, a.right, a.bottom, kBlack);
  c.line(a.right, a.top, a.right, a.bottom, kBlack);
  c.line(a.left, a.top, a.right, a.top, kBlack);
  const double xs = tick_step(a.x1 - a.x0, 8);
  for (double x = std::ceil(a.x0 / xs) * xs; x <= a.x1 + 1e-9; x += xs) {
    const int p = a.px(x);
    c.line(p, a.bottom, p, a.bottom + 4, kBlack);
    const std::string s = format_tick(x);
    c.text(p - Canvas::text_width(s) / 2, a.bottom + 8, s, kBlack);
  }
  const double ys = tick_step(a.y1 - a.y0, 6);
  for (double y = std::ceil(a.y0 / ys) * ys; y <= a.y1 + 1e-9; y += ys) {
    const int p = a.py(y);
    c.line(a.left - 4, p, a.left, p, kBlack);
    const std::string s = format_tick(y);
    c.text(a.left - 8 - Canvas::text_width(s), p - 3, s, kBlack);
  }
  c.text((a.left + a.right) / 2 - Canvas::text_width(x_label) / 2, a.bottom + 24, x_label, kBlack);
  c.text_vertical(8, (a.top + a.bottom) / 2 + Canvas::text_width(y_label) / 2, y_label, kBlack);
  c.text((a.left + a.right) / 2 - Canvas::text_width(title, 2) / 2, 10, title, kBlack, 2);
}

}  // namespace

Canvas::Canvas(int width, int height, Rgb background) : width_(width), height_(height) {
  FC_CHECK(width > 0 && height > 0 && width <= 16384 && height <= 16384, "plot::Canvas: bad size ", width, "x", height);
  pixels_.resize(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = background.r;
    pixels_[i + 1] = background.g;
    pixels_[i + 2] = background.b;
  }
}

Rgb Canvas::at(int x, int y) const {
  FC_CHECK(x >= 0 && y >= 0 && x < width_ && y < height_, "plot::Canvas::at: (", x, ", ", y, ") outside ", width_,
           "x", height_);
  const size_t i = (static_cast<size_t>(y) * width_ + x) * 3;
  return {pixels_[i], pixels_[i + 1], pixels_[i + 2]};
}

void Canvas::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  const size_t i = (static_cast<size_t>(y) * width_ + x) * 3;
  pixels_[i] = c.r;
  pixels_[i + 1] = c.g;
  pixels_[i + 2] = c.b;
}

void Canvas::fill_rect(int x0, int y0, int x1, int y1, Rgb c) {
  if (x0 > x1) std::swap(x0, x1);
  if (y0 > y1) std::swap(y0, y1);
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, width_ - 1);
  y1 = std::min(y1, height_ - 1);
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) set(x, y, c);
}

void Canvas::line(int x0, int y0, int x1, int y1, Rgb c, int thickness) {
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  const int lo = -(thickness - 1) / 2, hi = thickness / 2;
  int err = dx + dy;
  for (;;) {
    fill_rect(x0 + lo, y0 + lo, x0 + hi, y0 + hi, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

void Canvas::text(int x, int y, const std::string& s, Rgb c, int scale) {
  for (size_t k = 0; k < s.size(); ++k) {
    const Glyph* g = find_glyph(s[k]);
    if (g == nullptr) continue;
    const int gx = x + static_cast<int>(k) * 6 * scale;
    for (int row = 0; row < 7; ++row)
      for (int col = 0; col < 5; ++col)
        if (g->rows[row] & (1u << (4 - col)))
          fill_rect(gx + col * scale, y + row * scale, gx + col * scale + scale - 1, y + row * scale + scale - 1, c);
  }
}

void Canvas::text_vertical(int x, int y, const std::string& s, Rgb c, int scale) {
  // Rotation by 90° CCW: glyph column → canvas row going up, glyph row → canvas column.
  for (size_t k = 0; k < s.size(); ++k) {
    const Glyph* g = find_glyph(s[k]);
    if (g == nullptr) continue;
    const int gy = y - static_cast<int>(k) * 6 * scale;
    for (int row = 0; row < 7; ++row)
      for (int col = 0; col < 5; ++col)
        if (g->rows[row] & (1u << (4 - col)))
          fill_rect(x + row * scale, gy - col * scale - scale + 1, x + row * scale + scale - 1, gy - col * scale, c);
  }
}

std::string encode_png(const Canvas& canvas, const std::vector<std::pair<std::string, std::string>>& text) {
  const int w = canvas.width(), h = canvas.height();
  std::string raw;
  raw.reserve(static_cast<size_t>(h) * (1 + 3 * static_cast<size_t>(w)));
  const auto& px = canvas.pixels();
  for (int y = 0; y < h; ++y) {
    raw.push_back('\0');  // filter type 0 (None)
    raw.append(reinterpret_cast<const char*>(px.data()) + static_cast<size_t>(y) * w * 3, static_cast<size_t>(w) * 3);
  }
  uLongf bound = compressBound(static_cast<uLong>(raw.size()));
  std::string idat(bound, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(idat.data()), &bound, reinterpret_cast<const Bytef*>(raw.data()),
                           static_cast<uLong>(raw.size()), 6);
  FC_CHECK(rc == Z_OK, "encode_png: zlib compress2 failed (", rc, ")");
  idat.resize(bound);

  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  append_u32(ihdr, static_cast<uint32_t>(w));
  append_u32(ihdr, static_cast<uint32_t>(h));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace
  append_chunk(out, "IHDR", ihdr);
  for (const auto& [key, value] : text) {
    FC_CHECK(!key.empty() && key.size() <= 79 && key.find('\0') == std::string::npos,
             "encode_png: bad tEXt keyword '", key, "'");
    append_chunk(out, "tEXt", key + std::string(1, '\0') + value);
  }
  append_chunk(out, "IDAT", idat);
  append_chunk(out, "IEND", "");
  return out;
}

Rgb colormap_pae(float t) { return lerp({0, 83, 32}, {245, 250, 245}, clamp01(t)); }

Rgb colormap_rainbow(float t) {
  // Piecewise-linear blue → cyan → green → yellow → red.
  constexpr std::array<Rgb, 5> stops = {{{40, 40, 220}, {0, 200, 220}, {40, 190, 40}, {240, 220, 0}, {220, 30, 30}}};
  const float s = clamp01(t) * (stops.size() - 1);
  const size_t i = std::min(static_cast<size_t>(s), stops.size() - 2);
  return lerp(stops[i], stops[i + 1], s - static_cast<float>(i));
}

Rgb plddt_colour(float plddt) {
  if (plddt < 50) return {255, 125, 69};
  if (plddt < 70) return {255, 219, 19};
  if (plddt < 90) return {101, 203, 243};
  return {0, 83, 214};
}

Canvas plot_plddt(const std::vector<std::pair<std::string, std::vector<float>>>& lines, const std::string& title) {
  FC_CHECK(!lines.empty(), "plot_plddt: no lines");
  const size_t n = lines[0].second.size();
  for (const auto& [name, v] : lines)
    FC_CHECK(v.size() == n && n > 0, "plot_plddt: line '", name, "' has ", v.size(), " values, expected ", n, " > 0");
  Canvas c(800, 480);
  const Axes a{70, 40, 780, 420, 1, static_cast<double>(std::max<size_t>(n, 2)), 0, 100};
  // Category bands (faint) under the curves.
  const float bounds[5] = {0, 50, 70, 90, 100};
  for (int b = 0; b < 4; ++b)
    c.fill_rect(a.left, a.py(bounds[b + 1]), a.right, a.py(bounds[b]), lerp(plddt_colour(bounds[b] + 1), kWhite, 0.8f));
  for (size_t k = 0; k < lines.size(); ++k) {
    const Rgb col = lines.size() == 1 ? kBlack : colormap_rainbow(static_cast<float>(k) / (lines.size() - 1));
    const auto& v = lines[k].second;
    for (size_t i = 0; i + 1 < n; ++i)
      c.line(a.px(i + 1), a.py(v[i]), a.px(i + 2), a.py(v[i + 1]), col, 2);
    if (n == 1) c.fill_rect(a.px(1) - 2, a.py(v[0]) - 2, a.px(1) + 2, a.py(v[0]) + 2, col);
    // Legend, top right inside the frame.
    const int ly = a.top + 8 + static_cast<int>(k) * 12;
    c.line(a.right - 180, ly + 3, a.right - 160, ly + 3, col, 2);
    c.text(a.right - 154, ly, lines[k].first, kBlack);
  }
  draw_axes(c, a, title, "Residue", "pLDDT");
  return c;
}

Canvas plot_pae(const std::vector<float>& pae, int64_t n, float max_value, const std::string& title) {
  FC_CHECK(n > 0 && static_cast<int64_t>(pae.size()) == n * n, "plot_pae: ", pae.size(), " values for n = ", n);
  FC_CHECK(max_value > 0, "plot_pae: max_value ", max_value, " must be > 0");
  Canvas c(620, 540);
  const Axes a{70, 40, 520, 490, 0.5, n + 0.5, 0.5, n + 0.5};
  // Heatmap: each pixel samples the nearest matrix cell; row i at the top (image convention).
  for (int y = a.top; y <= a.bottom; ++y) {
    const int64_t i = std::min<int64_t>(n - 1, (y - a.top) * n / (a.bottom - a.top + 1));
    for (int x = a.left; x <= a.right; ++x) {
      const int64_t j = std::min<int64_t>(n - 1, (x - a.left) * n / (a.right - a.left + 1));
      c.set(x, y, colormap_pae(pae[i * n + j] / max_value));
    }
  }
  // Frame and ticks (y axis labels count residues top-down: flip the label values).
  Axes ticks = a;
  draw_axes(c, ticks, title, "Aligned residue", "Scored residue");
  // draw_axes labels y bottom-up; overwrite with a top-down scale by redrawing the left margin.
  c.fill_rect(0, a.top - 6, a.left - 1, a.bottom + 6, kWhite);
  c.text_vertical(8, (a.top + a.bottom) / 2 + Canvas::text_width("Scored residue") / 2, "Scored residue", kBlack);
  const double ys = tick_step(static_cast<double>(n), 6);
  for (double v = ys; v <= n + 1e-9; v += ys) {
    const int p = a.top + static_cast<int>(std::lround((v - 0.5) / n * (a.bottom - a.top)));
    c.line(a.left - 4, p, a.left, p, kBlack);
    const std::string s = format_tick(v);
    c.text(a.left - 8 - Canvas::text_width(s), p - 3, s, kBlack);
  }
  // Colour bar.
  const int bx0 = 545, bx1 = 565;
  for (int y = a.top; y <= a.bottom; ++y)
    c.fill_rect(bx0, y, bx1, y, colormap_pae(static_cast<float>(a.bottom - y) / (a.bottom - a.top)));
  c.line(bx0, a.top, bx1, a.top, kBlack);
  c.line(bx0, a.bottom, bx1, a.bottom, kBlack);
  for (double v = 0; v <= max_value + 1e-6; v += tick_step(max_value, 6)) {
    const int p = a.bottom - static_cast<int>(std::lround(v / max_value * (a.bottom - a.top)));
    c.line(bx1, p, bx1 + 3, p, kBlack);
    c.text(bx1 + 6, p - 3, format_tick(v), kBlack);
  }
  c.text(bx0 - 8, a.bottom + 24, "(A)", kBlack);
  return c;
}

Canvas plot_msa_coverage(const std::vector<int32_t>& msa, int64_t num_rows, int64_t n, const std::string& title) {
  FC_CHECK(num_rows > 0 && n > 0 && static_cast<int64_t>(msa.size()) == num_rows * n, "plot_msa_coverage: ",
           msa.size(), " codes for ", num_rows, " x ", n);
  constexpr int32_t kGap = 21;
  std::vector<float> identity(num_rows, 0.0f);
  std::vector<int64_t> aligned(num_rows, 0), coverage(n, 0);
  for (int64_t r = 0; r < num_rows; ++r) {
    int64_t same = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int32_t code = msa[r * n + j];
      if (code == kGap) continue;
      ++aligned[r];
      ++coverage[j];
      same += code == msa[j];
    }
    // ColabFold's identity: matches to the query over the row's aligned (non-gap) positions.
    identity[r] = aligned[r] > 0 ? static_cast<float>(same) / static_cast<float>(aligned[r]) : 0.0f;
  }
  std::vector<int64_t> order(num_rows);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin() + 1, order.end(), [&](int64_t x, int64_t y) { return identity[x] > identity[y]; });

  Canvas c(800, 520);
  const Axes a{80, 40, 690, 470, 0.5, n + 0.5, 0, static_cast<double>(num_rows)};
  for (int y = a.top; y < a.bottom; ++y) {
    const int64_t r = order[std::min<int64_t>(num_rows - 1, (y - a.top) * num_rows / (a.bottom - a.top))];
    for (int x = a.left; x <= a.right; ++x) {
      const int64_t j = std::min<int64_t>(n - 1, (x - a.left) * n / (a.right - a.left + 1));
      if (msa[r * n + j] != kGap) c.set(x, y, colormap_rainbow(identity[r]));
    }
  }
  // The heatmap rows run top-down from the query; the coverage line uses the y scale bottom-up.
  for (int64_t j = 0; j + 1 < n; ++j)
    c.line(a.px(j + 1), a.py(coverage[j]), a.px(j + 2), a.py(coverage[j + 1]), kBlack, 2);
  draw_axes(c, a, title, "Position", "Sequences");
  const int bx0 = 715, bx1 = 735;
  for (int y = a.top; y <= a.bottom; ++y)
    c.fill_rect(bx0, y, bx1, y, colormap_rainbow(static_cast<float>(a.bottom - y) / (a.bottom - a.top)));
  c.text(bx0 - 10, a.top - 14, "ID 1", kBlack);
  c.text(bx0 - 4, a.bottom + 6, "0", kBlack);
  return c;
}

Canvas plot_series(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                   const std::string& y_label, bool log_y, double y_min, double y_max) {
  FC_CHECK(!series.empty(), "plot_series: no series");
  double x0 = INFINITY, x1 = -INFINITY, lo = INFINITY, hi = -INFINITY;
  auto value = [&](double y) { return log_y ? (y > 0 ? std::log10(y) : NAN) : y; };
  for (const Series& s : series) {
    FC_CHECK(s.x.size() == s.y.size(), "plot_series: series '", s.name, "' has ", s.x.size(), " x and ", s.y.size(),
             " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double v = value(s.y[i]);
      if (!std::isfinite(v) || !std::isfinite(s.x[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!(x0 <= x1)) x0 = 0, x1 = 1;  // no finite point: an empty frame
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (y_min < y_max) lo = value(y_min), hi = value(y_max);
  if (x1 - x0 < 1e-12) x1 = x0 + 1;
  if (hi - lo < 1e-12) hi = lo + 1;
  Canvas c(800, 420);
  const Axes a{70, 40, 780, 370, x0, x1, lo, hi};
  for (size_t k = 0; k < series.size(); ++k) {
    const Rgb col = series.size() == 1 ? kBlack : colormap_rainbow(static_cast<float>(k) / (series.size() - 1));
    const Series& s = series[k];
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double v = value(s.y[i]);
      if (!std::isfinite(v)) continue;
      const bool next = i + 1 < s.x.size() && std::isfinite(value(s.y[i + 1]));
      if (next)
        c.line(a.px(s.x[i]), a.py(std::clamp(v, lo, hi)), a.px(s.x[i + 1]), a.py(std::clamp(value(s.y[i + 1]), lo, hi)),
               col, 2);
      else
        c.fill_rect(a.px(s.x[i]) - 2, a.py(std::clamp(v, lo, hi)) - 2, a.px(s.x[i]) + 2,
                    a.py(std::clamp(v, lo, hi)) + 2, col);
    }
  }
  for (size_t k = 0; k < series.size(); ++k) {  // the legend over the curves, top right
    const Rgb col = series.size() == 1 ? kBlack : colormap_rainbow(static_cast<float>(k) / (series.size() - 1));
    const int ly = a.top + 8 + static_cast<int>(k) * 12;
    c.fill_rect(a.right - 204, ly - 2, a.right - 2, ly + 9, kWhite);
    c.line(a.right - 200, ly + 3, a.right - 180, ly + 3, col, 2);
    c.text(a.right - 174, ly, series[k].name, kBlack);
  }
  draw_axes(c, a, title, x_label, log_y ? "log10 " + y_label : y_label);
  return c;
}

Canvas stack_vertical(const std::vector<Canvas>& parts) {
  FC_CHECK(!parts.empty(), "stack_vertical: nothing to stack");
  int w = 0, h = 0;
  for (const Canvas& p : parts) {
    w = std::max(w, p.width());
    h += p.height();
  }
  Canvas out(w, h);
  int y0 = 0;
  for (const Canvas& p : parts) {
    for (int y = 0; y < p.height(); ++y)
      for (int x = 0; x < p.width(); ++x) out.set(x, y0 + y, p.at(x, y));
    y0 += p.height();
  }
  return out;
}

}  // namespace foldcore::apps::plot
