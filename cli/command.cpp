#include "cli/command.h"

#include <optional>

#include "util/strings.h"

namespace kiln::cli {

namespace {

const Flag* lookup(const std::vector<Flag>& flags, std::string_view name) {
  for (const auto& f : flags) {
    if (f.name == name || (!f.short_name.empty() && f.short_name == name)) return &f;
  }
  return nullptr;
}

// The commands that declare `name`, for the message that says where a misplaced flag goes.
std::vector<std::string> owners_of(std::string_view name, const std::vector<const Command*>& all) {
  std::vector<std::string> owners;
  for (const Command* c : all) {
    if (lookup(c->flags, name)) owners.push_back("kiln " + c->name);
  }
  return owners;
}

std::string flag_column(const Flag& f) {
  std::string left = "  " + (f.short_name.empty() ? std::string("    ") : f.short_name + ", ");
  left += f.name;
  if (!f.value.empty()) left += " " + f.value;
  return left;
}

}  // namespace

const std::vector<Flag>& global_flags() {
  static const std::vector<Flag> flags{
      {"--verbose", "-v", "",
       "print the time of each phase (load, key, lookup, rewrite, codegen, compile,\n"
       "module load, prepare weights, run) to stderr, and on a compile the kernels\n"
       "reused and compiled"},
      {"--op-library", "", "PATH",
       "load a custom-op library (repeatable; see docs/op-libraries.md); with -v,\n"
       "print what it registered",
       true},
      {"--help", "-h", "", "show help"},
  };
  return flags;
}

CommandLine CommandLine::parse(const std::vector<std::string>& args, Finder find,
                               const std::vector<const Command*>& all) {
  CommandLine c;
  const Command* cmd = nullptr;
  bool flags_end = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& s = args[i];
    if (!flags_end && s == "--") {
      flags_end = true;
      continue;
    }
    if (flags_end || s.empty() || s[0] != '-' || s == "-") {
      if (!c.command_.empty()) {
        c.positional_.push_back(s);
        continue;
      }
      cmd = find(s);
      if (!cmd) throw UsageError{"unknown command '" + s + "' (try 'kiln --help')"};
      c.command_ = s;
      continue;
    }
    std::string name = s;
    std::optional<std::string> inline_value;
    if (s.rfind("--", 0) == 0) {
      if (const auto eq = s.find('='); eq != std::string::npos) {
        name = s.substr(0, eq);
        inline_value = s.substr(eq + 1);
      }
    }
    const Flag* f = lookup(global_flags(), name);
    if (!f && cmd) f = lookup(cmd->flags, name);
    if (!f) {
      const std::vector<std::string> owners = owners_of(name, all);
      if (!cmd) {
        if (!owners.empty()) {
          throw UsageError{"option '" + name + "' goes after the command that takes it (" +
                           join(owners, ", ") + ")"};
        }
        throw UsageError{"unknown option '" + name + "' (try 'kiln --help')"};
      }
      if (!owners.empty()) {
        throw UsageError{"kiln " + cmd->name + " does not take " + name + " (" +
                         join(owners, ", ") + " does; see 'kiln " + cmd->name + " --help')"};
      }
      throw UsageError{"kiln " + cmd->name + ": unknown option '" + name + "' (see 'kiln " +
                       cmd->name + " --help')"};
    }
    std::vector<std::string>& values = c.flags_[f->name];
    if (f->value.empty()) {
      if (inline_value) throw UsageError{f->name + " takes no value"};
      values.emplace_back();
      continue;
    }
    if (!inline_value && i + 1 >= args.size()) {
      throw UsageError{name + " needs a value (" + f->value + ")"};
    }
    if (!values.empty() && !f->repeatable) throw UsageError{f->name + " given twice"};
    values.push_back(inline_value ? *inline_value : args[++i]);
  }
  return c;
}

bool CommandLine::has(std::string_view flag) const { return flags_.find(flag) != flags_.end(); }

std::string CommandLine::value(std::string_view flag, const std::string& fallback) const {
  auto it = flags_.find(flag);
  return it == flags_.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> CommandLine::values(std::string_view flag) const {
  auto it = flags_.find(flag);
  return it == flags_.end() ? std::vector<std::string>{} : it->second;
}

std::string CommandLine::one_model() const {
  if (positional_.empty()) throw UsageError{"kiln " + command_ + ": missing MODEL"};
  if (positional_.size() > 1) {
    throw UsageError{"kiln " + command_ + ": unexpected argument '" + positional_[1] + "'"};
  }
  return positional_[0];
}

std::string help_row(std::string first, std::string_view text, size_t indent) {
  constexpr size_t kWidth = 90;
  std::vector<std::string> words;
  std::string word;
  for (char ch : text) {
    if (ch == ' ' || ch == '\n') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += ch;
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  std::string out;
  std::string line = std::move(first);
  if (line.size() + 2 > indent) {
    out += line + "\n";
    line.clear();
  }
  line.resize(indent, ' ');
  bool empty = true;
  for (const std::string& w : words) {
    if (!empty && line.size() + 1 + w.size() > kWidth) {
      out += line + "\n";
      line.assign(indent, ' ');
      empty = true;
    }
    line += (empty ? "" : " ") + w;
    empty = false;
  }
  return out + line + "\n";
}

std::string command_help(const Command& c) {
  std::string out = "usage: kiln " + c.name + (c.usage.empty() ? "" : " " + c.usage) + "\n\n";
  out += c.about;
  if (!c.flags.empty()) {
    out += "\noptions:\n";
    for (const Flag& f : c.flags) out += help_row(flag_column(f), f.help, 30);
  }
  if (!c.notes.empty()) out += "\n" + c.notes;
  out +=
      "\nevery command also takes -v (--verbose), --op-library PATH and -h (--help); see "
      "'kiln --help'\n";
  return out;
}

}  // namespace kiln::cli
