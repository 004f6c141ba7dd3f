// CUDA host emulation: stands in for the toolkit header of this name.
#pragma once
#include "core/cuda/emu/cuda_emu.h"
