// The precompiled header of every test program (tests/CMakeLists.txt): GoogleTest, the standard
// headers most tests use and the shared test helpers. Parsing GoogleTest alone took about a third
// of a typical test file's compile time. Only headers that every build configuration has belong
// here (no HDF5, MPI or data-pipeline headers).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "test_util.h"
