// Umbrella header of the autograd layer.
#pragma once

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/param_store.h"
#include "autograd/recompute.h"
#include "autograd/variable.h"
