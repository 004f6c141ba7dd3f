// `foldcore features --fasta F --msa_dir D [--template_hits H.hhr --mmcif_dir M
//  --max_template_date YYYY-MM-DD] --output features.npz`: AlphaFold's raw monomer feature dict
// (data_pipeline/features/features.h) from precomputed alignments, written as an .npz with AlphaFold's
// key names, shapes and dtypes. The output is written atomically, after every input has been
// read: a failure leaves no file behind. A summary (MSA depth, templates used, and why each
// skipped template hit was skipped) goes to stdout.
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/error.h"

#if defined(FOLDCORE_HAVE_DATA)
#include "data_pipeline/features/features.h"
#endif

namespace foldcore::apps {

void add_features_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "features", "Build AlphaFold's raw monomer feature dict (sequence, MSA, template features) from a FASTA "
                  "file and precomputed alignments, as .npz");
  struct Args {
    std::string fasta, msa_dir, template_hits, mmcif_dir, max_template_date, output, kalign = "kalign";
    int max_template_hits = 20;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--fasta", args->fasta, "FASTA file with one protein sequence")->required();
  sub->add_option("--msa_dir", args->msa_dir,
                  "folder with uniref90_hits.sto, mgnify_hits.sto and bfd_uniref_hits.a3m / "
                  "bfd_uniclust_hits.a3m / small_bfd_hits.sto (plain or .gz)")
      ->required();
  sub->add_option("--template_hits", args->template_hits, "hhsearch .hhr file (templates; optional)");
  sub->add_option("--mmcif_dir", args->mmcif_dir, "folder of <pdb_id>.cif template structures");
  sub->add_option("--max_template_date", args->max_template_date, "latest template release date, YYYY-MM-DD");
  sub->add_option("--max_template_hits", args->max_template_hits, "maximum number of templates (default 20)");
  sub->add_option("--kalign_binary", args->kalign, "kalign program used for template realignment");
  sub->add_option("--output", args->output, "output .npz")->required()->check(file_to_write());
  set_action(sub, [args]() -> int {
#if defined(FOLDCORE_HAVE_DATA)
    data::MonomerPipelineOptions o;
    o.fasta_path = args->fasta;
    o.msa_dir = args->msa_dir;
    o.template_hits_path = args->template_hits;
    if (!args->template_hits.empty()) {
      FC_CHECK(!args->mmcif_dir.empty(), "--template_hits needs --mmcif_dir");
      FC_CHECK(!args->max_template_date.empty(), "--template_hits needs --max_template_date (YYYY-MM-DD)");
    } else {
      FC_CHECK(args->mmcif_dir.empty() && args->max_template_date.empty(),
               "--mmcif_dir and --max_template_date need --template_hits");
    }
    o.templates.mmcif_dir = args->mmcif_dir;
    o.templates.max_template_date = args->max_template_date;
    o.templates.max_hits = args->max_template_hits;
    o.templates.kalign_binary = args->kalign;
    const data::MonomerPipelineResult r = data::run_monomer_pipeline(o);
    data::write_features(args->output, r.features);

    const data::NpyArray& msa = r.features.at("msa");
    std::printf("features: %lld residues, %lld MSA rows from", static_cast<long long>(msa.shape[1]),
                static_cast<long long>(msa.shape[0]));
    for (const std::string& f : r.msa_files) std::printf(" %s", f.c_str());
    std::printf("\n");
    const auto templates = r.features.at("template_domain_names").strings();
    std::printf("features: %zu templates", templates.size());
    for (const std::string& t : templates) std::printf(" %s", t.c_str());
    std::printf("\n");
    for (const data::TemplateHitReport& rep : r.template_reports)
      if (rep.status != data::TemplateHitStatus::kUsed || !rep.message.empty())
        std::printf("features: template hit %d %s (sum_probs %.1f): %s%s%s\n", rep.hit_index, rep.name.c_str(),
                    rep.sum_probs, data::to_string(rep.status), rep.message.empty() ? "" : ": ", rep.message.c_str());
    std::printf("features: wrote %s\n", args->output.c_str());
    return 0;
#else
    FC_THROW("this foldcore was built without the data pipeline (zlib); `features` is unavailable");
#endif
  });
}

}  // namespace foldcore::apps
