// Runs a server binary (deferq or a reference redis-server) as a child process for one test:
// a free loopback port, an optional temporary config file, a bounded wait until it accepts
// connections, and SIGTERM-then-SIGKILL when the test is done with it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace deferq::testing {

using namespace std::chrono_literals;

// The deferq binary under test, from $DEFERQ_BIN (meson passes it); "" when unset.
std::string DeferqBinary();
// The reference Redis: $REDIS_SERVER_BIN, else "redis-server" from $PATH.
std::string RedisServerBinary();

// A loopback TCP port that was free a moment ago (bound to port 0, read back, closed).
uint16_t FreeLoopbackPort();

// Resident set size of a process in KiB (VmRSS in /proc/PID/status), or -1.
long VmRssKiB(pid_t pid);

struct DeferqOptions {
  int threads = 2;
  uint16_t port = 0;  // 0: a free loopback port chosen now
  // TOML written to a temporary file and passed with --config when not empty.
  std::string config_toml;
  std::vector<std::string> extra_args;
};

// Options for a server started with this config file content.
inline DeferqOptions WithConfig(std::string config_toml) {
  DeferqOptions options;
  options.config_toml = std::move(config_toml);
  return options;
}

// The config naming the redis-server on `redis_port` as the default pool.
inline std::string DefaultPoolToml(uint16_t redis_port) {
  return "[pools.default]\naddr = \"redis://127.0.0.1:" + std::to_string(redis_port) + "\"\n";
}

class ServerProcess {
 public:
  // Start a server and wait (at most ~10 s) until it accepts connections. On failure they record
  // a GoogleTest failure (with the server's log) and return nullptr; use ASSERT_NE(..., nullptr).
  static std::unique_ptr<ServerProcess> StartDeferq(const DeferqOptions& options = {});
  static std::unique_ptr<ServerProcess> StartRedis(const std::vector<std::string>& extra_args = {});

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  // Stops the server if it still runs: SIGTERM, then SIGKILL after 5 s. Prints the tail of its
  // log when the current test has failed.
  ~ServerProcess();

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  long RssKiB() const { return VmRssKiB(pid_); }

  // True while the child has not exited (reaps it when it has).
  bool Running();
  void Signal(int signal_number);
  // Waits for the child to exit; returns its wait status, or nullopt if it still runs.
  std::optional<int> WaitForExit(std::chrono::milliseconds timeout);
  // The wait status once the child has exited.
  std::optional<int> wait_status() const { return wait_status_; }

  // What the server wrote to stdout and stderr so far.
  std::string Log() const;

 private:
  ServerProcess() = default;
  static std::unique_ptr<ServerProcess> Launch(const std::string& binary,
                                               std::vector<std::string> args, uint16_t port,
                                               std::filesystem::path dir);
  bool WaitUntilAccepting(std::chrono::milliseconds timeout);

  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::filesystem::path dir_;  // temporary directory: config file and log
  std::optional<int> wait_status_;
};

// Describes a wait status: "exited with code 0", "killed by signal 9".
std::string DescribeWaitStatus(std::optional<int> status);
bool ExitedWithCode(std::optional<int> status, int code);

struct CommandResult {
  std::optional<int> wait_status;  // nullopt when it had to be killed after the timeout
  std::string output;              // stdout and stderr together
};

// Runs the binary to completion with a bound on its run time (for --version, --check-config).
CommandResult RunToCompletion(const std::string& binary, const std::vector<std::string>& args,
                              std::chrono::milliseconds timeout = 10s);

// A fresh temporary directory (removed by the caller).
std::filesystem::path MakeTempDir();

}  // namespace deferq::testing
