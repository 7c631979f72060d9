#include "ctemplate/code_writer.h"

#include "ctemplate/c_layout.h"

namespace kiln {

void CodeWriter::emit(std::string_view text, SourceOrigin origin) {
  if (!text.empty()) text_.append(static_cast<size_t>(depth_) * 2, ' ');
  text_ += text;
  text_ += '\n';
  origins_.push_back(std::move(origin));
}

void CodeWriter::line(std::string_view text) { emit(text, SourceOrigin{}); }

void CodeWriter::fragment(std::string_view text, int node, std::string_view kind) {
  int n = 0;
  const int depth = depth_;
  for (auto& line : lay_out_c(text)) {
    depth_ = line.verbatim ? 0 : depth + line.level;
    emit(line.text, SourceOrigin{node, std::string(kind), ++n});
  }
  depth_ = depth;
}

void CodeWriter::verbatim(std::string_view text, int node, std::string_view kind) {
  int n = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    emit(text.substr(start, end - start), SourceOrigin{node, std::string(kind), ++n});
    start = end + 1;
  }
}

const SourceOrigin* CodeWriter::origin(int line) const {
  if (line < 1 || line > static_cast<int>(origins_.size())) return nullptr;
  return &origins_[static_cast<size_t>(line - 1)];
}

}  // namespace kiln
