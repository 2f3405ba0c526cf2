#include "runtime/comm/launch.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "rules/model/error.h"

extern char** environ;

namespace spmd::runtime {

std::string_view ToString(LaunchEnv::Source source) {
  switch (source) {
    case LaunchEnv::Source::kMpirun:
      return "mpirun";
    case LaunchEnv::Source::kRendezvous:
      return "rendezvous";
    case LaunchEnv::Source::kSingle:
      return "single";
  }
  return "single";
}

namespace {

using Clock = std::chrono::steady_clock;

// Rank 0's ompi-server, ended when the rendezvous times out.
std::atomic<pid_t> g_server{0};

std::optional<int64_t> IntVar(const std::function<const char*(const char*)>& get, const char* name,
                              int64_t lo, int64_t hi) {
  const char* v = get(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || x < lo || x > hi) {
    ThrowInvalid(name, "expected an integer from " + std::to_string(lo) + " to " +
                           std::to_string(hi) + ", got '" + std::string(v) + "'");
  }
  return x;
}

std::string Secs(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

uint64_t HashText(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string RankList(const std::vector<int64_t>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
  return out;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes `text` to `path` atomically (a temporary file renamed into place).
void WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) ThrowInvalid("SPMD_RENDEZVOUS", "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ThrowInvalid("SPMD_RENDEZVOUS", "cannot rename " + tmp + " to " + path);
  }
}

// Polls until `ready()` or the deadline; throws InvalidArgument naming `what` at the deadline.
void WaitFor(const std::function<bool()>& ready, double timeout_s, const std::string& what) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  while (!ready()) {
    if (Clock::now() > deadline) {
      ThrowInvalid("SPMD_RENDEZVOUS", what + " did not appear within " + Secs(timeout_s) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Ends the process if `done` is not set within the timeout (MPI_Comm_accept / connect
// cannot be polled): prints the message `describe()` gives and exits 1.
class Watchdog {
 public:
  Watchdog(double timeout_s, std::function<std::string()> describe)
      : thread_([this, timeout_s, describe = std::move(describe)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                            [this] { return done_; })) {
            std::fprintf(stderr, "spmd: %s\n", describe().c_str());
            std::fflush(stderr);
            if (const pid_t server = g_server.load(); server > 0) ::kill(server, SIGTERM);
            std::_Exit(1);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The rendezvous's files in DIR.
struct RendezvousFiles {
  std::string dir, uri, port;
  explicit RendezvousFiles(const std::string& d)
      : dir(d), uri(d + "/ompi-server.uri"), port(d + "/port") {}
  // Written by rank k once it has joined: rank k + 1 connects after it (one connection at
  // a time: concurrent connects to one port are not reliable in Open MPI 4).
  std::string joined(int64_t rank) const { return dir + "/joined" + std::to_string(rank); }
};

// Before MPI_Init: rank 0 starts ompi-server; every rank points Open MPI at it. Returns the
// server's pid on rank 0 (0 elsewhere).
pid_t PrepareRendezvous(const LaunchEnv& env) {
  const RendezvousFiles files(env.rendezvous);
  struct stat st {};
  if (::stat(env.rendezvous.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    ThrowInvalid("SPMD_RENDEZVOUS", "'" + env.rendezvous + "' is not a directory");
  }
  pid_t server = 0;
  if (env.rank == 0) {
    if (Exists(files.uri) || Exists(files.port) || Exists(files.joined(0))) {
      ThrowInvalid("SPMD_RENDEZVOUS", "'" + env.rendezvous +
                                          "' holds an earlier job's files (ompi-server.uri, port): "
                                          "give each job an empty directory");
    }
    const std::string uri_arg = files.uri;
    std::vector<std::string> args = {"ompi-server", "--no-daemonize", "-r", uri_arg};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (const int e =
            ::posix_spawnp(&server, "ompi-server", nullptr, nullptr, argv.data(), environ);
        e != 0) {
      ThrowInvalid("SPMD_RENDEZVOUS", std::string("cannot start ompi-server: ") + std::strerror(e));
    }
    g_server = server;
    WaitFor(
        [&] {
          const std::string text = ReadAll(files.uri);
          return !text.empty() && text.back() == '\n';
        },
        env.rendezvous_timeout_s, "ompi-server's address (" + files.uri + ")");
  } else {
    // The port file is written after the server's address is complete.
    WaitFor([&] { return Exists(files.port); }, env.rendezvous_timeout_s,
            "rank 0's port (" + files.port + ")");
  }
  ::setenv("OMPI_MCA_pmix_server_uri", ("file:" + files.uri).c_str(), 1);
  return server;
}

int Size(MPI_Comm comm) {
  int s = 0;
  MPI_Comm_size(comm, &s);
  return s;
}

// After MPI_Init (a singleton): connects the ranks into one communicator ordered by
// SPMD_RANK.
MPI_Comm Rendezvous(const LaunchEnv& env) {
  const RendezvousFiles files(env.rendezvous);
  MPI_Comm comm = MPI_COMM_NULL;
  char port[MPI_MAX_PORT_NAME] = {};
  std::atomic<int> arrived{1};
  std::mutex stage_mu;
  std::string stage = "starting";
  auto set_stage = [&](std::string text) {
    std::lock_guard<std::mutex> lock(stage_mu);
    stage = std::move(text);
  };
  {
    const Watchdog watchdog(env.rendezvous_timeout_s, [&] {
      std::lock_guard<std::mutex> lock(stage_mu);
      return "rank " + std::to_string(env.rank) + ": the rendezvous in " + env.rendezvous +
             " timed out after " + Secs(env.rendezvous_timeout_s) + " s " + stage + ": " +
             std::to_string(arrived.load()) + " of " + std::to_string(env.world_size) +
             " ranks had connected";
    });
    if (env.rank == 0) {
      MPI_Open_port(MPI_INFO_NULL, port);
      WriteAtomically(files.port, std::string(port) + "\n");
      MPI_Comm_dup(MPI_COMM_SELF, &comm);
      WriteAtomically(files.joined(0), "\n");
    } else {
      // The watchdog ends the wait (its deadline comes first).
      set_stage("waiting for rank " + std::to_string(env.rank - 1) + " to join");
      WaitFor(
          [&] { return Exists(files.joined(env.rank - 1)); }, env.rendezvous_timeout_s + 5,
          "rank " + std::to_string(env.rank - 1) + "'s turn (" + files.joined(env.rank - 1) + ")");
      std::string text = ReadAll(files.port);
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      std::snprintf(port, sizeof port, "%s", text.c_str());
      set_stage("connecting to rank 0");
      MPI_Comm inter = MPI_COMM_NULL;
      if (MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter) != MPI_SUCCESS) {
        ThrowInvalid("SPMD_RENDEZVOUS", "cannot connect to rank 0's port");
      }
      MPI_Intercomm_merge(inter, 1, &comm);
      MPI_Comm_free(&inter);
      WriteAtomically(files.joined(env.rank), "\n");
    }
    arrived = Size(comm);
    while (Size(comm) < env.world_size) {
      set_stage("waiting for rank " + std::to_string(Size(comm)) + " to connect");
      MPI_Comm inter = MPI_COMM_NULL;
      MPI_Comm_accept(port, MPI_INFO_NULL, 0, comm, &inter);
      MPI_Comm merged = MPI_COMM_NULL;
      MPI_Intercomm_merge(inter, 0, &merged);
      MPI_Comm_free(&inter);
      MPI_Comm_free(&comm);
      comm = merged;
      arrived = Size(comm);
    }
  }
  if (env.rank == 0) MPI_Close_port(port);
  // Every rank says who it is: SPMD_RANK must be distinct and SPMD_WORLD_SIZE the same.
  int64_t mine[2] = {env.rank, env.world_size};
  std::vector<int64_t> all(2 * env.world_size);
  MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, comm);
  std::map<int64_t, int> seen;
  for (int64_t i = 0; i < env.world_size; ++i) {
    if (all[2 * i + 1] != env.world_size) {
      ThrowInvalid("SPMD_WORLD_SIZE", "the processes disagree: " + std::to_string(all[2 * i + 1]) +
                                          " and " + std::to_string(env.world_size));
    }
    if (++seen[all[2 * i]] > 1) {
      ThrowInvalid("SPMD_RANK", "two processes are rank " + std::to_string(all[2 * i]));
    }
  }
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_split(comm, 0, static_cast<int>(env.rank), &world);
  MPI_Comm_free(&comm);
  return world;
}

}  // namespace

LaunchEnv ReadLaunchEnv(const std::function<const char*(const char*)>& get_env) {
  const std::function<const char*(const char*)> get =
      get_env ? get_env : [](const char* name) -> const char* { return std::getenv(name); };
  constexpr int64_t kMaxRanks = int64_t{1} << 24;
  LaunchEnv env;
  const auto ompi_size = IntVar(get, "OMPI_COMM_WORLD_SIZE", 1, kMaxRanks);
  const auto ompi_rank = IntVar(get, "OMPI_COMM_WORLD_RANK", 0, kMaxRanks - 1);
  const auto ompi_local = IntVar(get, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks - 1);
  const auto size = IntVar(get, "SPMD_WORLD_SIZE", 1, kMaxRanks);
  const auto rank = IntVar(get, "SPMD_RANK", 0, kMaxRanks - 1);
  if (const auto t = get("SPMD_RENDEZVOUS_TIMEOUT_S"); t != nullptr && *t != '\0') {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(v > 0) || v > 1e6) {
      ThrowInvalid("SPMD_RENDEZVOUS_TIMEOUT_S",
                   std::string("expected a positive number of seconds, got '") + t + "'");
    }
    env.rendezvous_timeout_s = v;
  }
  if (ompi_rank.has_value() != ompi_size.has_value()) {
    ThrowInvalid(ompi_rank ? "OMPI_COMM_WORLD_SIZE" : "OMPI_COMM_WORLD_RANK",
                 "set without its partner");
  }
  if (rank.has_value() != size.has_value()) {
    ThrowInvalid(rank ? "SPMD_WORLD_SIZE" : "SPMD_RANK",
                 "set without its partner (SPMD_RANK and SPMD_WORLD_SIZE go together)");
  }
  if (ompi_rank) {
    if (*ompi_rank >= *ompi_size) {
      ThrowInvalid("OMPI_COMM_WORLD_RANK", std::to_string(*ompi_rank) + " is not below the size " +
                                               std::to_string(*ompi_size));
    }
    if (rank && (*rank != *ompi_rank || *size != *ompi_size)) {
      ThrowInvalid("SPMD_RANK", "rank " + std::to_string(*rank) + " of " + std::to_string(*size) +
                                    " disagrees with mpirun's rank " + std::to_string(*ompi_rank) +
                                    " of " + std::to_string(*ompi_size));
    }
    env.source = LaunchEnv::Source::kMpirun;
    env.rank = *ompi_rank;
    env.world_size = *ompi_size;
    env.local_rank = ompi_local.value_or(0);
    return env;
  }
  if (!rank) return env;  // one process
  if (*rank >= *size) {
    ThrowInvalid("SPMD_RANK",
                 std::to_string(*rank) + " is not below SPMD_WORLD_SIZE " + std::to_string(*size));
  }
  env.rank = *rank;
  env.world_size = *size;
  const char* dir = get("SPMD_RENDEZVOUS");
  if (*size > 1) {
    if (dir == nullptr || *dir == '\0') {
      ThrowInvalid("SPMD_RENDEZVOUS",
                   "a world of " + std::to_string(*size) +
                       " ranks started without mpirun needs a rendezvous directory");
    }
    env.rendezvous = dir;
    env.source = LaunchEnv::Source::kRendezvous;
  }
  return env;
}

Mesh AgreeOnMesh(Communicator& comm, const std::string& spec,
                 const std::function<Mesh(const std::string&)>& parse) {
  const int64_t n = comm.world_size();
  Group world(n);
  for (int64_t r = 0; r < n; ++r) world[r] = r;
  comm.SetPhase("agreeing on the mesh");
  const int64_t mine[2] = {static_cast<int64_t>(HashText(spec) & 0x7fffffffffffffffull),
                           static_cast<int64_t>(spec.size())};
  std::vector<int64_t> heads(2 * n);
  const std::vector<int64_t> two(n, 2);
  comm.AllGather(mine, heads.data(), two, DType::kInt64, world);
  comm.Synchronize();
  bool same = true;
  for (int64_t r = 0; r < n; ++r)
    same = same && heads[2 * r] == heads[0] && heads[2 * r + 1] == heads[1];
  if (!same) {
    // The texts themselves, one int64 per byte, to name what each rank asked for.
    std::vector<int64_t> lengths(n), text(spec.begin(), spec.end());
    int64_t total = 0;
    for (int64_t r = 0; r < n; ++r) total += lengths[r] = heads[2 * r + 1];
    std::vector<int64_t> all(total);
    comm.AllGather(text.data(), all.data(), lengths, DType::kInt64, world);
    comm.Synchronize();
    std::map<std::string, std::vector<int64_t>> by_text;
    std::vector<std::string> order;
    int64_t at = 0;
    for (int64_t r = 0; r < n; ++r) {
      std::string s(all.begin() + at, all.begin() + at + lengths[r]);
      at += lengths[r];
      if (!by_text.count(s)) order.push_back(s);
      by_text[s].push_back(r);
    }
    // The most common spec first (ties: the one rank 0 asked for).
    std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
      return by_text[a].size() > by_text[b].size();
    });
    std::string message = "the ranks disagree on the mesh:";
    for (size_t i = 0; i < order.size(); ++i) {
      const auto& ranks = by_text[order[i]];
      message += (i ? "; " : " ") + RankList(ranks) + (ranks.size() == 1 ? " asks" : " ask") +
                 " for '" + order[i] + "'";
    }
    ThrowInvalid("mesh", message);
  }
  Mesh mesh = parse(spec);
  if (mesh.size() != n) {
    ThrowInvalid("mesh", "'" + spec + "' has " + std::to_string(mesh.size()) +
                             " ranks, the world has " + std::to_string(n));
  }
  return mesh;
}

int LaunchMain(int argc, char** argv, const std::string& mesh_spec,
               const std::function<int(MpiCommunicator&, const Mesh&)>& body,
               const std::function<Mesh(const std::string&)>& parse) {
  LaunchEnv env;
  pid_t server = 0;
  try {
    env = ReadLaunchEnv();
    if (env.source == LaunchEnv::Source::kRendezvous) server = PrepareRendezvous(env);
  } catch (const SpmdError& e) {
    std::fprintf(stderr, "spmd: rank %lld: %s: %s\n", static_cast<long long>(env.rank),
                 std::string(ToString(e.type())).c_str(), e.what());
    if (server > 0) ::kill(server, SIGTERM);
    return 2;
  }
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    std::unique_ptr<MpiCommunicator> comm;
    MPI_Comm world = MPI_COMM_WORLD;
    bool usage_error = false;
    try {
      if (env.source == LaunchEnv::Source::kRendezvous) world = Rendezvous(env);
      comm = std::make_unique<MpiCommunicator>(world);
      Mesh mesh;
      try {
        mesh = AgreeOnMesh(*comm, mesh_spec, parse);
      } catch (const SpmdError& e) {
        // The same error on every rank: each says it and ends normally.
        std::fprintf(stderr, "spmd: rank %lld: %s: %s\n", static_cast<long long>(comm->rank()),
                     std::string(ToString(e.type())).c_str(), e.what());
        usage_error = true;
      }
      if (!usage_error) {
        code = body(*comm, mesh);
        comm->Synchronize();
      } else {
        code = 2;
      }
    } catch (const std::exception& e) {
      const std::string message =
          comm ? FailureMessage(*comm, e.what())
               : "rank " + std::to_string(env.rank) + " failed before any collective: " + e.what();
      std::fprintf(stderr, "spmd: %s\n", message.c_str());
      if (comm) comm->DumpFlightRecord(message.c_str(), /*final=*/true);
      std::fflush(stderr);
      if (server > 0) ::kill(server, SIGTERM);
      MPI_Abort(world, 1);
    }
    comm.reset();
    if (world != MPI_COMM_WORLD) MPI_Comm_free(&world);
  }
  MPI_Finalize();
  if (server > 0) {
    ::kill(server, SIGTERM);
    ::waitpid(server, nullptr, 0);
  }
  return code;
}

}  // namespace spmd::runtime
