// Configuration: defaults, every TOML key, command-line precedence, and the exact text of errors
// (file, line and key).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "config/load.h"

namespace deferq {
namespace {

// A standalone pool, as [pools.NAME] addr = ADDR would give.
PoolConfig Standalone(const std::string& name, const std::string& addr) {
  PoolConfig pool;
  pool.name = name;
  pool.addr = addr;
  return pool;
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "deferq_config_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Writes `text` to a file in the test's directory and returns its path.
  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // Runs ParseCommandLine on {"deferq", args...} against a fresh Config.
  bool Parse(std::initializer_list<std::string> args) {
    std::vector<const char*> argv = {"deferq"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    cfg_ = Config{};
    error_.clear();
    action_ = CliAction::kRun;
    return ParseCommandLine(static_cast<int>(argv.size()), argv.data(), &cfg_, &action_, &error_);
  }

  // Loads `text` as file "test.toml" via the command line and returns the error ("" on success).
  std::string FileError(const std::string& text) {
    std::string path = WriteFile("test.toml", text);
    if (Parse({"--config", path})) return "";
    return error_;
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  const PoolConfig* FindPool(const std::string& name) const {
    for (const PoolConfig& pool : cfg_.pools) {
      if (pool.name == name) return &pool;
    }
    return nullptr;
  }

  std::string dir_;
  Config cfg_;
  CliAction action_ = CliAction::kRun;
  std::string error_;
};

// ---- Defaults ----------------------------------------------------------------------------------

TEST_F(ConfigTest, DefaultConfigHoldsTheSpecDefaults) {
  Config cfg;
  EXPECT_EQ(cfg.listen_host, "127.0.0.1");
  EXPECT_EQ(cfg.listen_port, 6380);
  EXPECT_EQ(cfg.threads, 0);
  EXPECT_EQ(cfg.metrics_listen, "127.0.0.1:9380");
  EXPECT_EQ(cfg.max_clients, 10000u);
  EXPECT_EQ(cfg.max_payload, 1048576u);
  EXPECT_EQ(cfg.max_args, 1048576u);
  EXPECT_EQ(cfg.max_bulk_len, 8388608u);
  EXPECT_FALSE(cfg.auth_required);
  EXPECT_EQ(cfg.admin_password_env, "DEFERQ_ADMIN_PASSWORD");
  EXPECT_EQ(cfg.default_ttl, 86400u);
  EXPECT_EQ(cfg.default_tries, 1u);
  EXPECT_EQ(cfg.default_ttr, 120u);
  EXPECT_EQ(cfg.metrics_max_queues, 1000u);
  EXPECT_TRUE(cfg.pools.empty());
}

TEST_F(ConfigTest, NoArgumentsServesOn6380AgainstDefaultPoolAt6379) {
  ASSERT_TRUE(Parse({})) << error_;
  EXPECT_EQ(action_, CliAction::kRun);
  EXPECT_EQ(cfg_.listen_host, "127.0.0.1");
  EXPECT_EQ(cfg_.listen_port, 6380);
  ASSERT_EQ(cfg_.pools.size(), 1u);
  EXPECT_EQ(cfg_.pools[0].name, "default");
  EXPECT_EQ(cfg_.pools[0].addr, "redis://127.0.0.1:6379");
  EXPECT_EQ(cfg_.pools[0].connections_per_thread, 2);
  EXPECT_EQ(cfg_.config_file, "");
}

TEST_F(ConfigTest, DefaultConfigWithDefaultPoolPassesValidation) {
  Config cfg;
  cfg.pools.push_back(Standalone("default", "redis://127.0.0.1:6379"));
  std::string error;
  EXPECT_TRUE(ValidateConfig(cfg, &error)) << error;
}

// ---- Loading every key -------------------------------------------------------------------------

TEST_F(ConfigTest, FileSetsEveryKey) {
  std::string path = WriteFile("full.toml", R"(
[server]
listen = "0.0.0.0:7000"
threads = 4
metrics_listen = "[::1]:9400"
max_clients = 500
max_payload = 2048
max_args = 4096
max_bulk_len = 8192
max_output_buffer = 1000000
max_query_buffer = 2000000
timeout = 300
metrics_max_queues = 50

[auth]
required = true
admin_password_env = "MY_ADMIN_PW"
cache_seconds = 9

[defaults]
ttl = 3600
tries = 5
ttr = 30
timeout = 2.5

[pools.default]
addr = "redis://:pw@10.0.0.1:6379/2"
connections_per_thread = 8
timeout_ms = 250

[pools.clustered]
cluster = ["redis://10.0.1.1:7000", "10.0.1.2:7000"]

[pools.watched]
sentinels = ["10.0.2.1:26379", "[::1]:26379"]
master = "mymaster"
)");
  ASSERT_TRUE(Parse({"--config", path})) << error_;
  EXPECT_EQ(cfg_.config_file, path);
  EXPECT_EQ(cfg_.listen_host, "0.0.0.0");
  EXPECT_EQ(cfg_.listen_port, 7000);
  EXPECT_EQ(cfg_.threads, 4);
  EXPECT_EQ(cfg_.metrics_listen, "[::1]:9400");
  EXPECT_EQ(cfg_.max_clients, 500u);
  EXPECT_EQ(cfg_.max_payload, 2048u);
  EXPECT_EQ(cfg_.max_args, 4096u);
  EXPECT_EQ(cfg_.max_bulk_len, 8192u);
  EXPECT_EQ(cfg_.max_output_buffer, 1000000u);
  EXPECT_EQ(cfg_.max_query_buffer, 2000000u);
  EXPECT_EQ(cfg_.idle_timeout, 300u);
  EXPECT_EQ(cfg_.metrics_max_queues, 50u);
  EXPECT_TRUE(cfg_.auth_required);
  EXPECT_EQ(cfg_.admin_password_env, "MY_ADMIN_PW");
  EXPECT_EQ(cfg_.auth_cache_seconds, 9u);
  EXPECT_EQ(cfg_.default_ttl, 3600u);
  EXPECT_EQ(cfg_.default_tries, 5u);
  EXPECT_EQ(cfg_.default_ttr, 30u);
  EXPECT_DOUBLE_EQ(cfg_.default_timeout, 2.5);

  ASSERT_EQ(cfg_.pools.size(), 3u);
  const PoolConfig* def = FindPool("default");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->addr, "redis://:pw@10.0.0.1:6379/2");
  EXPECT_EQ(def->connections_per_thread, 8);
  EXPECT_EQ(def->timeout_ms, 250);
  const PoolConfig* clustered = FindPool("clustered");
  ASSERT_NE(clustered, nullptr);
  EXPECT_EQ(clustered->addr, "");
  EXPECT_EQ(clustered->cluster,
            (std::vector<std::string>{"redis://10.0.1.1:7000", "10.0.1.2:7000"}));
  EXPECT_EQ(clustered->connections_per_thread, 2);
  EXPECT_EQ(clustered->timeout_ms, 1000);
  const PoolConfig* watched = FindPool("watched");
  ASSERT_NE(watched, nullptr);
  EXPECT_EQ(watched->sentinels, (std::vector<std::string>{"10.0.2.1:26379", "[::1]:26379"}));
  EXPECT_EQ(watched->master, "mymaster");
}

TEST_F(ConfigTest, QueryBufferLimitNeverFallsBelowOneCommandOfTheLongestBulk) {
  EXPECT_EQ(QueryBufferLimit(Config{}), 64u * 1024 * 1024);
  Config cfg;
  cfg.max_query_buffer = 1;
  cfg.max_bulk_len = 8 * 1024 * 1024;
  EXPECT_EQ(QueryBufferLimit(cfg), 8u * 1024 * 1024 + 64 * 1024);
}

TEST_F(ConfigTest, ListenAcceptsIpv6InBrackets) {
  ASSERT_EQ(FileError("[server]\nlisten = \"[::1]:6390\"\n"), "");
  EXPECT_EQ(cfg_.listen_host, "::1");
  EXPECT_EQ(cfg_.listen_port, 6390);
}

TEST_F(ConfigTest, DefaultsTimeoutAcceptsAnInteger) {
  ASSERT_EQ(FileError("[defaults]\ntimeout = 3\n"), "");
  EXPECT_DOUBLE_EQ(cfg_.default_timeout, 3.0);
}

TEST_F(ConfigTest, LoglevelNamesTheLeastLevelWritten) {
  EXPECT_EQ(Config{}.log_level, base::LogLevel::kInfo);
  ASSERT_EQ(FileError("[server]\nloglevel = \"warning\"\n"), "");
  EXPECT_EQ(cfg_.log_level, base::LogLevel::kWarning);
  ASSERT_EQ(FileError("[server]\nloglevel = \"debug\"\n"), "");
  EXPECT_EQ(cfg_.log_level, base::LogLevel::kDebug);
  EXPECT_EQ(FileError("[server]\nloglevel = \"verbose\"\n"),
            Path("test.toml") +
                ":2: key 'server.loglevel': must be one of debug, info, warning, "
                "error");
  EXPECT_EQ(FileError("[server]\nloglevel = 1\n"),
            Path("test.toml") + ":2: key 'server.loglevel': must be a string, got integer");
}

TEST_F(ConfigTest, KeysAbsentFromTheFileKeepTheirDefaults) {
  ASSERT_EQ(FileError("[server]\nthreads = 2\n"), "");
  EXPECT_EQ(cfg_.threads, 2);
  EXPECT_EQ(cfg_.listen_port, 6380);
  EXPECT_EQ(cfg_.max_payload, 1048576u);
  EXPECT_EQ(cfg_.default_ttr, 120u);
  ASSERT_EQ(cfg_.pools.size(), 1u);
  EXPECT_EQ(cfg_.pools[0].addr, "redis://127.0.0.1:6379");
}

TEST_F(ConfigTest, InlineTablesAreAccepted) {
  ASSERT_EQ(FileError("server = { threads = 3 }\npools.default = { addr = \"h:1\" }\n"), "");
  EXPECT_EQ(cfg_.threads, 3);
  EXPECT_EQ(cfg_.pools[0].addr, "h:1");
}

TEST_F(ConfigTest, LoadConfigStringLayersOnTopOfTheGivenConfig) {
  Config cfg;
  cfg.threads = 7;
  std::string error;
  ASSERT_TRUE(LoadConfigString("[server]\nmax_clients = 3\n", "inline", &cfg, &error)) << error;
  EXPECT_EQ(cfg.threads, 7);
  EXPECT_EQ(cfg.max_clients, 3u);
}

TEST_F(ConfigTest, FailedLoadLeavesTheConfigUnchanged) {
  Config cfg;
  std::string error;
  EXPECT_FALSE(
      LoadConfigString("[server]\nthreads = 9\nmax_clients = 0\n", "inline", &cfg, &error));
  EXPECT_EQ(cfg.threads, 0);
  EXPECT_EQ(cfg.max_clients, 10000u);
}

TEST_F(ConfigTest, PoolInFileReplacesAnEarlierPoolOfTheSameName) {
  Config cfg;
  cfg.pools.push_back(Standalone("default", "a:1"));
  cfg.pools[0].connections_per_thread = 9;
  std::string error;
  ASSERT_TRUE(LoadConfigString("[pools.default]\ncluster = [\"b:2\"]\n", "inline", &cfg, &error))
      << error;
  ASSERT_EQ(cfg.pools.size(), 1u);
  EXPECT_EQ(cfg.pools[0].addr, "");
  EXPECT_EQ(cfg.pools[0].cluster, std::vector<std::string>{"b:2"});
  EXPECT_EQ(cfg.pools[0].connections_per_thread, 2);
}

// ---- Precedence: flags > file > defaults -------------------------------------------------------

TEST_F(ConfigTest, PortFlagAfterConfigBeatsFile) {
  std::string path = WriteFile("c.toml", "[server]\nlisten = \"10.1.1.1:7000\"\n");
  ASSERT_TRUE(Parse({"--config", path, "--port", "7100"})) << error_;
  EXPECT_EQ(cfg_.listen_port, 7100);
  EXPECT_EQ(cfg_.listen_host, "10.1.1.1");  // the flag only replaces the port
}

TEST_F(ConfigTest, PortFlagBeforeConfigStillBeatsFile) {
  std::string path = WriteFile("c.toml", "[server]\nlisten = \"10.1.1.1:7000\"\n");
  ASSERT_TRUE(Parse({"--port", "7100", "--config", path})) << error_;
  EXPECT_EQ(cfg_.listen_port, 7100);
  EXPECT_EQ(cfg_.listen_host, "10.1.1.1");
}

TEST_F(ConfigTest, ThreadsFlagBeatsFileInEitherOrder) {
  std::string path = WriteFile("c.toml", "[server]\nthreads = 4\n");
  ASSERT_TRUE(Parse({"--threads", "2", "--config", path})) << error_;
  EXPECT_EQ(cfg_.threads, 2);
  ASSERT_TRUE(Parse({"--config", path, "--threads", "0"})) << error_;
  EXPECT_EQ(cfg_.threads, 0);
}

TEST_F(ConfigTest, PoolFlagBeforeConfigReplacesClusterPoolFromFileKeepingItsOtherSettings) {
  std::string path = WriteFile("c.toml",
                               "[pools.default]\ncluster = [\"h1:7000\", \"h2:7000\"]\n"
                               "connections_per_thread = 5\n");
  ASSERT_TRUE(Parse({"--pool", "default=redis://127.0.0.2:6400", "--config", path})) << error_;
  ASSERT_EQ(cfg_.pools.size(), 1u);
  EXPECT_EQ(cfg_.pools[0].addr, "redis://127.0.0.2:6400");
  EXPECT_TRUE(cfg_.pools[0].cluster.empty());
  EXPECT_EQ(cfg_.pools[0].connections_per_thread, 5);
}

TEST_F(ConfigTest, PoolFlagReplacesSentinelPoolFromFile) {
  std::string path = WriteFile("c.toml",
                               "[pools.default]\naddr = \"a:1\"\n[pools.jobs]\n"
                               "sentinels = [\"s:26379\"]\nmaster = \"m\"\n"
                               "sentinel_password = \"sp\"\nmaster_password = \"mp\"\n"
                               "wait_replicas = 1\n");
  ASSERT_TRUE(Parse({"--config", path, "--pool=jobs=redis://j:6379"})) << error_;
  const PoolConfig* jobs = FindPool("jobs");
  ASSERT_NE(jobs, nullptr);
  EXPECT_EQ(jobs->addr, "redis://j:6379");
  EXPECT_TRUE(jobs->sentinels.empty());
  EXPECT_EQ(jobs->master, "");
  // The Sentinel credentials go with the Sentinels; the durability choice stays.
  EXPECT_EQ(jobs->sentinel_password, "");
  EXPECT_EQ(jobs->master_password, "");
  EXPECT_EQ(jobs->wait_replicas, 1);
}

TEST_F(ConfigTest, PoolFlagAddsANewPoolNextToThoseInTheFile) {
  std::string path = WriteFile("c.toml", "[pools.default]\naddr = \"a:1\"\n");
  ASSERT_TRUE(Parse({"--config", path, "--pool", "extra=b:2"})) << error_;
  ASSERT_EQ(cfg_.pools.size(), 2u);
  ASSERT_NE(FindPool("extra"), nullptr);
  EXPECT_EQ(FindPool("extra")->addr, "b:2");
  EXPECT_EQ(FindPool("default")->addr, "a:1");
}

TEST_F(ConfigTest, PoolFlagAloneReplacesTheImplicitDefaultPool) {
  ASSERT_TRUE(Parse({"--pool", "default=redis://10.9.9.9:6000"})) << error_;
  ASSERT_EQ(cfg_.pools.size(), 1u);
  EXPECT_EQ(cfg_.pools[0].addr, "redis://10.9.9.9:6000");
}

TEST_F(ConfigTest, PoolFlagCanSupplyTheDefaultPoolAFileLacks) {
  std::string path = WriteFile("c.toml", "[pools.other]\naddr = \"a:1\"\n");
  ASSERT_TRUE(Parse({"--config", path, "--pool", "default=b:2"})) << error_;
  EXPECT_EQ(cfg_.pools.size(), 2u);
}

TEST_F(ConfigTest, LaterFlagBeatsEarlierSameFlag) {
  ASSERT_TRUE(Parse({"--port", "7001", "--port=7002"})) << error_;
  EXPECT_EQ(cfg_.listen_port, 7002);
}

TEST_F(ConfigTest, EqualsFormWorksForEveryValueFlag) {
  std::string path = WriteFile("c.toml", "[server]\nmax_clients = 12\n");
  ASSERT_TRUE(Parse({"--config=" + path, "--port=7005", "--threads=3", "--pool=default=h:9"}))
      << error_;
  EXPECT_EQ(cfg_.max_clients, 12u);
  EXPECT_EQ(cfg_.listen_port, 7005);
  EXPECT_EQ(cfg_.threads, 3);
  EXPECT_EQ(cfg_.pools[0].addr, "h:9");
}

// ---- Actions -----------------------------------------------------------------------------------

TEST_F(ConfigTest, CheckConfigFlagSelectsCheckAction) {
  ASSERT_TRUE(Parse({"--check-config"})) << error_;
  EXPECT_EQ(action_, CliAction::kCheckConfig);
}

TEST_F(ConfigTest, HelpFlagsSelectHelpAction) {
  ASSERT_TRUE(Parse({"--help"}));
  EXPECT_EQ(action_, CliAction::kHelp);
  ASSERT_TRUE(Parse({"-h"}));
  EXPECT_EQ(action_, CliAction::kHelp);
}

TEST_F(ConfigTest, VersionFlagsSelectVersionAction) {
  ASSERT_TRUE(Parse({"--version"}));
  EXPECT_EQ(action_, CliAction::kVersion);
  ASSERT_TRUE(Parse({"-v"}));
  EXPECT_EQ(action_, CliAction::kVersion);
}

TEST_F(ConfigTest, HelpNeedsNoReadableConfigFile) {
  ASSERT_TRUE(Parse({"--config", Path("missing.toml"), "--help"})) << error_;
  EXPECT_EQ(action_, CliAction::kHelp);
}

TEST_F(ConfigTest, UsageTextListsEveryFlagAndTheReference) {
  std::string usage = UsageText();
  for (const char* flag :
       {"--config FILE", "--port N", "--threads N", "--pool NAME=URL", "--check-config", "--help",
        "-h", "--version", "-v", "docs/configuration.md"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
  }
}

// ---- [shards]: sharded queues ------------------------------------------------------------------

TEST_F(ConfigTest, ShardsTableNamesQueuesByNamespace) {
  ASSERT_EQ(FileError("[shards.default]\nhot = 8\ncold = 1\n[shards.billing]\n\"x.y-z\" = 256\n"),
            "");
  const std::map<std::string, int, std::less<>> want = {{"billing/x.y-z", 256}, {"default/hot", 8}};
  EXPECT_EQ(cfg_.queue_shards, want);  // a count of 1 is the unsharded queue: not listed
}

TEST_F(ConfigTest, ShardsErrorsNameFileLineAndKey) {
  EXPECT_EQ(FileError("[shards.default]\nhot = 0\n"),
            Path("test.toml") + ":2: key 'shards.default.hot': must be between 1 and 256, got 0");
  EXPECT_EQ(FileError("[shards.default]\nhot = 257\n"),
            Path("test.toml") + ":2: key 'shards.default.hot': must be between 1 and 256, got 257");
  EXPECT_EQ(FileError("[shards.default]\nhot = \"8\"\n"),
            Path("test.toml") + ":2: key 'shards.default.hot': must be an integer, got string");
  EXPECT_EQ(
      FileError("[shards.default]\n\"a#1\" = 2\n"),
      Path("test.toml") +
          ":2: key 'shards.default.a#1': queue names are 1-200 characters of [A-Za-z0-9_.:-]");
  EXPECT_EQ(FileError("[shards.default]\nTimeout = 2\n"),
            Path("test.toml") +
                ":2: key 'shards.default.Timeout': is not a valid queue name (a CONSUME option)");
  EXPECT_EQ(FileError("[shards]\n\"a b\" = { q = 2 }\n"),
            Path("test.toml") +
                ":2: key 'shards.a b': namespace names are 1-200 characters of [A-Za-z0-9_.:-]");
  EXPECT_EQ(FileError("[shards.admin]\nq = 2\n"),
            Path("test.toml") + ":1: key 'shards.admin': the admin namespace has no queues");
  EXPECT_EQ(FileError("[shards]\ndefault = 2\n"),
            Path("test.toml") + ":2: key 'shards.default': must be a table, got integer");
}

// ---- File errors: FILE:LINE: key 'a.b': what -------------------------------------------------

TEST_F(ConfigTest, UnknownKeyNamesFileLineAndKey) {
  EXPECT_EQ(FileError("[server]\nthreads = 2\nport = 6380\n"),
            Path("test.toml") + ":3: key 'server.port': unknown key");
}

TEST_F(ConfigTest, UnknownTableNamesFileLineAndTable) {
  EXPECT_EQ(FileError("# comment\n\n[serverr]\nthreads = 2\n"),
            Path("test.toml") + ":3: key 'serverr': unknown table");
}

TEST_F(ConfigTest, UnknownTopLevelKeyIsAnError) {
  EXPECT_EQ(FileError("threads = 2\n"), Path("test.toml") + ":1: key 'threads': unknown key");
}

TEST_F(ConfigTest, UnknownPoolKeyIsAnError) {
  EXPECT_EQ(FileError("[pools.default]\naddr = \"a:1\"\nconnections = 3\n"),
            Path("test.toml") + ":3: key 'pools.default.connections': unknown key");
}

TEST_F(ConfigTest, WrongTypeNamesExpectedAndActualType) {
  EXPECT_EQ(FileError("[server]\n\nthreads = \"4\"\n"),
            Path("test.toml") + ":3: key 'server.threads': must be an integer, got string");
  EXPECT_EQ(FileError("[auth]\nrequired = \"yes\"\n"),
            Path("test.toml") + ":2: key 'auth.required': must be a boolean, got string");
  EXPECT_EQ(FileError("[server]\nlisten = 6380\n"),
            Path("test.toml") + ":2: key 'server.listen': must be a string, got integer");
  EXPECT_EQ(FileError("[server]\nmax_payload = 1.5\n"),
            Path("test.toml") + ":2: key 'server.max_payload': must be an integer, got float");
  EXPECT_EQ(FileError("[defaults]\ntimeout = true\n"),
            Path("test.toml") + ":2: key 'defaults.timeout': must be a number, got boolean");
  EXPECT_EQ(FileError("server = 1\n"),
            Path("test.toml") + ":1: key 'server': must be a table, got integer");
  EXPECT_EQ(FileError("[pools]\ndefault = \"a:1\"\n"),
            Path("test.toml") + ":2: key 'pools.default': must be a table, got string");
}

TEST_F(ConfigTest, WrongTypeInsideArrayNamesTheElement) {
  EXPECT_EQ(
      FileError("[pools.default]\ncluster = [\n  \"a:1\",\n  7,\n]\n"),
      Path("test.toml") + ":4: key 'pools.default.cluster[1]': must be a string, got integer");
  EXPECT_EQ(FileError("[pools.default]\ncluster = \"a:1\"\n"),
            Path("test.toml") +
                ":2: key 'pools.default.cluster': must be an array of strings, got string");
}

TEST_F(ConfigTest, OutOfRangeIntegersNameTheRange) {
  EXPECT_EQ(FileError("[defaults]\ntries = 0\n"),
            Path("test.toml") + ":2: key 'defaults.tries': must be between 1 and 65535, got 0");
  EXPECT_EQ(FileError("[defaults]\ntries = 65536\n"),
            Path("test.toml") + ":2: key 'defaults.tries': must be between 1 and 65535, got 65536");
  EXPECT_EQ(FileError("[server]\nthreads = -1\n"),
            Path("test.toml") + ":2: key 'server.threads': must be between 0 and 1024, got -1");
  EXPECT_EQ(FileError("[server]\nthreads = 1025\n"),
            Path("test.toml") + ":2: key 'server.threads': must be between 0 and 1024, got 1025");
  EXPECT_EQ(
      FileError("[server]\nmax_clients = 0\n"),
      Path("test.toml") + ":2: key 'server.max_clients': must be between 1 and 4294967295, got 0");
  EXPECT_EQ(FileError("[server]\nmax_args = 0\n"),
            Path("test.toml") + ":2: key 'server.max_args': must be at least 1, got 0");
  EXPECT_EQ(FileError("[defaults]\nttr = 0\n"),
            Path("test.toml") + ":2: key 'defaults.ttr': must be between 1 and 4294967, got 0");
  // The commands' own ranges (job_limits.h): CONSUME ... TTR 4294968 is refused, so is this.
  EXPECT_EQ(
      FileError("[defaults]\nttr = 4294968\n"),
      Path("test.toml") + ":2: key 'defaults.ttr': must be between 1 and 4294967, got 4294968");
  EXPECT_EQ(FileError("[defaults]\nttl = 3153600001\n"),
            Path("test.toml") +
                ":2: key 'defaults.ttl': must be between 0 and 3153600000, got 3153600001");
  EXPECT_EQ(FileError("[defaults]\ntimeout = -0.5\n"),
            Path("test.toml") +
                ":2: key 'defaults.timeout': must be a number of seconds from 0 to 3153600000");
  // Found by tests/fuzz/config_fuzz: a default past a century overflowed CONSUME's deadline.
  EXPECT_EQ(FileError("[defaults]\ntimeout = 1e300\n"),
            Path("test.toml") +
                ":2: key 'defaults.timeout': must be a number of seconds from 0 to 3153600000");
  EXPECT_EQ(FileError("[pools.default]\naddr = \"a:1\"\nconnections_per_thread = 65\n"),
            Path("test.toml") +
                ":3: key 'pools.default.connections_per_thread': must be between 1 and 64, got 65");
  EXPECT_EQ(FileError("[pools.default]\naddr = \"a:1\"\ntimeout_ms = 0\n"),
            Path("test.toml") +
                ":3: key 'pools.default.timeout_ms': must be between 1 and 2147483647, got 0");
}

TEST_F(ConfigTest, IntegerTooLargeForItsFieldIsAnErrorNotATruncation) {
  EXPECT_EQ(FileError("[server]\ntimeout = 4294967296\n"),
            Path("test.toml") +
                ":2: key 'server.timeout': must be between 0 and 4294967295, got 4294967296");
  EXPECT_EQ(FileError("[auth]\ncache_seconds = 99999999999\n"),
            Path("test.toml") +
                ":2: key 'auth.cache_seconds': must be between 0 and 4294967295, got 99999999999");
}

TEST_F(ConfigTest, ListenPortOverflowIsAnError) {
  EXPECT_EQ(FileError("[server]\nlisten = \"127.0.0.1:70000\"\n"),
            Path("test.toml") + ":2: key 'server.listen': port '70000' is out of range (1-65535)");
}

TEST_F(ConfigTest, MalformedListenAddressesAreErrors) {
  EXPECT_EQ(FileError("[server]\nlisten = \"127.0.0.1\"\n"),
            Path("test.toml") + ":2: key 'server.listen': missing port (expected host:port)");
  EXPECT_EQ(
      FileError("[server]\nlisten = \"::1:6380\"\n"),
      Path("test.toml") + ":2: key 'server.listen': IPv6 addresses need brackets, e.g. [::1]:6380");
  EXPECT_EQ(FileError("[server]\nmetrics_listen = \"redis://h:1\"\n"),
            Path("test.toml") +
                ":2: key 'server.metrics_listen': expected host:port (IPv6 as [::1]:6380)");
}

TEST_F(ConfigTest, MetricsListenOffOrEmptyDisablesTheEndpoint) {
  EXPECT_FALSE(Config{}.metrics_listen_set);
  for (const char* off : {"off", ""}) {
    ASSERT_EQ(FileError(std::string("[server]\nmetrics_listen = \"") + off + "\"\n"), "") << off;
    EXPECT_EQ(cfg_.metrics_listen, off);
    EXPECT_TRUE(cfg_.metrics_listen_set);
  }
}

TEST_F(ConfigTest, MetricsListenOnTheRespAddressIsRefused) {
  EXPECT_EQ(
      FileError("[server]\nlisten = \"127.0.0.1:7000\"\nmetrics_listen = \"127.0.0.1:7000\"\n"),
      Path("test.toml") +
          ": key 'server.metrics_listen': must not be the address deferq serves RESP on "
          "(127.0.0.1:7000)");
  // A wildcard overlaps every address of its port; another port is fine.
  EXPECT_NE(FileError("[server]\nlisten = \"127.0.0.1:7000\"\nmetrics_listen = \"0.0.0.0:7000\"\n"),
            "");
  EXPECT_EQ(
      FileError("[server]\nlisten = \"127.0.0.1:7000\"\nmetrics_listen = \"127.0.0.1:7001\"\n"),
      "");
  // The --port flag counts too.
  WriteFile("m.toml", "[server]\nmetrics_listen = \"127.0.0.1:7002\"\n");
  EXPECT_FALSE(Parse({"--config", Path("m.toml"), "--port", "7002"}));
}

TEST_F(ConfigTest, AFileOverOneMebibyteIsNotAConfigFile) {
  // --config /dev/zero read for ever.
  EXPECT_FALSE(Parse({"--config", "/dev/zero"}));
  EXPECT_EQ(error_, "/dev/zero: larger than 1024 KiB: not a deferq config file");
  EXPECT_NE(FileError("# " + std::string(1024 * 1024, 'x') + "\n"), "");
}

TEST_F(ConfigTest, EmptyStringsAreErrors) {
  EXPECT_EQ(FileError("[auth]\nadmin_password_env = \"\"\n"),
            Path("test.toml") + ":2: key 'auth.admin_password_env': must not be empty");
}

TEST_F(ConfigTest, SyntaxErrorNamesFileLineAndColumn) {
  EXPECT_EQ(
      FileError("[server]\nthreads = \n"),
      Path("test.toml") + ":2:11: Error while parsing key-value pair: expected value, saw '\\n'");
}

TEST_F(ConfigTest, IntegerBeyond64BitsIsASyntaxError) {
  std::string error = FileError("[server]\nmax_payload = 99999999999999999999\n");
  EXPECT_EQ(error.rfind(Path("test.toml") + ":2:", 0), 0u) << error;
  EXPECT_NE(error.find("not representable in 64 bits"), std::string::npos) << error;
}

TEST_F(ConfigTest, MissingFileSaysCannotRead) {
  std::string path = Path("nope.toml");
  EXPECT_FALSE(Parse({"--config", path}));
  EXPECT_EQ(error_, path + ": cannot read: No such file or directory");
}

TEST_F(ConfigTest, DirectoryAsConfigFileSaysCannotRead) {
  EXPECT_FALSE(Parse({"--config", dir_}));
  EXPECT_EQ(error_, dir_ + ": cannot read: Is a directory");
}

TEST_F(ConfigTest, BadPoolUrlNamesThePoolKeyWithoutEchoingTheSecret) {
  std::string error = FileError("[pools.default]\naddr = \"redis://:topsecret@h:99999\"\n");
  EXPECT_EQ(error, Path("test.toml") +
                       ":2: key 'pools.default.addr': invalid Redis address: port '99999' is out "
                       "of range (1-65535)");
  EXPECT_EQ(error.find("topsecret"), std::string::npos);
}

TEST_F(ConfigTest, TlsListenerNeedsACertificateAndAnAddressOfItsOwn) {
  EXPECT_EQ(FileError("[tls]\nlisten = \"127.0.0.1:6390\"\n"),
            Path("test.toml") + ": key 'tls.cert_file': tls.listen needs a certificate");
  EXPECT_EQ(FileError("[server]\nlisten = \"127.0.0.1:6390\"\n[tls]\nlisten = "
                      "\"0.0.0.0:6390\"\ncert_file = \"/c.pem\"\n"),
            Path("test.toml") +
                ": key 'tls.listen': must not be server.listen's address (127.0.0.1:6390)");
  EXPECT_EQ(FileError("[tls]\nlisten = \"rediss://h:1\"\n"),
            Path("test.toml") + ":2: key 'tls.listen': expected host:port (IPv6 as [::1]:6380)");
}

TEST_F(ConfigTest, PoolTlsKeyIsForSentinelPoolsOnly) {
  EXPECT_EQ(FileError("[pools.default]\naddr = \"redis://h:1\"\ntls = true\n"),
            Path("test.toml") +
                ":3: key 'pools.default.tls': only applies to a pool with sentinels (give addr or "
                "cluster as rediss:// URLs)");
  ASSERT_EQ(FileError("[pools.default]\nsentinels = [\"h:26379\"]\nmaster = \"m\"\ntls = true\n"),
            "");
  ASSERT_NE(FindPool("default"), nullptr);
  EXPECT_TRUE(FindPool("default")->tls);
}

TEST_F(ConfigTest, BadClusterSeedNamesTheElement) {
  EXPECT_EQ(FileError("[pools.default]\ncluster = [\"a:1\", \"b\"]\n"),
            Path("test.toml") +
                ":2: key 'pools.default.cluster[1]': invalid Redis address: missing port "
                "(expected host:port)");
}

TEST_F(ConfigTest, SentinelGivenAsUrlIsAnError) {
  EXPECT_EQ(
      FileError("[pools.default]\nsentinels = [\"redis://s:26379\"]\nmaster = \"m\"\n"),
      Path("test.toml") + ":2: key 'pools.default.sentinels[0]': expected host:port, not a URL");
}

TEST_F(ConfigTest, TwoPoolKindsAreAnErrorAtThePoolHeader) {
  EXPECT_EQ(FileError("[server]\nthreads = 1\n\n[pools.default]\naddr = \"a:1\"\n"
                      "cluster = [\"b:2\"]\n"),
            Path("test.toml") +
                ":4: key 'pools.default': addr, cluster and sentinels exclude each other; give "
                "exactly one (found addr and cluster)");
}

TEST_F(ConfigTest, PoolWithNoKindIsAnError) {
  EXPECT_EQ(FileError("[pools.default]\nconnections_per_thread = 3\n"),
            Path("test.toml") + ":1: key 'pools.default': needs one of addr, cluster or sentinels");
}

TEST_F(ConfigTest, SentinelsWithoutMasterIsAnError) {
  EXPECT_EQ(FileError("[pools.default]\nsentinels = [\"s1:26379\"]\n"),
            Path("test.toml") +
                ":1: key 'pools.default.master': is required with sentinels (the Sentinel "
                "master name)");
}

TEST_F(ConfigTest, MasterWithoutSentinelsIsAnError) {
  EXPECT_EQ(
      FileError("[pools.default]\naddr = \"a:1\"\nmaster = \"m\"\n"),
      Path("test.toml") + ":3: key 'pools.default.master': only applies to a pool with sentinels");
}

TEST_F(ConfigTest, SentinelPasswordsAndWaitReplicasAreRead) {
  ASSERT_EQ(FileError("[pools.default]\nsentinels = [\"s:26379\"]\nmaster = \"m\"\n"
                      "sentinel_password = \"sp\"\nmaster_password = \"mp\"\n"
                      "wait_replicas = 2\nwait_timeout_ms = 250\n"),
            "");
  const PoolConfig* def = FindPool("default");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->sentinel_password, "sp");
  EXPECT_EQ(def->master_password, "mp");
  EXPECT_EQ(def->wait_replicas, 2);
  EXPECT_EQ(def->wait_timeout_ms, 250);
}

TEST_F(ConfigTest, WaitReplicasIsOffByDefaultAndItsTimeoutCannotBeZero) {
  ASSERT_EQ(FileError("[pools.default]\naddr = \"a:1\"\n"), "");
  EXPECT_EQ(FindPool("default")->wait_replicas, 0);
  EXPECT_EQ(FindPool("default")->wait_timeout_ms, 1000);
  // WAIT's timeout 0 blocks forever.
  EXPECT_EQ(FileError("[pools.default]\naddr = \"a:1\"\nwait_timeout_ms = 0\n"),
            Path("test.toml") +
                ":3: key 'pools.default.wait_timeout_ms': must be between 1 and 2147483647, got 0");
}

TEST_F(ConfigTest, SentinelPasswordWithoutSentinelsIsAnError) {
  EXPECT_EQ(FileError("[pools.default]\naddr = \"a:1\"\nsentinel_password = \"x\"\n"),
            Path("test.toml") +
                ":3: key 'pools.default.sentinel_password': only applies to a pool with sentinels");
}

TEST_F(ConfigTest, InvalidPoolNameIsAnError) {
  EXPECT_EQ(FileError("[pools.\"bad name\"]\naddr = \"a:1\"\n"),
            Path("test.toml") +
                ":1: key 'pools.bad name': pool names are 1-200 characters of [A-Za-z0-9_.:-]");
}

TEST_F(ConfigTest, MaxBulkLenBelowPayloadPlus1KiBNamesBothKeys) {
  EXPECT_EQ(FileError("[server]\nmax_payload = 4096\nmax_bulk_len = 5000\n"),
            Path("test.toml") +
                ":3: key 'server.max_bulk_len': server.max_bulk_len (5000) must be at least "
                "server.max_payload + 1024 (5120)");
}

TEST_F(ConfigTest, MaxPayloadOutgrowingDefaultBulkLenBlamesMaxPayload) {
  EXPECT_EQ(FileError("[server]\nmax_payload = 8388608\n"),
            Path("test.toml") +
                ":2: key 'server.max_payload': server.max_bulk_len (8388608) must be at least "
                "server.max_payload + 1024 (8389632); raise server.max_bulk_len too");
}

TEST_F(ConfigTest, MaxBulkLenExactlyPayloadPlus1KiBIsAccepted) {
  EXPECT_EQ(FileError("[server]\nmax_payload = 4096\nmax_bulk_len = 5120\n"), "");
}

TEST_F(ConfigTest, FileWithoutDefaultPoolFailsNamingTheFile) {
  EXPECT_EQ(FileError("[pools.jobs]\naddr = \"a:1\"\n"),
            Path("test.toml") +
                ": key 'pools.default': is required (deferq keeps its metadata there); add "
                "[pools.default] or --pool default=URL");
}

// ---- ValidateConfig on its own
// -------------------------------------------------------------------

TEST_F(ConfigTest, ValidateRejectsConfigWithoutDefaultPool) {
  std::string error;
  EXPECT_FALSE(ValidateConfig(Config{}, &error));
  EXPECT_EQ(error.rfind("key 'pools.default': is required", 0), 0u) << error;
}

TEST_F(ConfigTest, ValidateRejectsBulkLenBelowPayloadPlus1KiB) {
  Config cfg;
  cfg.pools.push_back(Standalone("default", "a:1"));
  cfg.max_payload = 1000;
  cfg.max_bulk_len = 2023;
  std::string error;
  EXPECT_FALSE(ValidateConfig(cfg, &error));
  EXPECT_EQ(error,
            "key 'server.max_bulk_len': server.max_bulk_len (2023) must be at least "
            "server.max_payload + 1024 (2024)");
}

TEST_F(ConfigTest, ValidateNamesThePoolWithABadUrl) {
  Config cfg;
  cfg.pools.push_back(Standalone("default", "a:1"));
  cfg.pools.push_back(Standalone("jobs", "redis://"));
  std::string error;
  EXPECT_FALSE(ValidateConfig(cfg, &error));
  EXPECT_EQ(error, "key 'pools.jobs.addr': invalid Redis address: empty host");
}

TEST_F(ConfigTest, ValidateRejectsTwoPoolKinds) {
  Config cfg;
  cfg.pools.push_back(Standalone("default", "a:1"));
  cfg.pools[0].cluster = {"b:2"};
  std::string error;
  EXPECT_FALSE(ValidateConfig(cfg, &error));
  EXPECT_EQ(error.rfind("key 'pools.default': addr, cluster and sentinels exclude", 0), 0u)
      << error;
}

TEST_F(ConfigTest, ValidateRejectsSentinelsWithoutMaster) {
  Config cfg;
  cfg.pools.push_back(Standalone("default", ""));
  cfg.pools[0].sentinels = {"s:26379"};
  std::string error;
  EXPECT_FALSE(ValidateConfig(cfg, &error));
  EXPECT_EQ(error.rfind("key 'pools.default.master': is required with sentinels", 0), 0u) << error;
}

TEST_F(ConfigTest, ValidateRejectsTooManyThreadsAndDuplicatePools) {
  Config cfg;
  cfg.pools.push_back(Standalone("default", "a:1"));
  cfg.threads = 1025;
  std::string error;
  EXPECT_FALSE(ValidateConfig(cfg, &error));
  EXPECT_EQ(error, "key 'server.threads': must be between 0 and 1024");
  cfg.threads = 0;
  cfg.pools.push_back(Standalone("default", "b:2"));
  EXPECT_FALSE(ValidateConfig(cfg, &error));
  EXPECT_EQ(error, "key 'pools.default': defined more than once");
}

// ---- Command-line errors: command line: --flag: what
// ---------------------------------------------

TEST_F(ConfigTest, UnknownFlagIsNamed) {
  EXPECT_FALSE(Parse({"--foo"}));
  EXPECT_EQ(error_, "command line: unknown option '--foo'");
  EXPECT_FALSE(Parse({"--foo=1"}));
  EXPECT_EQ(error_, "command line: unknown option '--foo'");
  EXPECT_FALSE(Parse({"-x"}));
  EXPECT_EQ(error_, "command line: unknown option '-x'");
}

TEST_F(ConfigTest, StrayArgumentIsAnError) {
  EXPECT_FALSE(Parse({"deferq.toml"}));
  EXPECT_EQ(error_, "command line: unexpected argument 'deferq.toml'");
}

TEST_F(ConfigTest, NonNumericPortFlagIsAnError) {
  EXPECT_FALSE(Parse({"--port", "abc"}));
  EXPECT_EQ(error_, "command line: --port: expected an integer between 1 and 65535, got 'abc'");
}

TEST_F(ConfigTest, OutOfRangePortFlagIsAnError) {
  EXPECT_FALSE(Parse({"--port", "70000"}));
  EXPECT_EQ(error_, "command line: --port: expected an integer between 1 and 65535, got '70000'");
  EXPECT_FALSE(Parse({"--port=0"}));
  EXPECT_EQ(error_, "command line: --port: expected an integer between 1 and 65535, got '0'");
  EXPECT_FALSE(Parse({"--port", "99999999999999999999999"}));
  EXPECT_EQ(error_,
            "command line: --port: expected an integer between 1 and 65535, got "
            "'99999999999999999999999'");
}

TEST_F(ConfigTest, SignedOrPaddedNumbersAreRejected) {
  EXPECT_FALSE(Parse({"--threads", "-1"}));
  EXPECT_EQ(error_, "command line: --threads: expected an integer between 0 and 1024, got '-1'");
  EXPECT_FALSE(Parse({"--port", "+6380"}));
  EXPECT_EQ(error_, "command line: --port: expected an integer between 1 and 65535, got '+6380'");
  EXPECT_FALSE(Parse({"--port", "6380 "}));
  EXPECT_EQ(error_, "command line: --port: expected an integer between 1 and 65535, got '6380 '");
}

TEST_F(ConfigTest, TooManyThreadsFlagIsAnError) {
  EXPECT_FALSE(Parse({"--threads=1025"}));
  EXPECT_EQ(error_, "command line: --threads: expected an integer between 0 and 1024, got '1025'");
}

TEST_F(ConfigTest, FlagWithoutValueIsAnError) {
  EXPECT_FALSE(Parse({"--port"}));
  EXPECT_EQ(error_, "command line: --port: missing value");
  EXPECT_FALSE(Parse({"--config", "--port", "1"}));
  EXPECT_EQ(error_, "command line: --config: missing value");
  EXPECT_FALSE(Parse({"--pool="}));
  EXPECT_EQ(error_, "command line: --pool: missing value");
}

TEST_F(ConfigTest, SwitchWithValueIsAnError) {
  EXPECT_FALSE(Parse({"--check-config=yes"}));
  EXPECT_EQ(error_, "command line: --check-config: takes no value");
}

TEST_F(ConfigTest, ConfigGivenTwiceIsAnError) {
  std::string path = WriteFile("c.toml", "");
  EXPECT_FALSE(Parse({"--config", path, "--config", path}));
  EXPECT_EQ(error_, "command line: --config: given more than once");
}

TEST_F(ConfigTest, PoolFlagWithoutNameIsAnError) {
  EXPECT_FALSE(Parse({"--pool", "redis://:secret@h:1"}));
  EXPECT_EQ(error_,
            "command line: --pool: expected NAME=URL (e.g. default=redis://127.0.0.1:6379)");
}

TEST_F(ConfigTest, PoolFlagWithBadNameIsAnError) {
  EXPECT_FALSE(Parse({"--pool", "a/b=h:1"}));
  EXPECT_EQ(error_,
            "command line: --pool: invalid pool name 'a/b': pool names are 1-200 characters of "
            "[A-Za-z0-9_.:-]");
}

TEST_F(ConfigTest, PoolFlagWithBadUrlNamesThePool) {
  EXPECT_FALSE(Parse({"--pool", "jobs=http://h:1"}));
  EXPECT_EQ(error_,
            "command line: --pool: pool 'jobs': invalid Redis address: unknown scheme 'http://' "
            "(expected redis:// or rediss://)");
  EXPECT_FALSE(Parse({"--pool", "default=redis://h:0"}));
  EXPECT_EQ(error_,
            "command line: --pool: pool 'default': invalid Redis address: port '0' is out of "
            "range (1-65535)");
}

TEST_F(ConfigTest, FlagErrorLeavesConfigUntouched) {
  Config cfg;
  cfg.threads = 5;
  CliAction action = CliAction::kRun;
  std::string error;
  const char* argv[] = {"deferq", "--threads", "2", "--port", "x"};
  EXPECT_FALSE(ParseCommandLine(5, argv, &cfg, &action, &error));
  EXPECT_EQ(cfg.threads, 5);
  EXPECT_TRUE(cfg.pools.empty());
}

}  // namespace
}  // namespace deferq
