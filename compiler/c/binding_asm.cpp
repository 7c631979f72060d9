#include "compiler/c/binding_asm.h"

#include <cstddef>
#include <cstdio>

#include "runtime/module/module_abi.h"
#include "util/escape.h"

namespace kiln {

#if defined(__x86_64__)
// The tables below spell out the C layout of the ABI structs: hold kiln to it.
static_assert(sizeof(void*) == 8 && sizeof(size_t) == 8);
static_assert(offsetof(kiln_thunk_info, fn) == 0 && offsetof(kiln_thunk_info, name) == 8 &&
              offsetof(kiln_thunk_info, node) == 16 && offsetof(kiln_thunk_info, n_in) == 20 &&
              offsetof(kiln_thunk_info, n_out) == 24 && offsetof(kiln_thunk_info, flags) == 28 &&
              offsetof(kiln_thunk_info, split_unit) == 32 && sizeof(kiln_thunk_info) == 40);
static_assert(offsetof(kiln_module_info, abi_version) == 0 &&
              offsetof(kiln_module_info, key) == 8 && offsetof(kiln_module_info, n_thunks) == 16 &&
              offsetof(kiln_module_info, thunks) == 24 &&
              offsetof(kiln_module_info, state_size) == 32 &&
              offsetof(kiln_module_info, state_init) == 40 &&
              offsetof(kiln_module_info, state_cleanup) == 48 &&
              offsetof(kiln_module_info, n_kernels) == 56 &&
              offsetof(kiln_module_info, kernel_names) == 64 && sizeof(kiln_module_info) == 72);

std::string binding_assembly(const std::string& key, const std::vector<BoundNode>& nodes) {
  std::string s = "# kiln module binding (x86-64): every node runs a kernel with its sizes.\n";
  s += "\t.text\n";
  for (const auto& n : nodes) {
    const std::string id = std::to_string(n.id);
    s += "\t.p2align 4\nkiln_node_" + id + ":\n";
    s += n.args.empty() ? "\txorl %r8d, %r8d\n" : "\tleaq kiln_args_" + id + "(%rip), %r8\n";
    s += "\tjmp " + n.kernel + "\n";
  }
  // kiln_module(support): keep the support table (kernels read kiln_support_), return the info.
  s += "\t.p2align 4\n\t.globl kiln_module\n\t.type kiln_module, @function\nkiln_module:\n";
  s += "\tmovq %rdi, kiln_support_(%rip)\n\tleaq kiln_info(%rip), %rax\n\tret\n";
  s += "\t.size kiln_module, .-kiln_module\n";

  s += "\t.section .rodata\n";
  for (const auto& n : nodes) {
    s += "kiln_label_" + std::to_string(n.id) + ":\n\t.asciz " + asm_string_literal(n.label) + "\n";
    if (n.args.empty()) continue;
    s += "\t.p2align 3\nkiln_args_" + std::to_string(n.id) + ":\n";
    for (size_t i = 0; i < n.args.size(); ++i) {
      s += "\t.quad " + std::to_string(n.args[i]);
      s += i < n.arg_names.size() ? "\t# " + n.arg_names[i] + "\n" : "\n";
    }
  }
  s += "kiln_key:\n\t.asciz " + asm_string_literal(key) + "\n";

  s += "\t.section .data.rel.ro, \"aw\"\n\t.p2align 3\nkiln_thunks:\n";
  for (const auto& n : nodes) {
    const std::string id = std::to_string(n.id);
    s += "\t.quad kiln_node_" + id + ", kiln_label_" + id + "\n";
    s += "\t.long " + id + ", " + std::to_string(n.n_in) + ", " + std::to_string(n.n_out) + ", " +
         std::to_string(n.flags) + "\n";
    s += "\t.quad " + std::to_string(n.split_unit) + "\n";
  }
  s += "\t.p2align 3\nkiln_info:\n";
  s += "\t.long " + std::to_string(KILN_ABI_VERSION) + ", 0\n";
  s += "\t.quad kiln_key\n";
  s += "\t.long " + std::to_string(nodes.size()) + ", 0\n";
  s += "\t.quad kiln_thunks\n";
  s += "\t.quad 8, 0, 0\n";          // state: a reserved word, no init, no cleanup
  s += "\t.long 0, 0\n\t.quad 0\n";  // no device kernels

  s += "\t.bss\n\t.p2align 3\n\t.globl kiln_support_\n\t.hidden kiln_support_\n";
  s += "kiln_support_:\n\t.zero 8\n";
  s += "\t.section .note.GNU-stack, \"\", @progbits\n";
  return s;
}

#else

std::string binding_assembly(const std::string&, const std::vector<BoundNode>&) { return ""; }

#endif

}  // namespace kiln
