// The schema annotations themselves, and docs/config.md kept in sync with them.
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace qbc::config {
namespace {

TEST(ConfigSchema, EveryLeafHasDocumentation) {
  const std::string md = reference_markdown();
  std::function<void(const google::protobuf::Descriptor*, const std::string&)> walk =
      [&](const google::protobuf::Descriptor* d, const std::string& prefix) {
        for (int i = 0; i < d->field_count(); ++i) {
          const auto* f = d->field(i);
          const std::string path = prefix.empty() ? f->json_name() : prefix + "." + f->json_name();
          EXPECT_NE(md.find("`" + path + "`"), std::string::npos) << path;
          if (f->message_type()) {
            walk(f->message_type(), path);
          } else {
            EXPECT_FALSE(f->options().GetExtension(spec).doc().empty()) << "no doc for " << path;
          }
        }
      };
  walk(CompileOptions::descriptor(), "");
}

TEST(ConfigSchema, DocsConfigMdIsCurrent) {
  const std::string doc = ::qbc::testing::read_file(::qbc::testing::source_dir() / "docs/config.md");
  const std::string begin = "<!-- BEGIN GENERATED: qbc dump-config --reference -->\n";
  const std::string end = "<!-- END GENERATED -->";
  const size_t b = doc.find(begin);
  const size_t e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), reference_markdown())
      << "docs/config.md is stale: regenerate with tools/update-docs.sh";
}

TEST(ConfigSchema, DefaultsValidate) {
  ResolvedConfig c;
  c.options = defaults();
  EXPECT_TRUE(validate(c).ok());
}

}  // namespace
}  // namespace qbc::config
