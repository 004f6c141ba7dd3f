// Browser test of the `foldcore serve` page: the server (tiny model) on an ephemeral loopback
// port, Debian's headless Chromium driven by tests/apps/serve_browser.mjs (puppeteer-core).
// What the page check covers is listed in that script and in docs/serve.md. No Chromium, no
// Node.js or no web/node_modules is a failure, not a skip: setup.sh installs all three.
#include <gtest/gtest.h>

#include "serve_test_util.h"

namespace foldcore::serve_test {
namespace {

TEST(ServeBrowser, SubmitExampleAndViewResult) {
  const fs::path src(FOLDCORE_SOURCE_DIR);
  ASSERT_TRUE(fs::exists(src / "web" / "node_modules" / "puppeteer-core"))
      << "web/node_modules is missing: run `npm ci` in web/ (scripts/setup.sh does)";
  ASSERT_EQ(std::system("command -v node > /dev/null"), 0) << "Node.js not found (scripts/setup.sh installs it)";
  ScratchDir dir("serve_browser");
  std::vector<std::string> args = tiny_model_args();
  args.insert(args.end(), {"--num_recycles", "1"});
  ServeProcess server(dir.path() / "jobs", args);
  ASSERT_TRUE(server.ok());

  // The screenshot is the test's artefact: kept in the build folder.
  const fs::path shot = build_dir() / "test_artifacts" / "serve_page.png";
  fs::remove(shot);
  const fs::path log = dir.path() / "browser.log";
  const std::string cmd = "timeout 300 node " + (src / "tests" / "apps" / "serve_browser.mjs").string() +
                          " http://127.0.0.1:" + std::to_string(server.port()) + "/ " + shot.string() + " " +
                          (src / "web").string() + " " + (src / "examples" / "query73" / "query.fasta").string() +
                          " > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string out = read_file(log);
  std::printf("%s", out.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << out << "\nserver log:\n" << server.log();
  EXPECT_NE(out.find("PASS"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(shot));
  EXPECT_GT(fs::file_size(shot), 10000u);
  EXPECT_EQ(server.kill(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace foldcore::serve_test
