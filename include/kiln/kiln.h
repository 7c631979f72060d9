#pragma once
// kiln's C++ API: what a program that uses kiln as a library includes (find_package(kiln),
// target kiln::kiln). Everything else under the install's include folder is here only
// because these headers need it.
//
//   #include <kiln/kiln.h>
//   kiln::Function f = kiln::compile(kiln::load_model("model.onnx"));
//   std::vector<kiln::Tensor> y = f({kiln::read_npy("x.npy")});
//
// Graphs in code: kiln::Graph and the builders (kiln::input, kiln::parameter, kiln::relu,
// kiln::matmul, ...), their gradients and training steps; errors: kiln::Error and its kinds (UserError: a bad model or input;
// CompileError: generated code that did not compile, with each diagnostic's node).

#include "compiler/compile.h"        // compile, CompileOptions, generate_source
#include "compiler/compile_error.h"  // CompileError
#include "compiler/function.h"       // Function, CompileInfo
#include "compiler/train/trainer.h"  // Trainer: forward, backward and updates in one module
#include "frontend/model_function.h"  // ModelFunction: models whose graph depends on input values
#include "frontend/model_loader.h"   // load_model: .onnx and .json
#include "graph/graph.h"             // Graph, Variable, Node
#include "ops/builders.h"            // Var and the graph builders
#include "rewrite/autodiff/grad.h"    // grad: reverse-mode gradients as graph nodes
#include "rewrite/autodiff/optimizer.h"  // add_optimizer_step: SGD, Adam as graph updates
#include "runtime/io/npy.h"          // read_npy, write_npy
#include "runtime/io/safetensors.h"  // read_safetensors, write_safetensors
#include "runtime/tensor.h"          // Tensor
#include "util/error.h"              // Error, UserError, UnsupportedError
