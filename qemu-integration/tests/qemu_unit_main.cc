#define CATCH_CONFIG_MAIN
#include <cstring>
#include <catch2/catch.hpp>
