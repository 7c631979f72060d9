// Trains a small CNN with kiln: forward, backward and the optimizer step compiled into one
// cached module (kiln::Trainer), on a generated dataset of 16x16 images of strokes in four
// directions (horizontal, vertical, and the two diagonals) at random places, with noise.
// Prints a progress bar per epoch, then the epoch's mean loss and the held-out accuracy.
//
//   train_example [--epochs N] [--optimizer adam:lr=0.01] [--seed S]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <kiln/kiln.h>

namespace {

constexpr int kSide = 16, kClasses = 4, kBatch = 64, kTrain = 2048, kTest = 512;

struct Dataset {
  std::vector<float> images;  // (n, 1, 16, 16)
  std::vector<int> labels;
};

Dataset make_dataset(int n, std::mt19937& rng) {
  Dataset d;
  std::normal_distribution<float> noise(0.f, 0.3f);
  std::uniform_int_distribution<int> pos(3, kSide - 4), len(5, 9);
  for (int i = 0; i < n; ++i) {
    const int cls = static_cast<int>(rng() % kClasses), r0 = pos(rng), c0 = pos(rng), l = len(rng);
    std::vector<float> img(kSide * kSide);
    for (float& v : img) v = noise(rng);
    static const int dr[kClasses] = {0, 1, 1, 1}, dc[kClasses] = {1, 0, 1, -1};
    for (int k = -l / 2; k <= l / 2; ++k) {
      const int r = r0 + k * dr[cls], c = c0 + k * dc[cls];
      if (r >= 0 && r < kSide && c >= 0 && c < kSide) img[r * kSide + c] += 1.f;
    }
    d.images.insert(d.images.end(), img.begin(), img.end());
    d.labels.push_back(cls);
  }
  return d;
}

kiln::Tensor batch_images(const Dataset& d, int first) {
  kiln::Tensor t = kiln::Tensor::empty(kiln::DType::kFloat32, {kBatch, 1, kSide, kSide});
  std::memcpy(t.data(), d.images.data() + static_cast<size_t>(first) * kSide * kSide,
              sizeof(float) * kBatch * kSide * kSide);
  return t;
}

kiln::Tensor batch_onehot(const Dataset& d, int first) {
  kiln::Tensor t = kiln::Tensor::zeros(kiln::DType::kFloat32, {kBatch, kClasses});
  for (int i = 0; i < kBatch; ++i)
    t.store(i * kClasses + d.labels[static_cast<size_t>(first + i)], 1.0);
  return t;
}

struct Model {
  kiln::Var x, logits;
  std::vector<kiln::Var> params;
};

// conv 1->8 3x3, relu, pool 2 -> conv 8->16 3x3, relu, pool 2 -> linear 256->4.
Model build(kiln::Graph& g) {
  using namespace kiln;
  const DType f = DType::kFloat32;
  Model m;
  m.x = input(g, "x", f, {kBatch, 1, kSide, kSide});
  Var k1 = input(g, "conv1.w", f, {8, 1, 3, 3}), b1 = input(g, "conv1.b", f, {8});
  Var k2 = input(g, "conv2.w", f, {16, 8, 3, 3}), b2 = input(g, "conv2.b", f, {16});
  Var w = input(g, "fc.w", f, {256, kClasses}), b = input(g, "fc.b", f, {kClasses});
  m.params = {k1, b1, k2, b2, w, b};
  const Attrs same{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  const Attrs pool{{"kernel_shape", std::vector<int64_t>{2, 2}},
                   {"strides", std::vector<int64_t>{2, 2}}};
  Var h = apply("max_pool", {relu(apply("conv", {m.x, k1, b1}, same))}, pool);
  h = apply("max_pool", {relu(apply("conv", {h, k2, b2}, same))}, pool);
  m.logits = matmul(flatten(h), w) + b;
  return m;
}

kiln::Tensor he_init(const kiln::Shape& shape, int fan_in, std::mt19937& rng) {
  std::normal_distribution<double> n(0, std::sqrt(2.0 / fan_in));
  kiln::Tensor t = kiln::Tensor::empty(kiln::DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.store(i, n(rng));
  return t;
}

// Redrawn in place on a terminal; a log gets only the per-epoch lines.
void progress(int done, int total, double loss) {
  static const bool tty = isatty(fileno(stdout));
  if (!tty) return;
  const int width = 30, filled = done * width / total;
  std::printf("\r  [%s%s] %3d/%d  loss %.4f", std::string(static_cast<size_t>(filled), '#').c_str(),
              std::string(static_cast<size_t>(width - filled), '.').c_str(), done, total, loss);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 8;
  unsigned seed = 1;
  std::string optimizer = "adam:lr=0.005";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--epochs") {
      epochs = std::atoi(next().c_str());
    } else if (a == "--optimizer") {
      optimizer = next();
    } else if (a == "--seed") {
      seed = static_cast<unsigned>(std::atoi(next().c_str()));
    } else {
      std::fprintf(stderr, "usage: train_example [--epochs N] [--optimizer SPEC] [--seed S]\n");
      return 2;
    }
  }
  try {
    using namespace kiln;
    std::mt19937 rng(seed);
    const Dataset train = make_dataset(kTrain, rng), test = make_dataset(kTest, rng);

    // The training step: cross-entropy of the logits, its gradient and the optimizer.
    Graph g("strokes_train");
    Model m = build(g);
    Var onehot = input(g, "y", DType::kFloat32, {kBatch, kClasses});
    Var loss = -mean(sum(onehot * log_softmax(m.logits), {1}));
    const int fan_in[] = {9, 1, 72, 1, 256, 1};
    std::vector<std::pair<Variable*, Tensor>> start;
    for (size_t i = 0; i < m.params.size(); ++i) {
      start.emplace_back(m.params[i].var(), he_init(m.params[i].type().dims, fan_in[i], rng));
      if (fan_in[i] == 1)
        start.back().second = Tensor::zeros(DType::kFloat32, m.params[i].type().dims);
    }
    auto t0 = std::chrono::steady_clock::now();
    Trainer trainer(std::move(g), loss.var(), start, OptimizerOptions::parse(optimizer));
    const double compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("training step compiled in %.0f ms (cache %s; %d updates in place)\n", compile_ms,
                to_string(trainer.function().info().cache),
                trainer.function().info().updates_in_place);

    // Evaluation: the forward graph alone, reading the trainer's parameters.
    Graph eg("strokes_eval");
    Model em = build(eg);
    eg.set_outputs({em.logits.var()});
    Function evaluate = compile(eg);

    const int steps = kTrain / kBatch;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      auto e0 = std::chrono::steady_clock::now();
      double total = 0;
      for (int s = 0; s < steps; ++s) {
        total += trainer.step(
            {{"x", batch_images(train, s * kBatch)}, {"y", batch_onehot(train, s * kBatch)}});
        progress(s + 1, steps, total / (s + 1));
      }
      int correct = 0;
      for (int s = 0; s < kTest / kBatch; ++s) {
        std::vector<Tensor> args{batch_images(test, s * kBatch)};
        for (const char* p : {"conv1.w", "conv1.b", "conv2.w", "conv2.b", "fc.w", "fc.b"})
          args.push_back(trainer.parameter(p));
        const Tensor logits = evaluate(args)[0];
        for (int i = 0; i < kBatch; ++i) {
          int best = 0;
          for (int c = 1; c < kClasses; ++c) {
            if (logits.load(i * kClasses + c) > logits.load(i * kClasses + best)) best = c;
          }
          correct += best == test.labels[static_cast<size_t>(s * kBatch + i)];
        }
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e0).count();
      std::printf("%sepoch %2d/%d  loss %.4f  test accuracy %5.1f%%  (%.0f ms, %.2f ms/step)\n",
                  isatty(fileno(stdout)) ? "\r\033[K" : "", epoch, epochs, total / steps,
                  100.0 * correct / kTest, ms, ms / steps);
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
