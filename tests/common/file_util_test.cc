// common/file_util: the atomic write keeps the old file or writes all of the new one, and leaves
// no temporary file behind, on success and on each kind of failure.
#include "common/file_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace rdattn {
namespace {

namespace fs = std::filesystem;

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "rdattn-file-util-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::vector<std::string> Entries() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    return names;
  }

  fs::path dir_;
};

TEST_F(FileUtilTest, WritesAndReplacesWithNoTemporaryLeft) {
  const std::string path = (dir_ / "a.json").string();
  ASSERT_TRUE(WriteFileAtomically(path, "first\n").ok());
  EXPECT_EQ(Read(path), "first\n");
  std::string big(1 << 20, 'x');
  big[12345] = '\0';  // binary contents survive
  ASSERT_TRUE(WriteFileAtomically(path, big).ok());
  EXPECT_EQ(Read(path), big);
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(fs::file_size(path), 0u);
  EXPECT_EQ(Entries(), std::vector<std::string>{"a.json"});
}

TEST_F(FileUtilTest, SetsTheModeExactly) {
  const std::string path = (dir_ / "secret").string();
  const mode_t old = ::umask(0077);
  ASSERT_TRUE(WriteFileAtomically(path, "k", 0644).ok());
  ::umask(old);
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  ASSERT_TRUE(WriteFileAtomically(path, "k", 0600).ok());
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(FileUtilTest, MissingFolderIsFailedPreconditionNamingThePath) {
  const std::string path = (dir_ / "no" / "such" / "file").string();
  const Status st = WriteFileAtomically(path, "x");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No such file or directory"), std::string::npos) << st.message();
  EXPECT_TRUE(Entries().empty());
}

TEST_F(FileUtilTest, RenameFailureLeavesTheTargetAndNoTemporary) {
  // A folder where the file should go: rename(2) of a file over a folder fails (EISDIR).
  const fs::path path = dir_ / "taken";
  fs::create_directory(path);
  const Status st = WriteFileAtomically(path.string(), "x");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("cannot rename into place"), std::string::npos) << st.message();
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_EQ(Entries(), std::vector<std::string>{"taken"});
}

TEST_F(FileUtilTest, ShortWriteIsDataLossAndKeepsTheOldContents) {
  // A file size limit makes write(2) fail part way (EFBIG), as a full disk would.
  const std::string path = (dir_ / "state").string();
  ASSERT_TRUE(WriteFileAtomically(path, "old contents").ok());
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &previous), 0);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  int err = 0;
  const Status st = WriteFileAtomically(path, std::string(100000, 'y'), 0644, &err);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  EXPECT_EQ(err, EFBIG);  // the errno of the failing write, for the caller's classification
  ::sigaction(SIGXFSZ, &previous, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find(path + ": write failed"), std::string::npos) << st.message();
  EXPECT_EQ(Read(path), "old contents");
  EXPECT_EQ(Entries(), std::vector<std::string>{"state"});
}

TEST_F(FileUtilTest, ErrorNumberOfTheFailingCallAndWriteAll) {
  int err = 0;
  EXPECT_FALSE(WriteFileAtomically((dir_ / "no" / "file").string(), "x", 0644, &err).ok());
  EXPECT_EQ(err, ENOENT);
  err = 0;
  EXPECT_FALSE(FsyncPath((dir_ / "missing").string(), &err).ok());
  EXPECT_EQ(err, ENOENT);
  // A full disk: /dev/full fails every write with ENOSPC.
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(full, 0);
  errno = 0;
  EXPECT_FALSE(WriteAll(full, "abc", 3));
  EXPECT_EQ(errno, ENOSPC);
  ::close(full);
  const std::string path = (dir_ / "all").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const std::string text(1 << 20, 'z');
  EXPECT_TRUE(WriteAll(fd, text.data(), text.size()));
  ::close(fd);
  EXPECT_EQ(Read(path), text);
}

TEST_F(FileUtilTest, EmptyPathIsInvalidArgument) {
  EXPECT_EQ(WriteFileAtomically("", "x").code(), StatusCode::kInvalidArgument);
}

TEST_F(FileUtilTest, FsyncPathOfFileAndFolder) {
  const std::string path = (dir_ / "f").string();
  ASSERT_TRUE(WriteFileAtomically(path, "x").ok());
  EXPECT_TRUE(FsyncPath(path).ok());
  EXPECT_TRUE(FsyncPath(dir_.string()).ok());
  const Status st = FsyncPath((dir_ / "missing").string());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("missing"), std::string::npos);
}

// ReadFile: every byte (binary, bigger than its buffer); errors name the path and the reason.
TEST_F(FileUtilTest, ReadFileReadsEveryByteAndNamesThePathOnErrors) {
  const std::string path = (dir_ / "blob").string();
  std::string blob;
  for (int i = 0; i < 200000; ++i) blob.push_back(static_cast<char>(i * 7 % 256));
  ASSERT_TRUE(WriteFileAtomically(path, blob).ok());
  StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, blob);
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(ReadFile(path).value(), "");

  const std::string missing = (dir_ / "missing").string();
  const Status no_file = ReadFile(missing).status();
  EXPECT_EQ(no_file.code(), StatusCode::kNotFound);
  EXPECT_EQ(no_file.message(), missing + ": No such file or directory");
  const Status folder = ReadFile(dir_.string()).status();
  EXPECT_EQ(folder.code(), StatusCode::kDataLoss);
  EXPECT_EQ(folder.message(), dir_.string() + ": read failed: Is a directory");
}

}  // namespace
}  // namespace rdattn
