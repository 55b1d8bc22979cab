#include "tools/flags/flags.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "tensor/check.h"
#include "tensor/parse.h"

namespace engine {

Flags::Flags(std::string program, std::string about) : program_(std::move(program)), about_(std::move(about)) {}

void Flags::add_flag(Flag f) {
  ENGINE_CHECK(f.name.rfind("--", 0) == 0 && !find(f.name));
  flags_.push_back(std::move(f));
}

Flags::Flag* Flags::find(const std::string& name) {
  for (Flag& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

namespace {
// A default outside the flag's own range is the program's mistake, which would otherwise
// run with a value no command line could give (an unset "required" count of 0, say).
template <class T, class R>
void check_default(const std::string& name, T value, R min, R max) {
  ENGINE_REQUIRE(value >= min && value <= max, "[flags] the default of ", name, ", ", value, ", is outside its range [",
                 min, ", ", max, "]: give the flag a default it accepts");
}
}  // namespace

void Flags::add(const std::string& name, int* out, int64_t min, int64_t max, const std::string& help) {
  check_default(name, int64_t(*out), min, max);
  add_flag({name, help, std::to_string(*out), Flag::Value,
            [=](const std::string& v) { *out = int(parse_int(v, name, min, max)); }});
}

void Flags::add(const std::string& name, int64_t* out, int64_t min, int64_t max, const std::string& help) {
  check_default(name, *out, min, max);
  add_flag({name, help, std::to_string(*out), Flag::Value,
            [=](const std::string& v) { *out = parse_int(v, name, min, max); }});
}

void Flags::add(const std::string& name, uint64_t* out, const std::string& help) {
  add_flag({name, help, std::to_string(*out), Flag::Value,
            [=](const std::string& v) { *out = uint64_t(parse_int(v, name, 0, INT64_MAX)); }});
}

void Flags::add(const std::string& name, double* out, double min, double max, const std::string& help) {
  check_default(name, *out, min, max);
  std::ostringstream d;
  d << *out;
  add_flag({name, help, d.str(), Flag::Value, [=](const std::string& v) { *out = parse_double(v, name, min, max); }});
}

void Flags::add(const std::string& name, std::string* out, const std::string& help) {
  add_flag({name, help, *out, Flag::Value, [=](const std::string& v) {
              ENGINE_REQUIRE(!v.empty(), name, ": expected a value, got an empty string");
              *out = v;
            }});
}

void Flags::add(const std::string& name, std::string* out, std::vector<std::string> choices, const std::string& help) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : "|") + c;
  add_flag({name, help + " (" + list + ")", *out, Flag::Value, [=](const std::string& v) {
              for (const auto& c : choices)
                if (v == c) return void(*out = v);
              throw Error(name + ": expected one of " + list + ", got \"" + v + "\"");
            }});
}

void Flags::add(const std::string& name, bool* out, const std::string& help) {
  add_flag({name, help, "", Flag::Switch, [=](const std::string& v) {
              ENGINE_REQUIRE(v == "true" || v == "false", name, ": a switch takes no value (or =true, =false), got \"",
                             v, "\"");
              *out = v == "true";
            }});
}

void Flags::add_list(const std::string& name, std::vector<int64_t>* out, int64_t min, int64_t max,
                     const std::string& help) {
  for (int64_t x : *out) check_default(name, x, min, max);
  std::string fallback;
  for (int64_t x : *out) fallback += (fallback.empty() ? "" : ",") + std::to_string(x);
  // The first value given replaces the defaults; later ones append. One argument may hold
  // several, comma-separated: the form the defaults are shown in.
  auto fresh = std::make_shared<bool>(true);
  add_flag({name, help, fallback, Flag::List, [=](const std::string& v) {
              if (*fresh) out->clear(), *fresh = false;
              // Every item between commas is parsed, so an empty one ("", "4,", ",4") is
              // refused rather than dropped.
              for (size_t start = 0;;) {
                const size_t comma = v.find(',', start);
                const std::string item = v.substr(start, comma - start);
                ENGINE_REQUIRE(!item.empty(), name, ": \"", v,
                               "\" has an empty item (a list is integers separated by commas or spaces, as 4096,8192)");
                out->push_back(parse_int(item, name, min, max));
                if (comma == std::string::npos) break;
                start = comma + 1;
              }
            }});
}

void Flags::add_positional(const std::string& name, std::string* out, const std::string& help) {
  positionals_.push_back({name, help, "", Flag::Value, [=](const std::string& v) {
                            ENGINE_REQUIRE(!v.empty(), name, ": expected a value, got an empty string");
                            *out = v;
                          }});
}

bool Flags::given(const std::string& name) const {
  for (const Flag& f : flags_)
    if (f.name == name) return f.given;
  return false;
}

bool Flags::parse(int argc, const char* const* argv) {
  size_t next_positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    if (arg.rfind("-", 0) != 0 || arg == "-") {
      ENGINE_REQUIRE(next_positional < positionals_.size(), "unexpected argument \"", arg, "\"");
      positionals_[next_positional++].set(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    Flag* f = find(name);
    ENGINE_REQUIRE(f, "unknown flag ", name);
    ENGINE_REQUIRE(!f->given, name, " given twice");
    f->given = true;
    if (eq != std::string::npos) {
      const std::string value = arg.substr(eq + 1);
      f->set(value);  // a list's setter refuses an empty value
      f->off = f->kind == Flag::Switch && value == "false";
    } else if (f->kind == Flag::Switch) {
      f->set("true");
    } else if (f->kind == Flag::List) {
      ENGINE_REQUIRE(i + 1 < argc && argv[i + 1][0] != '-', name, ": expected at least one value");
      while (i + 1 < argc && argv[i + 1][0] != '-') f->set(argv[++i]);
    } else {
      // "--epochs --lr 1" is a forgotten value, not the value "--lr".
      ENGINE_REQUIRE(i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0, name, ": missing value");
      f->set(argv[++i]);
    }
  }
  ENGINE_REQUIRE(next_positional == positionals_.size(), "missing argument ", positionals_[next_positional].name);
  for (const auto& [a, b] : exclusive_) {
    const Flag *fa = find(a), *fb = find(b);
    ENGINE_REQUIRE(!(fa->given && !fa->off && fb->given && !fb->off), a, " and ", b, " cannot be given together");
  }
  return true;
}

void Flags::exclusive(const std::string& a, const std::string& b) {
  ENGINE_REQUIRE(find(a) && find(b), "[Flags] exclusive(", a, ", ", b, "): both must be added first");
  exclusive_.emplace_back(a, b);
}

void Flags::parse_or_exit(int argc, const char* const* argv) {
  try {
    if (parse(argc, argv)) return;
    std::printf("%s", usage().c_str());
    std::exit(0);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n%s", program_.c_str(), e.what(), usage().c_str());
    std::exit(2);
  }
}

std::string Flags::usage() const {
  std::string s = "usage: " + program_;
  for (const Flag& p : positionals_) s += " " + p.name;
  s += flags_.empty() ? "\n" : " [flags]\n";
  if (!about_.empty()) s += about_ + "\n";
  for (const Flag& p : positionals_) s += "  " + p.name + "  " + p.help + "\n";
  for (const Flag& f : flags_) {
    std::string value = f.kind == Flag::Switch ? "" : f.kind == Flag::List ? " N..." : " VALUE";
    s += "  " + f.name + value + "  " + f.help;
    if (!f.fallback.empty()) s += " [default: " + f.fallback + "]";
    s += "\n";
  }
  return s + "  --help  this text\n";
}

}  // namespace engine
