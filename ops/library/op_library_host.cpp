#include "ops/library/op_library_host.h"

#include <cstdarg>
#include <cstdio>
#include <vector>

#include "util/error.h"

namespace kiln {
namespace {

std::string vformat(const char* fmt, va_list args) {
  if (!fmt) return "(NULL format)";
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n < 0) return fmt;
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), fmt, args);
  out.resize(static_cast<size_t>(n));
  return out;
}

void host_error(kiln_op_call* call, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string msg = vformat(fmt, args);
  va_end(args);
  if (!call) return;
  if (call->failed && !call->error.empty()) call->error += "; ";
  call->error += msg;
  call->failed = true;
}

const char* host_format(kiln_op_call* call, const char* fmt, ...) {
  if (!call) return nullptr;
  va_list args;
  va_start(args, fmt);
  try {
    call->texts.push_back(vformat(fmt, args));
  } catch (...) {
    va_end(args);
    return nullptr;
  }
  va_end(args);
  return call->texts.back().c_str();
}

const AttrValue* find_attr(kiln_op_call* call, const char* name) {
  if (!call || !call->attrs || !name) return nullptr;
  auto it = call->attrs->find(name);
  return it == call->attrs->end() ? nullptr : &it->second;
}

int32_t attr_count(kiln_op_call* call) {
  return call && call->attrs ? static_cast<int32_t>(call->attrs->size()) : 0;
}

const char* attr_name(kiln_op_call* call, int32_t i) {
  if (!call || !call->attrs || i < 0 || i >= static_cast<int32_t>(call->attrs->size()))
    return nullptr;
  auto it = call->attrs->begin();
  std::advance(it, i);
  return it->first.c_str();
}

int32_t attr_kind(kiln_op_call* call, const char* name) {
  const AttrValue* v = find_attr(call, name);
  if (!v) return KILN_ATTR_NONE;
  switch (v->index()) {
    case 0:
      return KILN_ATTR_INT;
    case 1:
      return KILN_ATTR_FLOAT;
    case 2:
      return KILN_ATTR_STRING;
    case 3:
      return KILN_ATTR_INTS;
    default:
      return KILN_ATTR_FLOATS;
  }
}

int get_int(kiln_op_call* call, const char* name, int64_t* value) {
  const auto* v = find_attr(call, name);
  const auto* i = v ? std::get_if<int64_t>(v) : nullptr;
  if (!i || !value) return -1;
  *value = *i;
  return 0;
}

int get_float(kiln_op_call* call, const char* name, double* value) {
  const auto* v = find_attr(call, name);
  if (!v || !value) return -1;
  if (const auto* f = std::get_if<double>(v)) {
    *value = *f;
    return 0;
  }
  if (const auto* i = std::get_if<int64_t>(v)) {
    *value = static_cast<double>(*i);
    return 0;
  }
  return -1;
}

int get_string(kiln_op_call* call, const char* name, const char** value) {
  const auto* v = find_attr(call, name);
  const auto* s = v ? std::get_if<std::string>(v) : nullptr;
  if (!s || !value) return -1;
  *value = s->c_str();
  return 0;
}

int get_ints(kiln_op_call* call, const char* name, const int64_t** values, int64_t* count) {
  const auto* v = find_attr(call, name);
  const auto* is = v ? std::get_if<std::vector<int64_t>>(v) : nullptr;
  if (!is || !values || !count) return -1;
  *values = is->data();
  *count = static_cast<int64_t>(is->size());
  return 0;
}

int get_floats(kiln_op_call* call, const char* name, const double** values, int64_t* count) {
  const auto* v = find_attr(call, name);
  const auto* fs = v ? std::get_if<std::vector<double>>(v) : nullptr;
  if (!fs || !values || !count) return -1;
  *values = fs->data();
  *count = static_cast<int64_t>(fs->size());
  return 0;
}

void* workspace(kiln_op_call* call, size_t bytes) {
  if (!call) return nullptr;
  if (!call->workspace) {
    host_error(call, "workspace is only available while the op runs in a module");
    return nullptr;
  }
  void* p = call->workspace(bytes);
  if (!p) host_error(call, "no workspace of %zu bytes", bytes);
  return p;
}

const kiln_op_host kHost = {
    sizeof(kiln_op_host), KILN_OP_ABI_MAJOR, KILN_OP_ABI_MINOR, host_error, host_format,
    attr_count,           attr_name,         attr_kind,         get_int,    get_float,
    get_string,           get_ints,          get_floats,        workspace};

[[noreturn]] void fail_hook(const std::string& where, const char* hook, const std::string& what) {
  throw UserError(where + ": " + hook + ": " + what);
}

}  // namespace

const kiln_op_host* op_host() { return &kHost; }

void guard_hook(const std::string& where, const char* hook, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error&) {
    throw;  // kiln's own checks, already worded
  } catch (const std::exception& e) {
    fail_hook(where, hook, std::string("threw a C++ exception across the C ABI: ") + e.what());
  } catch (...) {
    fail_hook(where, hook, "threw an exception across the C ABI");
  }
}

void check_status(const std::string& where, const char* hook, kiln_op_call& call,
                  const std::function<int()>& hook_fn) {
  int status = KILN_OP_OK;
  guard_hook(where, hook, [&] { status = hook_fn(); });
  if (status == KILN_OP_OK) return;
  if (status == KILN_OP_ERROR && call.failed) fail_hook(where, hook, call.error);
  fail_hook(where, hook,
            "returned status " + std::to_string(status) +
                (call.failed ? ": " + call.error
                             : std::string(" without a message (expected KILN_OP_OK, or "
                                           "KILN_OP_ERROR after host->error)")));
}

std::string call_text(const std::string& where, const char* hook, kiln_op_call& call,
                      const std::function<const char*()>& hook_fn) {
  const char* text = nullptr;
  guard_hook(where, hook, [&] { text = hook_fn(); });
  if (call.failed) fail_hook(where, hook, call.error);
  if (!text) fail_hook(where, hook, "returned NULL without an error (return \"\" for no text)");
  return text;
}

}  // namespace kiln
