// The dependency engine, both implementations through one suite: ordering (a randomized
// property test), concurrency of readers, priorities, failures, deletion and shutdown.
#include <gtest/gtest.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "runtime/engine/engine.h"
#include "runtime/engine/parallel_for.h"
#include "runtime/engine/shared_job.h"
#include "runtime/engine/worker_pool.h"
#include "tests/helpers.h"
#include "util/error.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;

class EngineTest : public ::testing::TestWithParam<EngineKind> {
 protected:
  std::unique_ptr<Engine> make(int workers = 2) { return make_engine(GetParam(), workers); }
  bool threaded() const { return GetParam() == EngineKind::kThreaded; }
};

// Thousands of random functions over a few dozen variables, each logging when it started
// and ended. Every pair that conflicts (shares a variable, one writing it) must have run
// in push order: the earlier one ended before the later one started.
TEST_P(EngineTest, ConflictingFunctionsRunInPushOrder) {
  auto engine = make(4);
  constexpr int kVars = 24, kFns = 3000;
  std::vector<VarHandle> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(engine->new_var("v" + std::to_string(i)));
  std::mt19937 rng(42);
  struct Record {
    std::set<int> reads, writes;
    int64_t started = -1, ended = -1;
  };
  std::vector<Record> log(kFns);
  std::atomic<int64_t> clock{0};
  for (int f = 0; f < kFns; ++f) {
    std::vector<VarHandle> reads, writes;
    int nr = static_cast<int>(rng() % 4), nw = static_cast<int>(rng() % 3);
    for (int i = 0; i < nr; ++i) {
      int v = static_cast<int>(rng() % kVars);
      reads.push_back(vars[static_cast<size_t>(v)]);
      log[static_cast<size_t>(f)].reads.insert(v);
    }
    for (int i = 0; i < nw; ++i) {
      int v = static_cast<int>(rng() % kVars);
      writes.push_back(vars[static_cast<size_t>(v)]);
      log[static_cast<size_t>(f)].writes.insert(v);
    }
    if (rng() % 10 == 0 && !writes.empty()) reads.push_back(writes.front());  // read and written
    if (rng() % 10 == 0 && !reads.empty()) reads.push_back(reads.front());    // listed twice
    bool spin = rng() % 8 == 0;
    Record* rec = &log[static_cast<size_t>(f)];
    auto body = [rec, &clock, spin] {
      rec->started = clock.fetch_add(1);
      if (spin) std::this_thread::sleep_for(std::chrono::microseconds(50));
      rec->ended = clock.fetch_add(1);
    };
    if (f % 5 == 0) {
      engine->push_async(
          [body](const Engine::OnComplete& done) {
            body();
            std::thread([done] { done(nullptr); }).detach();  // completes from another thread
          },
          reads, writes, PushOptions{"f" + std::to_string(f), static_cast<int>(rng() % 3)});
    } else {
      engine->push(body, reads, writes,
                   PushOptions{"f" + std::to_string(f), static_cast<int>(rng() % 3)});
    }
  }
  engine->wait_for_all();
  int conflicts = 0;
  for (int a = 0; a < kFns; ++a) {
    const Record& ra = log[static_cast<size_t>(a)];
    ASSERT_GE(ra.ended, 0) << "function " << a << " never ran";
    for (int b = a + 1; b < kFns; ++b) {
      const Record& rb = log[static_cast<size_t>(b)];
      auto touches = [](const Record& r, int v) { return r.reads.count(v) || r.writes.count(v); };
      bool conflict = false;
      for (int v : ra.writes) conflict = conflict || touches(rb, v);
      for (int v : rb.writes) conflict = conflict || touches(ra, v);
      if (!conflict) continue;
      ++conflicts;
      ASSERT_LT(ra.ended, rb.started)
          << "functions " << a << " and " << b << " conflict but overlapped or reordered";
    }
  }
  EXPECT_GT(conflicts, 10000);
}

TEST_P(EngineTest, HigherPriorityRunsFirstAmongReadyFunctions) {
  auto engine = make(1);
  VarHandle gate = engine->new_var("gate");
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  std::vector<int> order;
  std::mutex m;
  if (threaded()) {
    // Hold the one worker, and only queue the others once it is really held: otherwise
    // the worker could pick a higher-priority function before the gate.
    std::promise<void> held;
    engine->push(
        [opened, &held] {
          held.set_value();
          opened.wait();
        },
        {}, {gate}, PushOptions{"gate"});
    held.get_future().wait();
  }
  for (int p : {1, 5, 3}) {
    VarHandle own = engine->new_var();
    engine->push(
        [&, p] {
          std::lock_guard lock(m);
          order.push_back(p);
        },
        {}, {own}, PushOptions{"p" + std::to_string(p), p});
  }
  open.set_value();
  engine->wait_for_all();
  if (threaded()) {
    EXPECT_EQ(order, (std::vector<int>{5, 3, 1}));
  } else {
    EXPECT_EQ(order, (std::vector<int>{1, 5, 3}));  // naive: push order
  }
}

TEST_P(EngineTest, AnErrorReachesWhatDependsOnItIsRethrownOnceAndTheEngineGoesOn) {
  auto engine = make();
  VarHandle a = engine->new_var("a"), b = engine->new_var("b"), c = engine->new_var("c");
  std::atomic<int> ran{0};
  engine->push([] { throw UserError("boom in producer"); }, {}, {a}, PushOptions{"producer"});
  engine->push([&] { ++ran; }, {a}, {b}, PushOptions{"reader of a"});  // skipped, b inherits
  engine->push([&] { ++ran; }, {b}, {c}, PushOptions{"reader of b"});  // skipped, c inherits
  VarHandle free_var = engine->new_var("independent");
  engine->push([&] { ran += 10; }, {}, {free_var}, PushOptions{"independent"});
  try {
    engine->wait_for_var(c);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "boom in producer");
  }
  EXPECT_EQ(ran.load(), 10);
  EXPECT_NO_THROW(engine->wait_for_var(a));  // the same error is rethrown once only
  EXPECT_NO_THROW(engine->wait_for_all());
  // Fully usable after: c was cleared by its wait, and a, b by wait_for_all.
  engine->push([&] { ++ran; }, {a, b, c}, {a});
  engine->wait_for_all();
  EXPECT_EQ(ran.load(), 11);
  // wait_for_all alone rethrows, once.
  engine->push([] { throw std::runtime_error("second"); }, {}, {b});
  EXPECT_THROW(engine->wait_for_all(), std::runtime_error);
  EXPECT_NO_THROW(engine->wait_for_all());
  // An async function's error passed to on_complete travels the same way.
  engine->push_async(
      [](const Engine::OnComplete& done) { done(std::make_exception_ptr(UserError("async"))); }, {},
      {c});
  EXPECT_THROW(engine->wait_for_var(c), UserError);
}

TEST_P(EngineTest, DuplicatesAndReadWriteOfOneVariableDoNotDeadlock) {
  auto engine = make();
  VarHandle v = engine->new_var("v");
  int x = 0;
  engine->push([&] { ++x; }, {v, v}, {v, v});
  engine->push([&] { ++x; }, {v}, {v});
  engine->push([&] { ++x; }, {v, v, v}, {});
  engine->wait_for_var(v);
  EXPECT_EQ(x, 3);
}

TEST_P(EngineTest, WaitingInsideAPushedFunctionThrowsInsteadOfDeadlocking) {
  auto engine = make();
  VarHandle v = engine->new_var("v");
  engine->push([&] { engine->wait_for_all(); }, {}, {v}, PushOptions{"waits"});
  std::string msg = testing::error_of([&] { engine->wait_for_var(v); });
  EXPECT_NE(msg.find("wait_for_all called from inside a pushed function"), std::string::npos)
      << msg;
  engine->push([&] { engine->wait_for_var(v); }, {}, {}, PushOptions{"waits too"});
  EXPECT_NE(
      testing::error_of([&] { engine->wait_for_all(); }).find("wait_for_var called from inside"),
      std::string::npos);
}

TEST_P(EngineTest, DeleteTakesEffectAfterPendingUses) {
  auto engine = make();
  VarHandle v = engine->new_var("doomed");
  std::atomic<int> uses{0};
  for (int i = 0; i < 50; ++i) {
    engine->push(
        [&] {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          ++uses;
        },
        {v}, {});
  }
  engine->delete_var(v);
  EXPECT_NE(testing::error_of([&] {
              engine->push([] {}, {v}, {}, PushOptions{"late"});
            }).find("after delete_var"),
            std::string::npos);
  engine->wait_for_all();
  EXPECT_EQ(uses.load(), 50);
}

TEST_P(EngineTest, ShutdownRunsWhatWasPushed) {
  std::atomic<int> ran{0};
  {
    auto engine = make();
    VarHandle v = engine->new_var();
    for (int i = 0; i < 200; ++i) engine->push([&] { ++ran; }, {}, {v});
    engine->push([] { throw std::runtime_error("nobody waits for this"); }, {}, {v});
  }
  EXPECT_EQ(ran.load(), 200);
}

INSTANTIATE_TEST_SUITE_P(BothEngines, EngineTest,
                         ::testing::Values(EngineKind::kThreaded, EngineKind::kNaive),
                         [](const auto& info) {
                           return info.param == EngineKind::kThreaded ? "threaded" : "naive";
                         });

// Threaded only: the naive engine runs one function at a time by design.
TEST(ThreadedEngine, ReadersOfOneVariableRunConcurrently) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  VarHandle v = engine->new_var("shared");
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  auto reader = [&] {
    inside.fetch_add(1);
    for (int i = 0; i < 2000 && !overlapped; ++i) {
      if (inside.load() == 2) overlapped = true;
      std::this_thread::sleep_for(1ms);
    }
    inside.fetch_sub(1);
  };
  engine->push(reader, {v}, {});
  engine->push(reader, {v}, {});
  engine->wait_for_all();
  EXPECT_TRUE(overlapped);
}

// How many of the pool's workers poll once that count has held for 20 ms (5 s at most).
int settled_pollers(WorkerPool& pool, int expected) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (pool.polling() != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(20ms);
  return pool.polling();
}

// Pollers, running workers and callers running steps stay within the core count: a caller
// that takes a core while two workers poll on two cores ends one poll, and only one.
TEST(WorkerPool, ACallerTakingACoreEndsOnlyTheSurplusPoll) {
  WorkerPool pool(2, /*cores=*/2, /*spin=*/30s);
  ASSERT_EQ(settled_pollers(pool, 2), 2);
  {
    WorkerPool::CallerBusy caller;
    EXPECT_EQ(settled_pollers(pool, 1), 1);
    WorkerPool::CallerBusy nested;  // the same thread holds the same core
    EXPECT_EQ(settled_pollers(pool, 1), 1);
  }
  // The poller left takes a task without a wake-up.
  std::promise<void> ran;
  pool.submit([&] { ran.set_value(); }, 0);
  EXPECT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
}

// A worker running a task is counted already: a split step it runs (parallel_for takes a
// CallerBusy) must not also count as a caller, or the other worker would stop polling.
TEST(WorkerPool, AWorkersOwnCallerBusyTakesNoSecondCore) {
  WorkerPool pool(2, /*cores=*/2, /*spin=*/30s);
  ASSERT_EQ(settled_pollers(pool, 2), 2);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> inside;
  pool.submit(
      [&, released] {
        WorkerPool::CallerBusy busy;
        inside.set_value();
        released.wait();
      },
      0);
  ASSERT_EQ(inside.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(settled_pollers(pool, 1), 1);
  release.set_value();
}

// Wake-ups are what a profile counts per run: a sleeping worker woken for a task is one, a
// polling worker that takes a task is none.
TEST(WorkerPool, CountsWakeUpsOfSleepingWorkersOnly) {
  auto run_one = [](WorkerPool& pool) {
    std::promise<void> ran;
    pool.submit([&] { ran.set_value(); }, 0);
    ASSERT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
  };
  {
    WorkerPool sleeper(1, /*cores=*/1, /*spin=*/0us);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (sleeper.sleeping() != 1 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    ASSERT_EQ(sleeper.sleeping(), 1);
    const int64_t before = WorkerPool::wakeups();
    run_one(sleeper);
    EXPECT_GE(WorkerPool::wakeups() - before, 1);
  }
  WorkerPool poller(1, /*cores=*/1, /*spin=*/30s);
  ASSERT_EQ(settled_pollers(poller, 1), 1);
  const int64_t before = WorkerPool::wakeups();
  run_one(poller);
  EXPECT_EQ(WorkerPool::wakeups() - before, 0);
}

// A job offered to the pool (parallel_for's split parts) is joined by a polling worker
// straight from the slot; with no poller, or the slot held by another job, the offer is
// refused (the caller queues a task instead, which wakes a sleeper).
TEST(WorkerPool, AnOfferedJobIsJoinedByAPollerAndRefusedWithoutOne) {
  struct Job final : SharedJob {
    std::promise<std::thread::id> joined;
    std::atomic<int> joins{0};
    void join() override {
      if (joins.fetch_add(1) == 0) joined.set_value(std::this_thread::get_id());
    }
  };
  WorkerPool poller(1, /*cores=*/2, /*spin=*/30s);
  ASSERT_EQ(settled_pollers(poller, 1), 1);
  Job job, other;
  ASSERT_TRUE(poller.offer(&job));
  EXPECT_FALSE(poller.offer(&other));  // one job at a time
  auto joined = job.joined.get_future();
  ASSERT_EQ(joined.wait_for(5s), std::future_status::ready);
  EXPECT_NE(joined.get(), std::this_thread::get_id());
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(job.joins.load(), 1);  // once per offer, however long it stays in the slot
  poller.withdraw(&job);
  EXPECT_TRUE(poller.offer(&other));  // the slot is free again
  poller.withdraw(&other);

  WorkerPool sleeper(1, /*cores=*/1, /*spin=*/0us);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (sleeper.sleeping() != 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_EQ(sleeper.sleeping(), 1);
  Job unseen;
  EXPECT_FALSE(sleeper.offer(&unseen));
}

// A poller that finds itself on the core its jobs come from moves to another core (the
// scheduler left such a poller there for ~100 ms, taking the caller's time): here the
// caller pins itself to the poller's core and offers again; the poller must join from
// another core, and nothing stays pinned.
TEST(WorkerPool, APollerOnItsCallersCoreMovesOff) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one core: nowhere to move";
  struct Job final : SharedJob {
    std::promise<int> cpu;
    std::atomic<int> joins{0};
    void join() override {
      if (joins.fetch_add(1) == 0) cpu.set_value(sched_getcpu());
    }
  };
  WorkerPool pool(1, /*cores=*/2, /*spin=*/30s);
  ASSERT_EQ(settled_pollers(pool, 1), 1);
  Job first;
  ASSERT_TRUE(pool.offer(&first));
  auto where = first.cpu.get_future();
  ASSERT_EQ(where.wait_for(5s), std::future_status::ready);
  const int poller_cpu = where.get();
  pool.withdraw(&first);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(poller_cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const int64_t moves = WorkerPool::moves();
  Job second;
  ASSERT_TRUE(pool.offer(&second));  // from the poller's core
  auto then = second.cpu.get_future();
  const bool joined = then.wait_for(5s) == std::future_status::ready;
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
  pool.withdraw(&second);
  ASSERT_TRUE(joined);
  EXPECT_NE(then.get(), poller_cpu);
  EXPECT_GE(WorkerPool::moves() - moves, 1);
}

// Thousands of split steps back to back, as a run of small steps makes them: every part
// runs exactly once, workers take some of them, an error in any part reaches the caller,
// and nothing hangs (a job ends while a worker may still be reading the slot it sat in,
// and the next one is made at the same address).
TEST(ParallelFor, BackToBackSplitStepsRunEveryPartOnceAndRethrow) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  auto body = [&] {
    const auto caller = std::this_thread::get_id();
    int64_t on_workers = 0;
    for (int step = 0; step < 20000; ++step) {
      const int n = 2 + step % 3;
      std::atomic<int> runs[4] = {0, 0, 0, 0};
      std::atomic<int> elsewhere{0};
      parallel_for(
          *engine, n,
          [&](int part) {
            runs[part].fetch_add(1);
            if (std::this_thread::get_id() != caller) elsewhere.fetch_add(1);
            // A few microseconds of work, as a small step's part takes: long enough for
            // a worker to join.
            const auto until = std::chrono::steady_clock::now() + 3us;
            while (std::chrono::steady_clock::now() < until) {
            }
          },
          "step");
      for (int p = 0; p < n; ++p) ASSERT_EQ(runs[p].load(), 1) << "step " << step << " part " << p;
      on_workers += elsewhere.load();
    }
    EXPECT_GT(on_workers, 0);
    for (int step = 0; step < 200; ++step) {
      EXPECT_EQ(testing::error_of([&] {
                  parallel_for(
                      *engine, 2,
                      [&](int part) {
                        if (part == 1) throw UserError("part 1 failed");
                      },
                      "step");
                }),
                "part 1 failed");
    }
  };
  auto done = std::async(std::launch::async, body);
  ASSERT_EQ(done.wait_for(120s), std::future_status::ready) << "parallel_for hung";
  done.get();
}

TEST(Engine, KindFromEnvironment) {
  ::setenv("KILN_ENGINE", "naive", 1);
  EXPECT_STREQ(make_engine()->kind(), "naive");
  ::setenv("KILN_ENGINE", "threaded", 1);
  EXPECT_STREQ(make_engine()->kind(), "threaded");
  ::setenv("KILN_ENGINE", "turbo", 1);
  EXPECT_EQ(testing::error_of([] { make_engine(); }),
            "KILN_ENGINE: 'turbo' is not an engine (threaded or naive)");
  ::unsetenv("KILN_ENGINE");
  ::setenv("KILN_ENGINE_WORKERS", "zero", 1);
  EXPECT_NE(testing::error_of([] { make_engine(); }).find("KILN_ENGINE_WORKERS: 'zero'"),
            std::string::npos);
  ::unsetenv("KILN_ENGINE_WORKERS");
}

}  // namespace
}  // namespace kiln
