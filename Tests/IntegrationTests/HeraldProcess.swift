import Foundation

/// The real `herald run` executable as a child process, so tests can SIGKILL and SIGTERM it.
final class HeraldProcess: @unchecked Sendable {
    // @unchecked: `process` is only touched from the test's own task; Foundation's Process is
    // itself thread-safe for `terminate`, `isRunning` and `processIdentifier`.
    private let process = Process()
    let environment: [String: String]
    let logPath: String

    /// Starts `herald run` with exactly `environment` (plus PATH), logging to `logPath`.
    init(environment: [String: String], logPath: String) throws {
        guard let binary = ProcessInfo.processInfo.environment["HERALD_BIN"] else {
            throw TestFailure("HERALD_BIN is not set: run the tests through scripts/test.sh")
        }
        self.environment = environment
        self.logPath = logPath
        if !FileManager.default.fileExists(atPath: logPath) {
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        log.seekToEndOfFile()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["run"]
        var variables = environment
        variables["PATH"] = ProcessInfo.processInfo.environment["PATH"]
        variables["HERALD_LOG_FORMAT"] = "text"
        process.environment = variables
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    var isRunning: Bool { process.isRunning }

    /// Sends `signal` (SIGKILL, SIGTERM…).
    func send(_ signal: Int32) {
        kill(process.processIdentifier, signal)
    }

    /// Waits up to `timeout` for the process to exit; returns its exit status, or nil on time-out.
    func waitForExit(timeout: Duration) async throws -> Int32? {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while process.isRunning {
            guard clock.now < deadline else { return nil }
            try await Task.sleep(for: .milliseconds(50))
        }
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// A free loopback TCP port (bound to 0, then released).
func freePort() throws -> Int {
    let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(socketFD) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
            bind(socketFD, socketAddress, length) == 0 && getsockname(socketFD, socketAddress, &length) == 0
        }
    }
    guard bound else { throw TestFailure("could not find a free port") }
    return Int(UInt16(bigEndian: address.sin_port))
}
