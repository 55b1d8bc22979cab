#include "lessons/common/ring_diagram.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tensor/check.h"
#include "tensor/ops.h"

namespace lessons {

using namespace engine;

// A log travels as floats: start values, then per step [sent, received, values...].
std::vector<RingLog> gather_ring_logs(dist::ProcessGroup& g, const RingLog& mine) {
  const int n = g.size();
  std::vector<float> packed(mine.start);
  for (const RingStep& s : mine.steps) {
    packed.push_back(float(s.sent_chunk));
    packed.push_back(float(s.received_chunk));
    packed.insert(packed.end(), s.first_values.begin(), s.first_values.end());
  }
  std::vector<Tensor> all;
  g.all_gather(&all, from_vector(packed)).wait();
  std::vector<RingLog> logs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const Tensor& t = all[size_t(r)];
    const float* p = t.data<float>();
    RingLog& l = logs[size_t(r)];
    l.start.assign(p, p + n);
    p += n;
    for (int k = 0; k < 2 * (n - 1); ++k, p += 2 + n) {
      RingStep s;
      s.phase = k < n - 1 ? "reduce-scatter" : "all-gather";
      s.step = k % (n - 1);
      s.sent_chunk = int(p[0]), s.received_chunk = int(p[1]);
      s.to = (r + 1) % n, s.from = (r + n - 1) % n;
      s.first_values.assign(p + 2, p + 2 + n);
      l.steps.push_back(s);
    }
  }
  return logs;
}

std::string contributors(float value) {
  const long bits = std::lround(value);
  std::string s = "{";
  for (int r = 0; r < 62; ++r)
    if (bits >> r & 1) s += (s.size() > 1 ? "," : "") + std::to_string(r);
  return s + "}";
}

static void table(std::ostringstream& o, const std::vector<std::vector<float>>& rows,
                  const std::vector<std::string>& notes) {
  for (size_t r = 0; r < rows.size(); ++r) {
    char head[32];
    std::snprintf(head, sizeof head, "  rank %zu  ", r);
    o << head;
    for (float v : rows[r]) {
      std::string cell = contributors(v);
      cell.resize(std::max<size_t>(cell.size() + 2, 12), ' ');
      o << cell;
    }
    o << notes[r] << "\n";
  }
}

std::string ring_diagram_text(const std::vector<RingLog>& logs) {
  const int n = int(logs.size());
  std::ostringstream o;
  o << "Ring all-reduce over " << n << " ranks, each vector cut into " << n << " chunks.\n"
    << "Each cell shows whose contributions that chunk holds on that rank.\n\n"
    << "            ";
  for (int c = 0; c < n; ++c) {
    std::string h = "chunk " + std::to_string(c);
    h.resize(12, ' ');
    o << h;
  }
  o << "\nstart\n";
  std::vector<std::vector<float>> rows;
  for (auto& l : logs) rows.push_back(l.start);
  table(o, rows, std::vector<std::string>(size_t(n)));
  for (size_t k = 0; n > 1 && k < logs[0].steps.size(); ++k) {
    const RingStep& s0 = logs[0].steps[k];
    o << s0.phase << " step " << s0.step + 1 << " of " << n - 1
      << (s0.phase == "reduce-scatter" ? ": each rank sends a chunk to the next, which adds it to its own\n"
                                       : ": each rank passes a finished chunk to the next, which keeps it\n");
    rows.clear();
    std::vector<std::string> notes;
    for (auto& l : logs) {
      const RingStep& s = l.steps[k];
      rows.push_back(s.first_values);
      notes.push_back("sent chunk " + std::to_string(s.sent_chunk) + " -> rank " + std::to_string(s.to) +
                      ", received chunk " + std::to_string(s.received_chunk) + " <- rank " + std::to_string(s.from));
    }
    table(o, rows, notes);
  }
  return o.str();
}

namespace {

// The legend under the title: what the cell colours and the arrows mean.
void svg_legend(std::ostringstream& o, int n) {
  const int y = 40;
  auto swatch = [&](int x, const char* fill, const std::string& label) {
    o << "<rect class=\"legend\" x=\"" << x << "\" y=\"" << y << "\" width=\"18\" height=\"14\" fill=\"" << fill
      << "\"/>\n<text x=\"" << x + 24 << "\" y=\"" << y + 12 << "\">" << label << "</text>\n";
  };
  swatch(10, "rgb(235,220,255)", "one rank's contribution");
  swatch(240, "rgb(175,220,255)", "several ranks'");
  swatch(400, "rgb(120,200,120)", "all " + std::to_string(n) + " ranks': done");
  o << "<path class=\"legend\" d=\"M 10 " << y + 31 << " L 40 " << y + 31
    << "\" stroke=\"rgb(214,39,40)\" stroke-width=\"2\" marker-end=\"url(#head)\"/>\n"
    << "<text x=\"48\" y=\"" << y + 36
    << "\">a chunk sent to the next rank (added there in reduce-scatter, copied in all-gather)</text>\n";
}

}  // namespace

// Cells are coloured by how many ranks' contributions they hold: pale for one, green for
// all. In each step, an arrow goes from the chunk a rank sent to the same chunk of the rank
// that received it (the next rank; from the last rank it wraps round to rank 0).
std::string ring_diagram_svg(const std::vector<RingLog>& logs) {
  const int n = int(logs.size()), cell_w = 90, cell_h = 28, left = 80, block_h = (n + 2) * cell_h, top = 100;
  const int stages = 1 + 2 * (n - 1), width = std::max(left + n * cell_w + 330, 760), height = top + stages * block_h;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"monospace\" font-size=\"13\">\n"
    << "<defs><marker id=\"head\" markerWidth=\"8\" markerHeight=\"8\" refX=\"7\" refY=\"4\" orient=\"auto\">"
    << "<path d=\"M0,0 L8,4 L0,8 z\" fill=\"rgb(214,39,40)\"/></marker></defs>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"10\" y=\"24\" font-size=\"16\">Ring all-reduce over " << n
    << " ranks: whose contributions each chunk holds</text>\n";
  svg_legend(o, n);
  for (int st = 0; st < stages; ++st) {
    const int y0 = top + st * block_h;
    std::string title = "start";
    if (st > 0) {
      const RingStep& s = logs[0].steps[size_t(st - 1)];
      title = s.phase + " step " + std::to_string(s.step + 1) + " of " + std::to_string(n - 1);
    }
    o << "<text x=\"10\" y=\"" << y0 + 16 << "\" font-weight=\"bold\">" << title << "</text>\n";
    for (int c = 0; c < n; ++c)
      o << "<text x=\"" << left + c * cell_w + 10 << "\" y=\"" << y0 + cell_h + 14 << "\">chunk " << c << "</text>\n";
    auto row_y = [&](int r) { return y0 + (r + 1) * cell_h + 20; };
    for (int r = 0; r < n; ++r) {
      const auto& values = st == 0 ? logs[size_t(r)].start : logs[size_t(r)].steps[size_t(st - 1)].first_values;
      const int y = row_y(r);
      o << "<text x=\"10\" y=\"" << y + 18 << "\">rank " << r << "</text>\n";
      for (int c = 0; c < n; ++c) {
        const std::string who = contributors(values[size_t(c)]);
        const int held = int(std::count(who.begin(), who.end(), ',')) + 1;
        const int shade = 235 - 120 * (held - 1) / std::max(1, n - 1);
        o << "<rect class=\"cell\" x=\"" << left + c * cell_w << "\" y=\"" << y << "\" width=\"" << cell_w - 4
          << "\" height=\"" << cell_h - 4 << "\" fill=\"rgb(" << (held == n ? 120 : shade) << ","
          << (held == n ? 200 : 220) << "," << (held == n ? 120 : 255) << ")\"/>\n"
          << "<text class=\"cell\" x=\"" << left + c * cell_w + 8 << "\" y=\"" << y + 18 << "\">" << who << "</text>\n";
      }
      if (st > 0) {
        const RingStep& s = logs[size_t(r)].steps[size_t(st - 1)];
        o << "<text x=\"" << left + n * cell_w + 10 << "\" y=\"" << y + 18 << "\">sent chunk " << s.sent_chunk
          << " to rank " << s.to << ", got chunk " << s.received_chunk << "</text>\n";
        // The send: from this rank's chunk to the receiver's, a curve in the empty right
        // end of the chunk's column (the cells' text sits at its left).
        const int x = left + s.sent_chunk * cell_w + 64, ya = y + cell_h - 8, yb = row_y(s.to) + 4;
        o << "<path class=\"send\" d=\"M " << x << " " << ya << " C " << x + 16 << " " << ya << ", " << x + 16 << " "
          << yb << ", " << x + 4 << " " << yb
          << "\" fill=\"none\" stroke=\"rgb(214,39,40)\" stroke-width=\"2\" marker-end=\"url(#head)\"/>\n";
      }
    }
  }
  o << "</svg>\n";
  return o.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  ENGINE_REQUIRE(f.good(), "[write_file] cannot write ", path);
}

}  // namespace lessons
