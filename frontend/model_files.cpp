#include "frontend/model_files.h"

#include <sys/stat.h>

#include <algorithm>

#include "util/error.h"
#include "util/escape.h"

namespace kiln {

namespace fs = std::filesystem;

fs::path file_beside_model(const fs::path& base_dir, const std::string& location,
                           const std::string& where_given) {
  const std::string where = where_given.empty() ? "" : where_given + ": ";
  const fs::path rel(location);
  bool escapes = location.empty() || rel.is_absolute() || location.find('\0') != std::string::npos;
  for (const auto& part : rel) escapes = escapes || part == "..";
  std::error_code ec;
  const fs::path base = fs::canonical(base_dir.empty() ? fs::path(".") : base_dir, ec);
  const fs::path file = (base_dir.empty() ? fs::path(".") : base_dir) / rel;
  const fs::path resolved = fs::canonical(file, ec);
  if (!escapes && ec) {
    throw UserError(where + "no such file " + in_quotes(location) + " in the model's folder (" +
                    base.string() + ")");
  }
  if (!escapes) {
    // A symlink inside the folder may still point out of it: compare resolved paths.
    auto [b, r] = std::mismatch(base.begin(), base.end(), resolved.begin(), resolved.end());
    escapes = b != base.end() || r == resolved.end();
  }
  if (escapes) {
    throw UserError(where + in_quotes(location) + " must name a file inside the model's folder (" +
                    base.string() + ")" +
                    (ec ? std::string() : "; it resolves to " + resolved.string()));
  }
  struct stat st {};
  if (::stat(resolved.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw UserError(where + in_quotes(location) +
                    " is not a regular file (a folder, device, FIFO or socket)");
  }
  return resolved;
}

}  // namespace kiln
