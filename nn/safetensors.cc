#include "nn/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace engine::nn {
namespace {

// ---------------------------------------------------------------------------------------
// A small JSON reader for the header: objects, arrays, strings and integers, which is all
// the format uses. Depth and sizes are bounded, so hostile input cannot exhaust the stack.

struct Json {
  enum Kind { Object, Array, String, Number } kind = Object;
  std::vector<std::pair<std::string, Json>> members;  // Object
  std::vector<Json> items;                            // Array
  std::string text;                                   // String
  int64_t number = 0;                                 // Number (integers only)
};

class JsonParser {
 public:
  JsonParser(const std::string& s, const std::string& file) : s_(s), file_(file) {}

  Json parse_document() {
    Json v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the header object");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("[load_safetensors] " + file_ + ": malformed header at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  Json value(int depth) {
    if (depth > 16) fail("nested too deeply");
    const char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      Json j;
      j.kind = Json::String;
      j.text = string();
      return j;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(std::string("unexpected character '") + c + "'");
  }

  Json object(int depth) {
    Json j;
    j.kind = Json::Object;
    expect('{');
    if (peek() == '}') return ++pos_, j;
    while (true) {
      std::string key = (peek() == '"') ? string() : (fail("expected a key string"), "");
      expect(':');
      j.members.emplace_back(std::move(key), value(depth + 1));
      if (peek() == ',') { ++pos_; continue; }
      expect('}');
      return j;
    }
  }

  Json array(int depth) {
    Json j;
    j.kind = Json::Array;
    expect('[');
    if (peek() == ']') return ++pos_, j;
    while (true) {
      j.items.push_back(value(depth + 1));
      if (peek() == ',') { ++pos_; continue; }
      expect(']');
      return j;
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') { out += c; continue; }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) fail("short \\u escape");
          for (size_t k = pos_; k < pos_ + 4; ++k)
            if (!std::isxdigit(static_cast<unsigned char>(s_[k]))) fail("bad \\u escape");
          const unsigned code = std::stoul(s_.substr(pos_, 4), nullptr, 16);
          pos_ += 4;
          // UTF-8 encode a code point from the Basic Multilingual Plane.
          if (code < 0x80) out += char(code);
          else if (code < 0x800) out += char(0xC0 | (code >> 6)), out += char(0x80 | (code & 0x3F));
          else out += char(0xE0 | (code >> 12)), out += char(0x80 | ((code >> 6) & 0x3F)), out += char(0x80 | (code & 0x3F));
          break;
        }
        default: fail(std::string("bad escape \\") + e);
      }
    }
  }

  Json number() {
    Json j;
    j.kind = Json::Number;
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) fail("only integers are expected here");
    if (pos_ == start + (s_[start] == '-' ? 1 : 0)) fail("a number needs digits");
    if (pos_ - start > 18) fail("integer too large");
    j.number = std::stoll(s_.substr(start, pos_ - start));
    return j;
  }

  const std::string& s_;
  const std::string& file_;
  size_t pos_ = 0;
};

std::string json_escape(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += c;
  }
  return out + "\"";
}

const char* dtype_code(DType t) { return t == DType::Float32 ? "F32" : "I64"; }

// ---------------------------------------------------------------------------------------
// Writing

std::string build_header(const StateDict& tensors, const Metadata& metadata, std::vector<Tensor>* dense) {
  std::ostringstream h;
  h << "{";
  bool first = true;
  if (!metadata.empty()) {
    h << "\"__metadata__\":{";
    bool f = true;
    for (const auto& [k, v] : metadata) h << (f ? "" : ",") << json_escape(k) << ":" << json_escape(v), f = false;
    h << "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ENGINE_REQUIRE(t.defined(), "[save_safetensors] tensor \"", name, "\" is undefined");
    ENGINE_REQUIRE(name != "__metadata__" && !name.empty(), "[save_safetensors] invalid tensor name \"", name, "\"");
    const Tensor c = t.to(Device::cpu()).contiguous();
    const uint64_t bytes = uint64_t(c.numel()) * dtype_size(c.dtype());
    h << (first ? "" : ",") << json_escape(name) << ":{\"dtype\":\"" << dtype_code(c.dtype()) << "\",\"shape\":[";
    for (int64_t d = 0; d < c.dim(); ++d) h << (d ? "," : "") << c.size(d);
    h << "],\"data_offsets\":[" << offset << "," << offset + bytes << "]}";
    offset += bytes;
    first = false;
    dense->push_back(c);
  }
  h << "}";
  std::string header = h.str();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  return header;
}

// write(2) until done; false on any error.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= size_t(w);
  }
  return true;
}

// Removes "<path>.tmp.<pid>" files left by writers that were killed mid-save (their pid
// no longer exists), so that interrupted saves do not pile up next to the checkpoint.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (::kill(pid_t(std::stol(pid)), 0) != 0 && errno == ESRCH) fs::remove(it->path(), ec);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");
  std::vector<Tensor> dense;
  const std::string header = build_header(tensors, metadata, &dense);
  remove_stale_temporaries(path);
  // Temporary file in the target's directory, so the final rename stays on one file system.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ENGINE_REQUIRE(fd >= 0, "[save_safetensors] cannot create ", tmp, ": ", std::strerror(errno));
  const uint64_t n = header.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  bool ok = write_all(fd, len, 8) && write_all(fd, header.data(), header.size());
  for (const Tensor& t : dense) {
    if (!ok) break;
    const char* base = t.bytes();
    ok = write_all(fd, base, size_t(t.numel()) * dtype_size(t.dtype()));
  }
  const int saved_errno = errno;
  ok = ok && ::fsync(fd) == 0;  // the bytes are on disk before the name points at them
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    throw Error("[save_safetensors] writing " + tmp + " failed: " + std::strerror(saved_errno ? saved_errno : errno) +
                "; " + path + " was left as it was");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("[save_safetensors] cannot rename " + tmp + " to " + path + ": " + why);
  }
  // Make the rename itself durable.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) ::fsync(dfd), ::close(dfd);
}

StateDict load_safetensors(const std::string& path, Metadata* metadata) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  ENGINE_REQUIRE(in.good(), "[load_safetensors] cannot open ", path, ": ", std::strerror(errno));
  const uint64_t file_size = uint64_t(in.tellg());
  in.seekg(0);
  ENGINE_REQUIRE(file_size >= 8, "[load_safetensors] ", path, " is too short (", file_size,
                 " bytes) to hold a safetensors header");
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  ENGINE_REQUIRE(n <= file_size - 8 && n <= (uint64_t(100) << 20), "[load_safetensors] ", path, " declares a ", n,
                 "-byte header but holds ", file_size - 8, " bytes after the length (truncated or not safetensors)");
  std::string header(n, '\0');
  in.read(header.data(), std::streamsize(n));
  ENGINE_REQUIRE(in.good(), "[load_safetensors] ", path, ": read error in the header");
  const Json root = JsonParser(header, path).parse_document();
  ENGINE_REQUIRE(root.kind == Json::Object, "[load_safetensors] ", path, ": the header is not a JSON object");

  const uint64_t data_size = file_size - 8 - n;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& member : root.members) {
    const std::string& name = member.first;  // (a lambda may not capture a structured binding before C++20)
    const auto& v = member.second;
    auto bad = [&](const std::string& what) {
      return Error("[load_safetensors] " + path + ": tensor \"" + name + "\": " + what);
    };
    if (name == "__metadata__") {
      if (v.kind != Json::Object) throw bad("__metadata__ must be an object of strings");
      for (const auto& [k, s] : v.members) {
        if (s.kind != Json::String) throw bad("__metadata__ value for \"" + k + "\" is not a string");
        if (metadata) (*metadata)[k] = s.text;
      }
      continue;
    }
    if (v.kind != Json::Object) throw bad("entry is not an object");
    const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, f] : v.members) {
      if (k == "dtype") dtype = &f;
      else if (k == "shape") shape = &f;
      else if (k == "data_offsets") offsets = &f;
    }
    if (!dtype || !shape || !offsets) throw bad("needs dtype, shape and data_offsets");
    Entry e{name, DType::Float32, {}, 0, 0};
    if (dtype->kind != Json::String) throw bad("dtype is not a string");
    if (dtype->text == "F32") e.dtype = DType::Float32;
    else if (dtype->text == "I64") e.dtype = DType::Int64;
    else throw bad("dtype " + dtype->text + " is not supported (F32 and I64 are)");
    if (shape->kind != Json::Array || shape->items.size() > 8) throw bad("shape must be an array of at most 8 sizes");
    uint64_t count = 1;
    for (const Json& d : shape->items) {
      if (d.kind != Json::Number || d.number < 0 || d.number > (int64_t(1) << 40)) throw bad("shape has an invalid size");
      e.shape.push_back(d.number);
      count *= uint64_t(d.number);
      if (count > (uint64_t(1) << 40)) throw bad("shape is implausibly large");
    }
    if (offsets->kind != Json::Array || offsets->items.size() != 2 || offsets->items[0].kind != Json::Number ||
        offsets->items[1].kind != Json::Number || offsets->items[0].number < 0 ||
        offsets->items[1].number < offsets->items[0].number)
      throw bad("data_offsets must be [begin, end] with 0 <= begin <= end");
    e.begin = uint64_t(offsets->items[0].number);
    e.end = uint64_t(offsets->items[1].number);
    if (e.end > data_size)
      throw bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") run past the " +
                std::to_string(data_size) + "-byte data section (truncated file?)");
    if (e.end - e.begin != count * dtype_size(e.dtype))
      throw bad("shape " + shape_str(e.shape) + " needs " + std::to_string(count * dtype_size(e.dtype)) +
                " bytes but data_offsets span " + std::to_string(e.end - e.begin));
    entries.push_back(std::move(e));
  }
  // Offsets must tile the data section: sorted by begin, each starts where the last ended.
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  uint64_t expect = 0;
  for (const Entry* e : order) {
    ENGINE_REQUIRE(e->begin == expect, "[load_safetensors] ", path, ": tensor \"", e->name, "\" at bytes [", e->begin,
                   ", ", e->end, ") ", e->begin < expect ? "overlaps the previous tensor" : "leaves a gap before it");
    expect = e->end;
  }
  ENGINE_REQUIRE(expect == data_size, "[load_safetensors] ", path, ": the data section has ", data_size,
                 " bytes but the tensors cover ", expect);
  // Everything checked: read the tensors.
  StateDict out;
  for (const Entry& e : entries) {
    ENGINE_REQUIRE(!out.count(e.name), "[load_safetensors] ", path, ": tensor \"", e.name, "\" appears twice");
    Tensor t = empty(e.shape, e.dtype);
    in.seekg(std::streamoff(8 + n + e.begin));
    in.read(static_cast<char*>(t.storage()->data()), std::streamsize(e.end - e.begin));
    ENGINE_REQUIRE(in.good() || e.end == e.begin, "[load_safetensors] ", path, ": read error in tensor \"", e.name, "\"");
    out[e.name] = t;
  }
  return out;
}

}  // namespace engine::nn
