// Shared by the fuzz targets: a property check that aborts (libFuzzer then saves the input as a
// crash artifact).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

// Aborts with the condition, the place and `detail` when `cond` is false.
#define FUZZ_CHECK(cond, detail)                                                                \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  %s\n", __FILE__, __LINE__, #cond, \
                   std::string(detail).c_str());                                                \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)
