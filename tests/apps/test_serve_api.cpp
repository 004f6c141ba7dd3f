// API tests of `foldcore serve` (tiny model, random parameters; server on an ephemeral loopback
// port): a job goes from submission to done and every output file downloads and parses; cancel,
// delete, list; each bad input is answered with its status and creates no job; the token.
#include <gtest/gtest.h>
#include <zlib.h>

#include <memory>
#include <set>

#include "apps/serve/http_api.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/formats/pdb_reader.h"
#include "serve_test_util.h"

namespace foldcore::serve_test {
namespace {

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}

// PNG: signature, chunk CRCs, IHDR size, IEND last, IDAT inflates to the size IHDR implies.
void expect_png(const std::string& file, const std::string& name) {
  ASSERT_GT(file.size(), 33u) << name;
  EXPECT_EQ(file.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << name;
  size_t at = 8;
  uint32_t width = 0, height = 0;
  std::string idat, last;
  while (at + 12 <= file.size()) {
    const uint32_t len = be32(file, at);
    ASSERT_LE(at + 12 + len, file.size()) << name;
    last = file.substr(at + 4, 4);
    uLong c = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(file.data() + at + 4), 4 + len);
    EXPECT_EQ(be32(file, at + 8 + len), static_cast<uint32_t>(c)) << name << " chunk " << last;
    if (last == "IHDR") {
      width = be32(file, at + 8);
      height = be32(file, at + 12);
    }
    if (last == "IDAT") idat += file.substr(at + 8, len);
    at += 12 + len;
  }
  EXPECT_EQ(last, "IEND") << name;
  ASSERT_GT(width * height, 0u) << name;
  std::vector<uint8_t> raw(static_cast<size_t>(height) * (1 + 3 * width) + 16);
  uLongf got = raw.size();
  EXPECT_EQ(uncompress(raw.data(), &got, reinterpret_cast<const Bytef*>(idat.data()), idat.size()), Z_OK) << name;
  EXPECT_EQ(got, static_cast<uLongf>(height) * (1 + 3 * width)) << name;
}

class ServeApi : public ::testing::Test {
 protected:
  // One server for the suite: it starts once (model load) and the cases share it.
  static void SetUpTestSuite() {
    dir_ = std::make_unique<ScratchDir>("serve_api");
    std::vector<std::string> args = tiny_model_args();
    for (const char* a : {"--max_length", "400", "--max_body_mb", "1", "--num_recycles", "1"})
      args.push_back(a);
    server_ = std::make_unique<ServeProcess>(dir_->path() / "jobs", args);
  }
  static void TearDownTestSuite() {
    if (server_) {
      EXPECT_EQ(server_->kill(SIGTERM), 0) << server_->log();
    }
    server_.reset();
    dir_.reset();
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()); }
  static size_t job_count() {
    auto c = server_->client();
    auto r = c.Get("/api/jobs?limit=1000");
    EXPECT_TRUE(r && r->status == 200);
    return r ? json::parse(r->body)["jobs"].size() : 0;
  }
  static inline std::unique_ptr<ScratchDir> dir_;
  static inline std::unique_ptr<ServeProcess> server_;
};

TEST_F(ServeApi, SubmitRunsToDoneAndEveryFileParses) {
  auto c = server_->client();
  const std::string seq = test_sequence(24);
  auto r = c.Post("/api/jobs", ">my protein_1 some description\n" + seq.substr(0, 12) + "\n" + seq.substr(12) + "\n",
                  "text/plain");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  const json created = json::parse(r->body);
  EXPECT_EQ(created["name"], "my");
  EXPECT_EQ(created["sequence"], seq);
  EXPECT_EQ(r->get_header_value("Location"), "/api/jobs/" + created["id"].get<std::string>());
  const std::string id = created["id"];

  // Progress is visible while it runs: at least one stage other than queued/done is seen, or
  // the job was already done at the first look (the tiny model is fast).
  std::set<std::string> stages;
  const json job = wait_job(c, id, [&](const json& j) { stages.insert(j.value("stage", "")); return finished(j); }, 300);
  ASSERT_EQ(job.value("status", ""), "done") << job.dump() << "\n" << server_->log();
  EXPECT_EQ(job["progress"], 1.0);
  EXPECT_GT(job["mean_plddt"].get<double>(), 0.0);
  EXPECT_GE(job["ptm"].get<double>(), 0.0);
  EXPECT_EQ(job["attempts"], 1);

  const std::vector<std::string> files = job["files"];
  for (const char* want : {"ranked_0.pdb", "ranked_0.cif", "unrelaxed_tiny_pred_0.pdb", "confidence_tiny.json",
                           "pae_tiny.json", "ranking_debug.json", "plddt.png", "pae_tiny.png", "msa_coverage.png"})
    EXPECT_NE(std::find(files.begin(), files.end(), want), files.end()) << want << " missing from " << job.dump();
  for (const std::string& f : files) {
    auto fr = c.Get("/api/jobs/" + id + "/files/" + f);
    ASSERT_TRUE(fr) << f;
    ASSERT_EQ(fr->status, 200) << f << ": " << fr->body;
    if (f.ends_with(".pdb")) {
      const data::Structure s = data::parse_pdb(fr->body, f);
      ASSERT_EQ(s.chains.size(), 1u) << f;
      EXPECT_EQ(s.chains[0].residues.size(), seq.size()) << f;
      EXPECT_NE(fr->body.find("RANDOM PARAMETERS"), std::string::npos) << f << ": the warning must travel";
    } else if (f.ends_with(".cif")) {
      const data::Structure s = data::parse_mmcif(fr->body, f);
      ASSERT_EQ(s.chains.size(), 1u) << f;
      EXPECT_EQ(s.chains[0].residues.size(), seq.size()) << f;
    } else if (f.ends_with(".json")) {
      const json j = json::parse(fr->body, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << f;
      if (f.starts_with("confidence_")) {
        EXPECT_EQ(j["confidenceScore"].size(), seq.size()) << f;
      }
      if (f.starts_with("pae_")) {
        EXPECT_EQ(j[0]["predicted_aligned_error"].size(), seq.size()) << f;
      }
    } else {
      EXPECT_EQ(fr->get_header_value("Content-Type"), "image/png") << f;
      expect_png(fr->body, f);
    }
  }
  // Files predict writes but the API does not serve.
  for (const char* hidden : {"result_tiny.npz", "timings.json", "done"}) {
    auto fr = c.Get("/api/jobs/" + id + "/files/" + hidden);
    ASSERT_TRUE(fr);
    EXPECT_EQ(fr->status, 400) << hidden;
  }
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_NE(m->body.find("foldcore_jobs{state=\"done\"}"), std::string::npos) << m->body;
  EXPECT_EQ(m->body.find("foldcore_prediction_seconds_count 0\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("foldcore_queue_length "), std::string::npos) << m->body;
}

TEST_F(ServeApi, JsonSubmissionWithA3m) {
  auto c = server_->client();
  const std::string seq = test_sequence(20);
  std::string other = seq;
  other[3] = 'W';
  other[9] = 'G';
  const std::string a3m = "#20\t1\n>query\n" + seq + "\n>hit_1\n" + other + "\n>hit_2\n" + seq.substr(0, 10) + "--" +
                          seq.substr(12) + "\n";
  auto r = c.Post("/api/jobs", json{{"name", "with msa"}, {"sequence", seq}, {"a3m", a3m}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  const json job = wait_job(c, json::parse(r->body)["id"], finished, 300);
  ASSERT_EQ(job.value("status", ""), "done") << job.dump();
  EXPECT_TRUE(job["has_a3m"].get<bool>());
}

// An A3M that passes the submission check (its first row is the sequence) but not the
// pipeline's parser: the job fails with the parser's message, and the worker goes on.
TEST_F(ServeApi, JobThatFailsReportsTheErrorAndTheWorkerGoesOn) {
  auto c = server_->client();
  auto r = c.Post("/api/jobs", json{{"sequence", "MKTAYIAKQRQ"}, {"a3m", ">q\nMKTAYIAKQRQ\n>short\nMKT\n"}}.dump(),
                  "application/json");
  ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "");
  const json failed = wait_job(c, json::parse(r->body)["id"], finished, 300);
  EXPECT_EQ(failed.value("status", ""), "failed") << failed.dump();
  EXPECT_NE(failed.value("error", "").find("upload.a3m"), std::string::npos) << failed.dump();
  EXPECT_NE(failed.value("error", "").find("aligned columns"), std::string::npos) << failed.dump();
  EXPECT_TRUE(failed["files"].empty());
  auto next = submit(c, "after_failure", test_sequence(15));
  ASSERT_TRUE(next && next->status == 201);
  EXPECT_EQ(wait_job(c, json::parse(next->body)["id"], finished, 300).value("status", ""), "done");
}

TEST_F(ServeApi, CancelQueuedAndRunningThenDelete) {
  auto c = server_->client();
  // A longer job (seconds with the tiny model) keeps the worker busy while the next ones wait.
  auto busy = submit(c, "busy", test_sequence(300));
  auto queued = submit(c, "queued", test_sequence(30));
  ASSERT_TRUE(busy && queued);
  ASSERT_EQ(busy->status, 201);
  ASSERT_EQ(queued->status, 201);
  const std::string busy_id = json::parse(busy->body)["id"], queued_id = json::parse(queued->body)["id"];

  auto d = c.Delete("/api/jobs/" + queued_id);
  ASSERT_TRUE(d);
  ASSERT_EQ(d->status, 200) << d->body;
  EXPECT_EQ(json::parse(d->body)["status"], "cancelled");
  // Cancelled wins over the worker: once cancelled, it never runs.
  const json q = wait_job(c, queued_id, finished, 10);
  EXPECT_EQ(q.value("status", ""), "cancelled");

  const json running = wait_job(c, busy_id, [](const json& j) { return j.value("status", "") != "queued"; }, 120);
  ASSERT_EQ(running.value("status", ""), "running") << running.dump();
  auto d2 = c.Delete("/api/jobs/" + busy_id);
  ASSERT_TRUE(d2);
  EXPECT_EQ(d2->status, 200) << d2->body;
  EXPECT_EQ(json::parse(d2->body)["was"], "running");
  // The worker stops at its next progress report and leaves no result behind.
  const json b = wait_job(c, busy_id, finished, 120);
  EXPECT_EQ(b.value("status", ""), "cancelled") << b.dump();
  auto none = c.Get("/api/jobs/" + busy_id + "/files/ranked_0.pdb");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 409);
  EXPECT_TRUE(wait_job(c, busy_id, [&](const json&) { return !fs::exists(dir_->path() / "jobs" / "jobs" / busy_id / "result"); }, 30).is_object());
  EXPECT_FALSE(fs::exists(dir_->path() / "jobs" / "jobs" / busy_id / "result"));
  // A cancelled job is deleted by a second DELETE, files and all.
  auto del = c.Delete("/api/jobs/" + queued_id);
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 204);
  auto gone = c.Get("/api/jobs/" + queued_id);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404);
  EXPECT_FALSE(fs::exists(dir_->path() / "jobs" / "jobs" / queued_id));
  auto again = c.Delete("/api/jobs/" + queued_id);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 404);
}

TEST_F(ServeApi, ListIsNewestFirst) {
  auto c = server_->client();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = submit(c, "list_" + std::to_string(i), test_sequence(10 + i));
    ASSERT_TRUE(r && r->status == 201);
    ids.push_back(json::parse(r->body)["id"]);
  }
  auto r = c.Get("/api/jobs");
  ASSERT_TRUE(r && r->status == 200);
  const json jobs = json::parse(r->body)["jobs"];
  ASSERT_GE(jobs.size(), 3u);
  EXPECT_EQ(jobs[0]["id"], ids[2]);
  EXPECT_EQ(jobs[1]["id"], ids[1]);
  EXPECT_EQ(jobs[2]["id"], ids[0]);
  EXPECT_FALSE(jobs[0].contains("sequence"));  // the list stays small
  auto bad = c.Get("/api/jobs?limit=0");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  for (const std::string& id : ids) wait_job(c, id, finished, 300);
}

struct BadCase {
  std::string what, body, content_type;
  int status;
  std::string message;  // a piece of the error text
};

TEST_F(ServeApi, BadInputsAreRefusedWithoutCreatingAJob) {
  auto c = server_->client();
  const size_t before = job_count();
  const std::vector<BadCase> cases = {
      {"empty", "", "text/plain", 400, "empty"},
      {"only a header", ">x\n", "text/plain", 400, "empty"},
      {"digits", "MKTAYIAK1QRQ", "text/plain", 400, "'1' at position 9"},
      {"non-amino-acid letters", json{{"sequence", "MKTA#YIAK"}}.dump(), "application/json", 400, "'#' at position 5"},
      {"too long", test_sequence(401), "text/plain", 400, "limit of 400"},
      {"two records", ">a\nMKT\n>b\nMKT\n", "text/plain", 400, "more than one"},
      {"malformed JSON", "{\"sequence\": \"MKT\"", "application/json", 400, "malformed JSON"},
      {"sequence not a string", R"({"sequence": 12})", "application/json", 400, "must be a string"},
      {"no sequence", R"({"name": "x"})", "application/json", 400, "'sequence' is missing"},
      {"unknown field", R"({"sequence": "MKT", "seq": "MKT"})", "application/json", 400, "unknown field"},
      {"a3m of another protein", json{{"sequence", "MKTAYI"}, {"a3m", ">q\nMKTAYW\n"}}.dump(), "application/json", 400,
       "a3m"},
      {"oversized body", std::string(2u << 20, 'A'), "text/plain", 413, "too large"},
  };
  for (const BadCase& bc : cases) {
    auto r = c.Post("/api/jobs", bc.body, bc.content_type);
    ASSERT_TRUE(r) << bc.what << ": no answer (" << httplib::to_string(r.error()) << ")";
    EXPECT_EQ(r->status, bc.status) << bc.what << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << bc.what << ": error body is not JSON: " << r->body;
    EXPECT_EQ(j.value("status", 0), bc.status) << bc.what;
    EXPECT_NE(j.value("error", "").find(bc.message), std::string::npos) << bc.what << ": " << r->body;
  }
  EXPECT_EQ(job_count(), before);

  const std::string unknown(32, 'a');
  for (const std::string& path : std::vector<std::string>{"/api/jobs/" + unknown, "/api/jobs/nothex",
                                                          "/api/jobs/" + unknown + "/files/ranked_0.pdb"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_FALSE(json::parse(r->body, nullptr, false).is_discarded()) << path;
  }
  auto d = c.Delete("/api/jobs/" + unknown);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 404);

  // Paths out of the job's folder: "../", encoded "../", an absolute path, a hidden file.
  auto r = submit(c, "files", test_sequence(12));
  ASSERT_TRUE(r && r->status == 201);
  const std::string id = json::parse(r->body)["id"];
  ASSERT_EQ(wait_job(c, id, finished, 300).value("status", ""), "done");
  for (const std::string& name : {std::string("../query.fasta"), std::string("..%2F..%2Fjobs.db"),
                                  std::string("%2Fetc%2Fpasswd"), std::string("/etc/passwd"), std::string(".hidden.pdb"),
                                  std::string("..")}) {
    auto fr = c.Get("/api/jobs/" + id + "/files/" + name);
    ASSERT_TRUE(fr) << name;
    EXPECT_EQ(fr->status, 400) << name << ": " << fr->body;
    EXPECT_EQ(fr->body.find("ATOM"), std::string::npos) << name;
  }
}

TEST(ServeFileNames, OnlyPredictOutputsAreServable) {
  using apps::serve::is_servable_output_name;
  for (const char* ok : {"ranked_0.pdb", "ranked_4.cif", "unrelaxed_model_1_ptm_pred_0.pdb", "confidence_model_1_ptm.json",
                         "pae_model_1_ptm.json", "ranking_debug.json", "plddt.png", "pae_model_1_ptm.png"})
    EXPECT_TRUE(is_servable_output_name(ok)) << ok;
  for (const char* bad : {"", "..", "../ranked_0.pdb", "/etc/passwd", "a/b.pdb", "a\\b.pdb", ".x.pdb", "timings.json",
                          "result_model_1_ptm.npz", "done", "query.fasta", "upload.a3m", "jobs.db", "x..pdb"})
    EXPECT_FALSE(is_servable_output_name(bad)) << bad;
}

// With --token every API call needs "Authorization: Bearer <token>"; the page itself does not.
TEST(ServeToken, MissingOrWrongTokenIs401) {
  ScratchDir dir("serve_token");
  std::vector<std::string> args = tiny_model_args();
  args.insert(args.end(), {"--token", "s3cret-token"});
  ServeProcess server(dir.path() / "jobs", args);
  ASSERT_TRUE(server.ok());
  auto none = server.client();
  auto wrong = server.client("s3cret-tokeN");
  auto right = server.client("s3cret-token");
  for (const std::string& path :
       std::vector<std::string>{"/api/health", "/api/jobs", "/metrics", "/api/jobs/" + std::string(32, 'a')}) {
    auto r = none.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer") << path;
    EXPECT_FALSE(json::parse(r->body, nullptr, false).is_discarded()) << path;
    auto w = wrong.Get(path);
    ASSERT_TRUE(w) << path;
    EXPECT_EQ(w->status, 401) << path;
  }
  auto post = submit(none, "x", "MKTAYI");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);
  auto wrong_post = submit(wrong, "x", "MKTAYI");
  ASSERT_TRUE(wrong_post);
  EXPECT_EQ(wrong_post->status, 401);
  auto list = right.Get("/api/jobs");
  ASSERT_TRUE(list && list->status == 200);
  EXPECT_TRUE(json::parse(list->body)["jobs"].empty()) << "a refused submission created a job";
  auto health = right.Get("/api/health");
  ASSERT_TRUE(health && health->status == 200);
  EXPECT_TRUE(json::parse(health->body)["auth"].get<bool>());
  auto page = none.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<title>FoldCore"), std::string::npos);
  EXPECT_EQ(server.kill(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace foldcore::serve_test
