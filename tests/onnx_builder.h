#pragma once
// Builds small ONNX models in tests (float32 values, opset 17 unless told otherwise), and
// catches the message of an expected error.
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace kiln::testing {

struct ModelBuilder {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  explicit ModelBuilder(int opset = 17) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    g = m.mutable_graph();
    g->set_name("test");
  }
  void value(onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims,
             int type) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    auto* shape = t->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d < 0) {
        dim->set_dim_param(d == -1 ? "batch" : "dim" + std::to_string(-d));  // -1, -2: distinct
      } else {
        dim->set_dim_value(d);
      }
    }
  }
  void input(const std::string& name, std::vector<int64_t> dims,
             int type = onnx::TensorProto::FLOAT) {
    value(g->add_input(), name, std::move(dims), type);
  }
  void output(const std::string& name, std::vector<int64_t> dims,
              int type = onnx::TensorProto::FLOAT) {
    value(g->add_output(), name, std::move(dims), type);
  }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> ins,
                        std::vector<std::string> outs, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(o);
    return n;
  }
  onnx::TensorProto* initializer(const std::string& name, std::vector<int64_t> dims,
                                 std::vector<float> values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(
        std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return t;
  }
  void ints_initializer(const std::string& name, std::vector<int64_t> values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }
  std::string bytes() const { return m.SerializeAsString(); }
};

inline void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

inline void set_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

template <class E, class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

}  // namespace kiln::testing
