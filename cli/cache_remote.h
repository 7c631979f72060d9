// kiln cache remote status | push [KEY...] | pull KEY...: the remote tier by hand.
#pragma once

#include <string>
#include <vector>

namespace kiln::cli {

// `args` are the cache command's positional arguments, the subcommand first.
int run_cache_remote(const std::vector<std::string>& args);

}  // namespace kiln::cli
