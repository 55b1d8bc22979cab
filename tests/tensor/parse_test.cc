#include "tensor/parse.h"

#include <catch2/catch.hpp>

#include "tensor/check.h"

using namespace engine;

TEST_CASE("parse_int: the whole text, in range, or an error naming what was read") {
  CHECK(parse_int("42", "x", 0, 100) == 42);
  CHECK(parse_int("-7", "x", -10, 10) == -7);
  CHECK(parse_int("+7", "x", -10, 10) == 7);
  CHECK(parse_int("9223372036854775807", "x", 0, INT64_MAX) == INT64_MAX);
  for (const char* bad : {"", " 1", "1 ", "1.5", "0x10", "abc", "12abc", "-", "101", "-11", "9223372036854775808"})
    CHECK_THROWS_WITH(
        parse_int(bad, "key \"epoch\" of a.safetensors", -10, 100),
        std::string("key \"epoch\" of a.safetensors: expected an integer in [-10, 100], got \"") + bad + "\"");
}

TEST_CASE("parse_double: finite numbers in range only") {
  CHECK(parse_double("0.25", "lr", 0, 1) == 0.25);
  CHECK(parse_double("1e-3", "lr", 0, 1) == 1e-3);
  for (const char* bad : {"", " 0.1", "0.1x", "nan", "inf", "-inf", "1e999", "2", "-0.5"})
    CHECK_THROWS_AS(parse_double(bad, "lr", 0, 1), Error);
}

TEST_CASE("parse_choice: one of the words exactly, or an error listing them") {
  CHECK(parse_choice("ring", "ENGINE_NCCL_ALLREDUCE", {"nccl", "ring"}) == "ring");
  CHECK(parse_choice("0", "ENGINE_SHM", {"0", "1"}) == "0");
  for (const char* bad : {"", "off", "false", " 0", "0 ", "Ring", "2"})
    CHECK_THROWS_WITH(parse_choice(bad, "ENGINE_SHM", {"0", "1"}),
                      std::string("ENGINE_SHM: expected \"0\" or \"1\", got \"") + bad + "\"");
}
