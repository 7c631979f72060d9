// A `kiln` command: its flags, help text and run function, and the command line it is given.
//
// Each command declares the flags it takes; a flag it does not take is a usage error that
// names the flag and the command, so a misplaced flag is never silently ignored.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cli {

// Wrong usage: exit 2 with this one-line reason.
struct UsageError {
  std::string message;
};

struct Flag {
  std::string name;        // "--input"
  std::string short_name;  // "-i", or empty
  std::string value;       // what it takes ("NAME=FILE"), empty for a switch
  std::string help;        // may span lines; shown in `kiln CMD --help`
  bool repeatable = false;
};

class CommandLine;

struct Command {
  std::string name;
  std::string usage;    // after "kiln NAME": "MODEL -o DIR [--name NAME]"
  std::string summary;  // `kiln --help`'s lines for this command
  std::string about;    // `kiln NAME --help`'s description
  std::vector<Flag> flags;
  std::string notes;  // printed after the flags (subcommands, formats), may be empty
  int (*run)(const CommandLine&) = nullptr;
};

// The global flags every command takes: -v, -h and --op-library.
const std::vector<Flag>& global_flags();

// The parsed command line of one command.
class CommandLine {
 public:
  // Parses `args` (argv without the program) against the global flags and, once the command
  // is known, `find(name)`'s flags. `find` returns nullptr for an unknown command: then only
  // global flags are read and the command is left to the caller to refuse.
  using Finder = const Command* (*)(std::string_view);
  static CommandLine parse(const std::vector<std::string>& args, Finder find,
                           const std::vector<const Command*>& all);

  const std::string& command() const { return command_; }
  const std::vector<std::string>& positional() const { return positional_; }
  bool has(std::string_view flag) const;
  // The flag's last value, or `fallback` when it was not given.
  std::string value(std::string_view flag, const std::string& fallback = "") const;
  std::vector<std::string> values(std::string_view flag) const;
  bool verbose() const { return has("--verbose"); }
  bool help() const { return has("--help"); }

  // MODEL: exactly one positional argument.
  std::string one_model() const;

 private:
  std::string command_;
  std::vector<std::string> positional_;
  std::map<std::string, std::vector<std::string>, std::less<>> flags_;  // long name -> values
};

// `kiln NAME --help`.
std::string command_help(const Command& c);

// `text` (its line breaks are spaces) in lines that start at column `indent` (the first line
// after `first`, padded there) and end by column 90: the help's two-column rows.
std::string help_row(std::string first, std::string_view text, size_t indent);

}  // namespace kiln::cli
