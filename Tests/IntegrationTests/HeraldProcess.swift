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
        let binary = try TestEnvironment.heraldBinary
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

/// The HTTP status of `GET path` on a loopback port, or nil when nothing answers.
func httpStatus(port: Int, path: String) -> Int? {
    httpGet(port: port, path: path)?.status
}

/// A TCP connection to `port` on 127.0.0.1 with a 5 s read time-out; nil when refused.
func connectLoopback(port: Int) -> Int32? {
    let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(socketFD, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    let connected = withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(socketFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
        }
    }
    guard connected else {
        close(socketFD)
        return nil
    }
    return socketFD
}

/// The status and body of `GET path` on a loopback port, or nil when nothing answers.
func httpGet(port: Int, path: String) -> (status: Int, body: String)? {
    guard let socketFD = connectLoopback(port: port) else { return nil }
    defer { close(socketFD) }
    let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
    guard write(socketFD, request, request.count) == request.count else { return nil }
    // The server closes the connection after its answer ("Connection: close").
    var response: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = read(socketFD, &buffer, buffer.count)
        guard count > 0 else { break }
        response += buffer[..<count]
    }
    // "HTTP/1.1 200 OK\r\n…\r\n\r\nbody"
    guard response.count > 12, let status = Int(String(decoding: response[9..<12], as: UTF8.self)) else { return nil }
    let text = String(decoding: response, as: UTF8.self)
    let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
    return (status, body)
}

/// The project's local-services script (scripts/services.sh), for outage drills.
/// `scripts/services.sh` commands (outage drills) run from tests.
///
/// Spawned with posix_spawn and reaped with waitpid: Foundation's `Process` sometimes never
/// noticed this short-lived child exit while a `herald` child was running (the bash stayed a
/// zombie and `isRunning` true), which stalled the PostgreSQL-outage test for good.
enum LocalServices {
    static func run(_ command: String) async throws {
        let pid = try spawn(command)
        while true {
            if let status = try reap(pid, blocking: false) { return try check(status, command) }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// For clean-up in a `defer`, where nothing can be awaited.
    static func runBlocking(_ command: String) throws {
        let pid = try spawn(command)
        while true {
            if let status = try reap(pid, blocking: true) { return try check(status, command) }
        }
    }

    private static func spawn(_ command: String) throws -> pid_t {
        let script = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("scripts/services.sh").path
        let arguments = ["/bin/bash", script, command]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, "/bin/bash", nil, nil, &argv, environ)
        guard result == 0 else { throw TestFailure("services.sh \(command): posix_spawn failed (\(result))") }
        return pid
    }

    /// The wait status once `pid` exited, nil while it runs (only when not `blocking`).
    private static func reap(_ pid: pid_t, blocking: Bool) throws -> Int32? {
        var status: Int32 = 0
        let result = waitpid(pid, &status, blocking ? 0 : WNOHANG)
        if result == pid { return status }
        if result == 0 || (result == -1 && errno == EINTR) { return nil }
        throw TestFailure("waitpid(\(pid)) failed: errno \(errno)")
    }

    private static func check(_ status: Int32, _ command: String) throws {
        // Exited normally with code 0: WIFEXITED and WEXITSTATUS == 0 both mean status == 0.
        guard status == 0 else { throw TestFailure("services.sh \(command) failed (wait status \(status))") }
    }
}

/// One HTTP/1.1 keep-alive connection, as Prometheus keeps to a scrape target.
final class KeepAliveHTTPConnection {
    private let socketFD: Int32

    init?(port: Int) {
        guard let socketFD = connectLoopback(port: port) else { return nil }
        self.socketFD = socketFD
    }

    deinit { close(socketFD) }

    /// `GET path` on this connection, left open: the status, the headers (names lowercased) and
    /// the body, read by its `content-length`; nil when the server closed the connection.
    func get(_ path: String) -> (status: Int, headers: [String: String], body: String)? {
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard write(socketFD, request, request.count) == request.count else { return nil }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            if let end = response.firstRange(of: Array("\r\n\r\n".utf8)) {
                let head = String(decoding: response[..<end.lowerBound], as: UTF8.self).split(separator: "\r\n")
                var headers: [String: String] = [:]
                for line in head.dropFirst() {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
                let length = Int(headers["content-length"] ?? "0") ?? 0
                if response.count - end.upperBound >= length, let statusText = head.first?.split(separator: " ").dropFirst().first,
                    let status = Int(statusText)
                {
                    return (status, headers, String(decoding: response[end.upperBound..<(end.upperBound + length)], as: UTF8.self))
                }
            }
            let count = read(socketFD, &buffer, buffer.count)
            guard count > 0 else { return nil }
            response += buffer[..<count]
        }
    }

    /// Whether the server closes this connection within `timeout` (it sends nothing more).
    func isClosedByServer(within timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        var byte: UInt8 = 0
        while ContinuousClock.now < deadline {
            let count = read(socketFD, &byte, 1)
            if count == 0 { return true }
            if count < 0 && errno != EAGAIN && errno != EWOULDBLOCK { return true }
        }
        return false
    }
}

/// A TCP forwarder from one loopback port to another (a Python child process), for an
/// endpoint that starts answering later with the same certificate as an existing mock.
final class LoopbackForwarder {
    private let process = Process()

    /// `refusingTLS`: answers a PostgreSQL SSLRequest with `N` itself (a server that offers no
    /// TLS), whatever the target would say, and forwards the rest.
    init(from listenPort: Int, to targetPort: Int, directory: URL, refusingTLS: Bool = false) throws {
        let script = directory.appendingPathComponent("forward-\(listenPort).py")
        try """
        import asyncio
        async def pipe(reader, writer):
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            finally:
                writer.close()
        SSL_REQUEST = bytes([0, 0, 0, 8, 4, 210, 22, 47])
        async def handle(client_reader, client_writer):
            first = b""
            if \(refusingTLS ? "True" : "False"):
                first = await client_reader.readexactly(8)
                if first == SSL_REQUEST:
                    client_writer.write(b"N")
                    await client_writer.drain()
                    first = b""
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", \(targetPort))
            server_writer.write(first)
            await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer), return_exceptions=True)
        async def main():
            server = await asyncio.start_server(handle, "127.0.0.1", \(listenPort))
            print("listening", flush=True)
            async with server:
                await server.serve_forever()
        asyncio.run(main())
        """.write(to: script, atomically: true, encoding: .utf8)
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path]
        process.standardOutput = output
        try process.run()
        // Returns once it listens ("listening"), or throws when it exits first.
        let line = output.fileHandleForReading.availableData
        guard String(decoding: line, as: UTF8.self).hasPrefix("listening") else {
            throw TestFailure("the forwarder to port \(targetPort) did not start")
        }
    }

    /// Stops the forwarder (not waited for: Foundation's `waitUntilExit` can spin on Linux).
    func stop() {
        kill(process.processIdentifier, SIGKILL)
    }
}
