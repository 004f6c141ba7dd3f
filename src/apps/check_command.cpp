// `foldcore check FILE [--json OUT]`: stereochemistry and geometry report of a PDB or mmCIF file
// (CA chirality from RDKit, missing/extra atoms, bond/angle outliers, clashes) printed as JSON.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "apps/commands.h"
#include "core/error.h"

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_RDKIT)
#include <zlib.h>

#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/formats/pdb_reader.h"
#include "data_pipeline/structure/structure_check.h"
#endif

namespace foldcore::apps {

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_RDKIT)
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first bytes of the file (decompressed if it is gzip; zlib reads plain files unchanged).
std::string file_head(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  FC_CHECK(f != nullptr, "cannot open ", path);
  std::string head(4096, '\0');
  const int n = gzread(f, head.data(), static_cast<unsigned>(head.size()));
  gzclose(f);
  FC_CHECK(n >= 0, "cannot read ", path);
  head.resize(static_cast<size_t>(n));
  return head;
}

enum class Format { kMmcif, kPdb };

// By extension (.cif/.mmcif/.pdb/.ent, optionally .gz), else by content: an mmCIF file starts
// with a data_ block header; a PDB file with one of its record names.
Format detect_format(const std::string& path) {
  std::string name = path;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ends_with(name, ".gz")) name.resize(name.size() - 3);
  if (ends_with(name, ".cif") || ends_with(name, ".mmcif")) return Format::kMmcif;
  if (ends_with(name, ".pdb") || ends_with(name, ".ent")) return Format::kPdb;
  const std::string head = file_head(path);
  size_t pos = 0;
  while (pos < head.size()) {  // first line that is neither blank nor a CIF comment
    const size_t eol = std::min(head.find('\n', pos), head.size());
    const std::string line = head.substr(pos, eol - pos);
    pos = eol + 1;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    if (line.compare(first, 5, "data_") == 0) return Format::kMmcif;
    for (const char* record : {"HEADER", "TITLE", "REMARK", "ATOM", "HETATM", "MODEL", "CRYST1",
                               "COMPND", "SOURCE", "EXPDTA", "AUTHOR", "SEQRES", "PARENT"})
      if (line.rfind(record, 0) == 0) return Format::kPdb;
    break;
  }
  FC_THROW(path, ": not a PDB or mmCIF file (no .pdb/.cif extension, and the first line is neither "
                 "a data_ block nor a PDB record)");
}

// Writes `text` to `path` through a temporary name, so a failure never leaves a half file.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    FC_CHECK(out.good(), "cannot write ", tmp);
    out << text << '\n';
    out.close();
    FC_CHECK(!out.fail(), "error while writing ", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  FC_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace
#endif

void add_check_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "check", "Check a PDB/mmCIF structure: CA chirality (RDKit), missing atoms, bond/angle "
               "outliers and clashes, as JSON");
  auto file = std::make_shared<std::string>();
  auto json_out = std::make_shared<std::string>();
  sub->add_option("file", *file, "PDB or mmCIF file (plain or .gz)")->required();
  sub->add_option("--json", *json_out, "also write the JSON report to this file");
  set_action(sub, [file, json_out]() -> int {
#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_RDKIT)
    if (!std::filesystem::is_regular_file(*file)) FC_THROW(*file, ": no such file");
    const data::Structure s =
        detect_format(*file) == Format::kMmcif ? data::read_mmcif(*file) : data::read_pdb(*file);
    const std::string json = data::report_to_json(data::check_structure(s));
    if (!json_out->empty()) write_atomically(*json_out, json);
    std::printf("%s\n", json.c_str());
    return 0;
#else
    FC_THROW("this foldcore was built without the data pipeline and RDKit; `check` is unavailable");
#endif
  });
}

}  // namespace foldcore::apps
