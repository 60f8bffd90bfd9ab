// The includes every part of the binding shares (binding.cc and its binding_*.h parts).
#pragma once
#include <cuda_runtime_api.h>
#include <napi.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "binding_bridge.h"
#include "fa_api.h"
#include "fa_kvcache.h"
