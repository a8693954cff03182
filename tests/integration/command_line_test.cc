// The command line (docs/configuration.md and the contract): --version, --check-config, and
// config errors that name the file, the line and the key.
#include <filesystem>
#include <fstream>
#include <string>

#include "integration_test.h"

namespace deferq::testing {
namespace {

// A config file in its own temporary directory, removed with the object.
class TempConfig {
 public:
  explicit TempConfig(const std::string& toml) : dir_(MakeTempDir()), path_(dir_ / "deferq.toml") {
    std::ofstream(path_) << toml;
  }
  ~TempConfig() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path dir_;
  std::filesystem::path path_;
};

using CommandLineTest = DeferqTest;

// --check-config needs no running server.
class CheckConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(DeferqBinary().empty()) << "DEFERQ_BIN is not set: run through `meson test`";
  }
};

TEST_F(CommandLineTest, VersionNamesTheVersionHelloReportsAndTheAllocator) {
  CommandResult result = RunToCompletion(DeferqBinary(), {"--version"});
  EXPECT_TRUE(ExitedWithCode(result.wait_status, 0)) << DescribeWaitStatus(result.wait_status);
  EXPECT_NE(result.output.find("mimalloc"), std::string::npos) << result.output;

  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto hello = Command(client.get(), {"HELLO", "2"});
  ASSERT_NE(hello, nullptr);
  ASSERT_EQ(hello->type, REDIS_REPLY_ARRAY) << Describe(hello.get());
  ASSERT_GE(hello->elements, 4u);
  std::string version(hello->element[3]->str, hello->element[3]->len);
  ASSERT_FALSE(version.empty());
  EXPECT_NE(result.output.find(version), std::string::npos)
      << "--version says: " << result.output << "HELLO says: " << version;
}

TEST_F(CheckConfigTest, ValidConfigPassesCheckConfigWithExitZero) {
  TempConfig config(
      "[server]\n"
      "max_clients = 100\n"
      "max_args = 1024\n"
      "max_payload = 4096\n"
      "max_bulk_len = 8192\n"
      "max_output_buffer = 1048576\n"
      "timeout = 30\n");
  CommandResult result =
      RunToCompletion(DeferqBinary(), {"--config", config.path(), "--check-config"});
  EXPECT_TRUE(ExitedWithCode(result.wait_status, 0))
      << DescribeWaitStatus(result.wait_status) << ": " << result.output;
}

TEST_F(CheckConfigTest, WrongTypeExitsTwoNamingFileLineAndKey) {
  TempConfig config(
      "[server]\n"
      "max_clients = \"lots\"\n");
  CommandResult result =
      RunToCompletion(DeferqBinary(), {"--config", config.path(), "--check-config"});
  EXPECT_TRUE(ExitedWithCode(result.wait_status, 2))
      << DescribeWaitStatus(result.wait_status) << ": " << result.output;
  EXPECT_NE(result.output.find(config.path() + ":2: key 'server.max_clients': "), std::string::npos)
      << result.output;
}

TEST_F(CheckConfigTest, BulkLimitBelowPayloadLimitExitsTwoNamingTheKey) {
  TempConfig config(
      "[server]\n"
      "max_payload = 1048576\n"
      "max_bulk_len = 4096\n");
  CommandResult result =
      RunToCompletion(DeferqBinary(), {"--config", config.path(), "--check-config"});
  EXPECT_TRUE(ExitedWithCode(result.wait_status, 2))
      << DescribeWaitStatus(result.wait_status) << ": " << result.output;
  EXPECT_NE(result.output.find(config.path() + ":"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("key 'server.max_bulk_len': "), std::string::npos) << result.output;
}

TEST_F(CheckConfigTest, BadConfigAlsoStopsANormalStartWithExitTwo) {
  TempConfig config("[server]\nmax_clients = -5\n");
  CommandResult result = RunToCompletion(
      DeferqBinary(), {"--config", config.path(), "--port", std::to_string(FreeLoopbackPort())});
  EXPECT_TRUE(ExitedWithCode(result.wait_status, 2))
      << DescribeWaitStatus(result.wait_status) << ": " << result.output;
  EXPECT_NE(result.output.find("key 'server.max_clients'"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace deferq::testing
