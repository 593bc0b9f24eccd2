#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace qbc::testing {
namespace fs = std::filesystem;

fs::path source_dir() {
  const char* s = std::getenv("QBC_SOURCE_DIR");
  return fs::path(s && *s ? s : QBC_DEFAULT_SOURCE_DIR);
}

fs::path shared_dir() {
  if (const char* s = std::getenv("QBC_SHARED"); s && *s) return fs::path(s);
  return (source_dir() / ".." / "shared").lexically_normal();
}

namespace {
struct TempRoot {
  fs::path root;
  TempRoot() {
    std::string tmpl = (fs::temp_directory_path() / "qbc-test-XXXXXX").string();
    root = mkdtemp(tmpl.data());
  }
  ~TempRoot() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};
}  // namespace

fs::path temp_dir() {
  static TempRoot root;
  static std::atomic<int> counter{0};
  fs::path p = root.root / std::to_string(counter++);
  fs::create_directories(p);
  return p;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& path, const std::string& contents) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << contents;
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

std::string shell_quote(const fs::path& path) {
  std::string out = "'";
  for (const char c : path.string()) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

RunResult run_command(const std::string& command) {
  RunResult r;
  fs::path dir = temp_dir();
  std::string cmd = "{ " + command + "\n} >" + shell_quote(dir / "out") + " 2>" +
                    shell_quote(dir / "err") + " </dev/null";
  int rc = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.out = read_file(dir / "out");
  r.err = read_file(dir / "err");
  return r;
}

std::string qbc_binary() {
  const char* env = std::getenv("QBC_BINARY");
  return env && *env ? env : QBC_DEFAULT_BINARY;
}

RunResult run_qbc(const std::string& args) {
  return run_command(shell_quote(qbc_binary()) + " " + args);
}

}  // namespace qbc::testing
