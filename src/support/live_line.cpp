#include "live_line.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

namespace qbc::live_line {
namespace {

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void write_line(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// One heartbeat (the line is stamped). Callers hold s.mu.
void beat_locked(State& s) {
  stamp_locked(s);
  if (s.display == Display::kJson) {
    const std::string& stage = s.line.unit.empty() ? s.line.stage : s.line.unit;
    write_line(progress_event(s.line, stage, /*heartbeat=*/true).dump() + "\n");
  } else {
    write_line("[progress] " + progress::format(s.line) + "\n");
  }
}

// What the ticker does on waking; returns how long it may sleep next (seconds).
double tick() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active) return 1.0;
  if (s.display == Display::kTerminal) {
    if (s.shown && since(s.drawn) >= 0.9) draw_locked(s);
    return 1.0;
  }
  const double now = since(s.start);
  if (s.heartbeat.due(now)) {
    beat_locked(s);
    s.heartbeat.restart(now);
  }
  // At most a second: a line that becomes active, or a shorter interval, is seen soon.
  return std::min(1.0, s.heartbeat.wait(now, 1.0));
}

// The thread behind tick(): started on first use, stopped and joined at exit.
class Ticker {
 public:
  ~Ticker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void ensure_started() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { loop(); });
  }

 private:
  void loop() {
    double wait = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::duration<double>(wait), [this] { return stop_; });
      if (stop_) break;
      lock.unlock();
      wait = tick();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

Ticker& ticker() {
  state();  // constructed first, so destroyed after the ticker's thread is joined
  static Ticker t;
  return t;
}

}  // namespace

State& state() {
  static State s;
  return s;
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void configure_locked(State& s, Display display) {
  s.display = display;
  s.start = Clock::now();
}

void stamp_locked(State& s) {
  s.line.seconds = since(s.start);
  s.line.step_seconds = since(s.work_start);
}

void draw_locked(State& s) {
  stamp_locked(s);
  write_line("\r" + progress::format(s.line) + "\033[K");
  s.shown = true;
  s.drawn = Clock::now();
}

void clear_locked(State& s) {
  if (!s.shown) return;
  write_line("\r\033[K");
  s.shown = false;
}

void activate_locked(State& s) {
  if (s.active) return;
  s.active = true;
  s.heartbeat.restart(since(s.start));
  const bool ticks = s.display == Display::kTerminal ||
                     ((s.display == Display::kHeartbeat || s.display == Display::kJson) &&
                      s.heartbeat.interval() > 0);
  if (ticks) ticker().ensure_started();
}

void finish_locked(State& s) {
  clear_locked(s);
  s.line = progress::Line{};
  s.active = false;
}

nlohmann::json progress_event(const progress::Line& l, std::string_view stage, bool heartbeat) {
  nlohmann::json j = {{"event", "progress"}, {"time", unix_seconds()}, {"stage", stage}};
  if (l.total > 0) {
    j["done"] = l.done;
    j["total"] = l.total;
    if (const double r = progress::rate(l); r > 0) j["rate_per_s"] = r;
  }
  if (l.steps > 0) {
    j["step"] = l.step;
    j["steps"] = l.steps;
    j["pass"] = l.pass;
  }
  j["elapsed_s"] = l.seconds;
  if (const double left = progress::remaining_seconds(l); left >= 0) j["remaining_s"] = left;
  if (heartbeat) j["heartbeat"] = true;
  return j;
}

}  // namespace qbc::live_line

namespace qbc::progress {

void set_heartbeat_interval(double seconds) {
  live_line::State& s = live_line::state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.heartbeat = Heartbeat(seconds);
  if (s.active) s.heartbeat.restart(live_line::since(s.start));
}

}  // namespace qbc::progress
