#include "server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace deferq::testing {

namespace {

// Set once, before any test runs, for every test file linked into the binary:
// - clients write to sockets the server may already have closed; that must be an EPIPE error
//   the test can assert on, not a signal that kills the test binary;
// - a thousand concurrent connections need more descriptors than the usual soft limit of 1024,
//   in this process and in the servers it starts (they inherit the limit).
const bool kTestProcessPrepared = [] {
  ::signal(SIGPIPE, SIG_IGN);
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  return true;
}();

constexpr auto kStartTimeout = 10s;
constexpr auto kStopTimeout = 5s;

bool CanConnect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// In the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void ExecChild(const std::string& binary, const std::vector<std::string>& args,
                            const std::filesystem::path& log_path) {
  // Die with the test binary, so a crashed test never leaves a server holding a port.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  int devnull = ::open("/dev/null", O_RDONLY);
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (devnull < 0 || log < 0) ::_exit(126);
  ::dup2(devnull, STDIN_FILENO);
  ::dup2(log, STDOUT_FILENO);
  ::dup2(log, STDERR_FILENO);
  // The test's own client sockets must not live on in the server, or closing them in the test
  // would not close the connection.
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
    for (int fd = 3; fd < 65536; ++fd) ::close(fd);
  }
  // Ignored signals survive exec: give the server the defaults it would get from a shell.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execvp(binary.c_str(), argv.data());
  ::_exit(127);
}

pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
            const std::filesystem::path& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) ExecChild(binary, args, log_path);
  return pid;
}

// Waits for `pid` with a bound; returns its wait status or nullopt if it still runs.
std::optional<int> WaitPid(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(5ms);
  }
}

std::string Tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

}  // namespace

std::string DeferqBinary() {
  const char* path = std::getenv("DEFERQ_BIN");
  return path ? path : "";
}

std::string RedisServerBinary() {
  const char* path = std::getenv("REDIS_SERVER_BIN");
  return path && *path ? path : "redis-server";
}

uint16_t FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

long VmRssKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

std::filesystem::path MakeTempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "deferq-it-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) return {};
  return pattern;
}

std::unique_ptr<ServerProcess> ServerProcess::StartDeferq(const DeferqOptions& options) {
  std::string binary = DeferqBinary();
  if (binary.empty()) {
    ADD_FAILURE() << "DEFERQ_BIN is not set: run through `meson test` or export it";
    return nullptr;
  }
  std::filesystem::path dir = MakeTempDir();
  uint16_t port = options.port != 0 ? options.port : FreeLoopbackPort();
  std::vector<std::string> args = {"--port", std::to_string(port), "--threads",
                                   std::to_string(options.threads)};
  if (!options.config_toml.empty()) {
    std::filesystem::path config = dir / "deferq.toml";
    std::ofstream(config) << options.config_toml;
    args.push_back("--config");
    args.push_back(config.string());
  }
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  return Launch(binary, std::move(args), port, std::move(dir));
}

std::unique_ptr<ServerProcess> ServerProcess::StartRedis(
    const std::vector<std::string>& extra_args) {
  std::filesystem::path dir = MakeTempDir();
  uint16_t port = FreeLoopbackPort();
  std::vector<std::string> args = {
      "--port", std::to_string(port), "--bind", "127.0.0.1", "--save",
      "",       "--appendonly",       "no",     "--dir",     dir.string()};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return Launch(RedisServerBinary(), std::move(args), port, std::move(dir));
}

std::unique_ptr<ServerProcess> ServerProcess::Launch(const std::string& binary,
                                                     std::vector<std::string> args, uint16_t port,
                                                     std::filesystem::path dir) {
  if (dir.empty() || port == 0) {
    ADD_FAILURE() << "cannot create a temporary directory or find a free port";
    return nullptr;
  }
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->dir_ = std::move(dir);
  server->port_ = port;
  server->pid_ = Spawn(binary, args, server->dir_ / "server.log");
  if (server->pid_ < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return nullptr;
  }
  if (!server->WaitUntilAccepting(kStartTimeout)) {
    std::string command = binary;
    for (const std::string& arg : args) command += " '" + arg + "'";
    ADD_FAILURE() << "server did not accept connections on 127.0.0.1:" << port << " ("
                  << DescribeWaitStatus(server->wait_status_) << "): " << command
                  << "\n--- server log ---\n"
                  << Tail(server->Log(), 4000);
    return nullptr;
  }
  return server;
}

bool ServerProcess::WaitUntilAccepting(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!Running()) return false;
    if (CanConnect(port_)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

ServerProcess::~ServerProcess() {
  if (Running()) {
    Signal(SIGTERM);
    if (!WaitForExit(kStopTimeout)) {
      Signal(SIGKILL);
      WaitForExit(kStopTimeout);
    }
  }
  if (::testing::Test::HasFailure()) {
    std::fprintf(stderr, "--- log of server pid %d port %u (%s) ---\n%s\n--- end of log ---\n",
                 pid_, port_, DescribeWaitStatus(wait_status_).c_str(), Tail(Log(), 4000).c_str());
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

bool ServerProcess::Running() {
  if (wait_status_) return false;
  int status = 0;
  pid_t done = ::waitpid(pid_, &status, WNOHANG);
  if (done == pid_) {
    wait_status_ = status;
    return false;
  }
  return true;
}

void ServerProcess::Signal(int signal_number) {
  if (!wait_status_) ::kill(pid_, signal_number);
}

std::optional<int> ServerProcess::WaitForExit(std::chrono::milliseconds timeout) {
  if (!wait_status_) wait_status_ = WaitPid(pid_, timeout);
  return wait_status_;
}

std::string ServerProcess::Log() const { return ReadFile(dir_ / "server.log"); }

std::string DescribeWaitStatus(std::optional<int> status) {
  if (!status) return "still running";
  if (WIFEXITED(*status)) return "exited with code " + std::to_string(WEXITSTATUS(*status));
  if (WIFSIGNALED(*status)) return "killed by signal " + std::to_string(WTERMSIG(*status));
  return "wait status " + std::to_string(*status);
}

bool ExitedWithCode(std::optional<int> status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

CommandResult RunToCompletion(const std::string& binary, const std::vector<std::string>& args,
                              std::chrono::milliseconds timeout) {
  CommandResult result;
  std::filesystem::path dir = MakeTempDir();
  std::filesystem::path log = dir / "output.log";
  pid_t pid = Spawn(binary, args, log);
  if (pid < 0) return result;
  result.wait_status = WaitPid(pid, timeout);
  if (!result.wait_status) {
    ::kill(pid, SIGKILL);
    WaitPid(pid, kStopTimeout);
  }
  result.output = ReadFile(log);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return result;
}

}  // namespace deferq::testing
