#pragma once
// kiln's side of a custom-op library's hooks (include/kiln/op_library.h): the host table
// every hook receives, the per-call state behind kiln_op_call (the node's attributes, the
// error the hook records, the text it formats, a run's workspace), and the checks that turn
// a hook's result into kiln's or into an error naming the library, op and hook.
#include <deque>
#include <functional>
#include <string>

#include "graph/attrs.h"
#include "kiln/op_library.h"

struct kiln_op_call {
  const kiln::Attrs* attrs = nullptr;
  std::function<void*(size_t)> workspace;  // during a run in a module: scratch memory
  void* host_data = nullptr;               // during a library's init: its registration
  bool failed = false;
  std::string error;
  std::deque<std::string> texts;  // host->format results, freed with the call
};

namespace kiln {

const kiln_op_host* op_host();

// Calls a status hook. Throws UserError "WHERE: HOOK: MESSAGE" when it reports an error,
// returns a status that is not one, or throws (a library must not, but a C++ one may).
void check_status(const std::string& where, const char* hook, kiln_op_call& call,
                  const std::function<int()>& hook_fn);
// Calls a text hook and copies its text; NULL is an error (with the hook's message if any).
std::string call_text(const std::string& where, const char* hook, kiln_op_call& call,
                      const std::function<const char*()>& hook_fn);
// Runs `f`, turning any exception (a library's C++ code throwing through its C hook) into a
// UserError naming the hook.
void guard_hook(const std::string& where, const char* hook, const std::function<void()>& f);

}  // namespace kiln
