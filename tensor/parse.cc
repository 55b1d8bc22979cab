#include "tensor/parse.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tensor/check.h"

namespace engine {

int64_t parse_int(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  // strtoll skips leading spaces and accepts a prefix; both are junk here.
  const bool starts_well =
      !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-' || text[0] == '+');
  char* end = nullptr;
  errno = 0;
  const long long v = starts_well ? std::strtoll(text.c_str(), &end, 10) : 0;
  const bool whole = starts_well && end != text.c_str() && *end == '\0' && errno == 0;
  ENGINE_REQUIRE(whole && v >= min && v <= max, what, ": expected an integer in [", min, ", ", max, "], got \"", text,
                 "\"");
  return v;
}

double parse_double(const std::string& text, const std::string& what, double min, double max) {
  const bool starts_well = !text.empty() && !std::isspace(static_cast<unsigned char>(text[0]));
  char* end = nullptr;
  errno = 0;
  const double v = starts_well ? std::strtod(text.c_str(), &end) : 0;
  const bool whole = starts_well && end != text.c_str() && *end == '\0' && errno != ERANGE && std::isfinite(v);
  ENGINE_REQUIRE(whole && v >= min && v <= max, what, ": expected a number in [", min, ", ", max, "], got \"", text,
                 "\"");
  return v;
}

std::string parse_choice(const std::string& text, const std::string& what, std::initializer_list<const char*> allowed) {
  std::string words;
  for (const char* a : allowed) {
    if (text == a) return text;
    words += std::string(words.empty() ? "" : " or ") + "\"" + a + "\"";
  }
  throw Error(what + ": expected " + words + ", got \"" + text + "\"");
}

}  // namespace engine
