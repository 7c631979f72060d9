#pragma once
// Small filesystem helpers with errors that name the path.
#include <filesystem>
#include <string>
#include <string_view>

namespace kiln {

std::string read_file(const std::filesystem::path& path);
// Writes to a temporary sibling and renames, so readers never see a partial file.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);
// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
std::filesystem::path cache_root();

}  // namespace kiln
