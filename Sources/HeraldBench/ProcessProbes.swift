import Foundation

/// CPU and memory of processes and of the machine, read from /proc (Linux).
enum ProcStats {
    static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// The bytes of a file ([] if it cannot be read, e.g. the process is gone).
    static func read(_ path: String) -> [UInt8] {
        (try? Data(contentsOf: URL(fileURLWithPath: path))).map { Array($0) } ?? []
    }

    /// utime + stime + cutime + cstime of `pid` in clock ticks (its CPU plus that of its reaped
    /// children, so a PostgreSQL backend that exits still counts, in the postmaster); 0 if gone.
    static func cpuTicks(_ pid: Int32) -> Int64 {
        let text = String(decoding: read("/proc/\(pid)/stat"), as: UTF8.self)
        guard let paren = text.lastIndex(of: ")") else { return 0 }
        // After the command's closing parenthesis: field 3 (state) is [0], fields 14...17 are [11...14].
        let fields = text[text.index(after: paren)...].split(separator: " ")
        guard fields.count > 14 else { return 0 }
        return fields[11...14].compactMap { Int64($0) }.reduce(0, +)
    }

    /// A `kB` line of /proc/<pid>/status (`VmRSS`, `VmHWM`), in kilobytes; 0 if gone.
    static func statusKilobytes(_ pid: Int32, _ key: String) -> Int64 {
        let text = String(decoding: read("/proc/\(pid)/status"), as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("\(key):") }) else { return 0 }
        return line.split(separator: " ").dropFirst().first.flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) } ?? 0
    }

    /// Processes whose name (`comm`) and command line match, like `pgrep -f`, without spawning a
    /// child (Foundation's Process can miss a short-lived child's exit while others run).
    static func pids(where matches: (_ comm: String, _ commandLine: String) -> Bool) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap(Int32.init).filter { pid in
            let comm = String(decoding: read("/proc/\(pid)/comm"), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            let commandLine = String(decoding: read("/proc/\(pid)/cmdline").map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
            return matches(comm, commandLine)
        }
    }

    /// Context switches (voluntary and not) of every live thread of `pid`, summed over
    /// /proc/<pid>/task/*/status; a thread that ended no longer counts.
    static func contextSwitches(_ pid: Int32) -> Int64 {
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return threads.reduce(0) { total, thread in
            let text = String(decoding: read("/proc/\(pid)/task/\(thread)/status"), as: UTF8.self)
            return total + counters(in: text, ["voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"])
        }
    }

    /// The read-like and write-like system calls of `pid` so far (/proc/<pid>/io `syscr` +
    /// `syscw`: reads, writes, sends and receives, not polls, futexes or the rest); 0 if gone.
    static func readWriteSyscalls(_ pid: Int32) -> Int64 {
        counters(in: String(decoding: read("/proc/\(pid)/io"), as: UTF8.self), ["syscr", "syscw"])
    }

    /// The sum of the `name: value` lines of `text` named in `names`.
    private static func counters(in text: String, _ names: [String]) -> Int64 {
        text.split(separator: "\n").reduce(0) { total, line in
            let parts = line.split(separator: ":")
            guard parts.count == 2, names.contains(String(parts[0])) else { return total }
            return total + (Int64(parts[1].trimmingCharacters(in: .whitespaces)) ?? 0)
        }
    }

    /// Busy and total clock ticks of all CPUs since boot (/proc/stat; idle and iowait are not busy).
    static func machineTicks() -> (busy: Int64, total: Int64) {
        let text = String(decoding: read("/proc/stat"), as: UTF8.self)
        let values = (text.split(separator: "\n").first ?? "").split(separator: " ").dropFirst().prefix(8).compactMap { Int64($0) }
        guard values.count == 8 else { return (0, 0) }
        let total = values.reduce(0, +)
        return (total - values[3] - values[4], total)
    }
}

/// CPU time of named groups of processes, this process and the machine at one instant.
struct CPUSample {
    var ticks: [String: Int64]
    var machine: (busy: Int64, total: Int64)
    var benchMicroseconds: Int64
    /// Herald's context switches and read/write system calls (``ProcStats``), over its instances.
    var heraldContextSwitches: Int64 = 0
    var heraldReadWriteSyscalls: Int64 = 0

    static func take(_ groups: [String: [Int32]]) -> CPUSample {
        let herald = groups["herald"] ?? []
        return CPUSample(
            ticks: groups.mapValues { $0.map(ProcStats.cpuTicks).reduce(0, +) },
            machine: ProcStats.machineTicks(),
            benchMicroseconds: CPUTime.thisProcess.microseconds,
            heraldContextSwitches: herald.map(ProcStats.contextSwitches).reduce(0, +),
            heraldReadWriteSyscalls: herald.map(ProcStats.readWriteSyscalls).reduce(0, +)
        )
    }
}

/// One `herald run` child process with its own health port and log file.
struct HeraldChild {
    let process = Process()
    let port: Int
    let logPath: String

    init(executable: String, environment: [String: String], logPath: String) throws {
        port = try freeLoopbackPort()
        self.logPath = logPath
        var variables = environment
        variables["HERALD_HTTP_PORT"] = "\(port)"
        variables["PATH"] = ProcessInfo.processInfo.environment["PATH"]
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["run"]
        process.environment = variables
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }

    /// Polls GET /health/ready every 200 ms until it answers 200; throws after 60 s or if herald exits.
    func waitUntilReady() async throws {
        for _ in 0..<300 {
            guard process.isRunning else {
                throw BenchFailure("herald exited with \(process.terminationStatus) before it was ready")
            }
            if httpStatus(port: port, path: "/health/ready") == 200 { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw BenchFailure("herald (pid \(pid)) was not ready after 60 s")
    }

    /// SIGTERM, then waits up to 60 s for the exit (SIGKILL after that); returns the exit status.
    func stop() async throws -> Int32 {
        if process.isRunning { process.terminate() }
        for _ in 0..<600 where process.isRunning {
            try await Task.sleep(for: .milliseconds(100))
        }
        guard !process.isRunning else {
            killIfRunning()
            throw BenchFailure("herald (pid \(pid)) did not exit within 60 s of SIGTERM; killed")
        }
        return process.terminationStatus
    }

    /// SIGKILL, for clean-up after a failure.
    func killIfRunning() {
        if process.isRunning { kill(pid, SIGKILL) }
    }
}

/// A loopback TCP port that was free a moment ago (bound to 0, then released).
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = loopbackAddress(port: 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw BenchFailure("no free loopback port") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// The status code of `GET path` on 127.0.0.1:`port`, or nil when nothing answers.
func httpStatus(port: Int, path: String) -> Int? {
    httpGet(port: port, path: path)?.status
}

/// `GET path` on 127.0.0.1:`port`: the status code and the body, or nil when nothing answers.
func httpGet(port: Int, path: String) -> (status: Int, body: String)? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var timeout = timeval(tv_sec: 2, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = loopbackAddress(port: port)
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
    let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
    guard connected, write(fd, request, request.count) == request.count else { return nil }
    var response: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = Glibc.read(fd, &buffer, buffer.count)
        guard count > 0 else { break }
        response += buffer[0..<count]
    }
    // "HTTP/1.1 200 OK\r\n…\r\n\r\nbody"
    guard response.count >= 12, let status = Int(String(decoding: response[9..<12], as: UTF8.self)) else { return nil }
    let separator = Array("\r\n\r\n".utf8)
    let body = response.firstRange(of: separator).map { String(decoding: response[$0.upperBound...], as: UTF8.self) } ?? ""
    return (status, body)
}

private func loopbackAddress(port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    return address
}
