// main.cpp — the doctest runner for every unit test in tests/unit/.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
