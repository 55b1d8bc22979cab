// Catch2's main(), compiled once for every test binary.
#define CATCH_CONFIG_MAIN
#include "catch2/catch.hpp"
