import ArgumentParser
import AsyncHTTPClient
import FCMCore
import FCMHTTP
import Foundation
import HeraldService
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Prometheus
import Synchronization

/// Herald's FCM sender (``FCMHTTPClient`` over Herald's own HTTP/2 client) against `h2load`, both
/// sending to the same `mock-fcm` process, in alternating rounds; AsyncHTTPClient alone, which the
/// sender used before, runs beside them as the alternative's cost.
struct FCMSenderBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fcm-sender",
        abstract: "Herald's FCM sender vs h2load on the same mock FCM: throughput, client CPU and latency per request.",
        discussion: """
            Starts mock-fcm as a child process with a generated service account (for Herald's \
            OAuth exchange) and a static access token (for h2load), then alternates rounds of \
            FCMHTTPClient.sendAll (batches of the free slots, as the pipeline sends), of bare AsyncHTTPClient (a pre-built body and the static \
            token: what the HTTP client the sender used before costs alone) and of h2load, each sending \
            --requests messages:send requests with --in-flight in flight over one HTTP/2 connection. Herald's CPU time is this \
            process's; h2load's is its own (wait4 rusage). Prints each round and the medians.
            """
    )

    @Option(help: "Requests per round and client.") var requests = 20_000
    @Option(help: "Rounds per client (medians are reported).") var rounds = 5
    @Option(help: "Requests in flight (one HTTP/2 connection; the mock allows 100 streams).") var inFlight = 100
    @Option(help: "Distinct registration tokens Herald's requests cycle through.") var tokens = 1_000
    @Option(help: "Path of the mock-fcm executable (default: next to herald-bench).") var mockFCM: String?
    @Option(help: "Path of h2load.") var h2load = "/usr/bin/h2load"

    static let projectID = "bench-project"
    static let package = "com.example.bench"
    static let message = #"{"notification":{"title":"Your order shipped","body":"Order 4711 is on its way"},"data":{"order":"4711"}}"#

    func run() async throws {
        var logger = Logger(label: "herald-bench")
        logger.logLevel = .error
        let workspace = try Workspace()
        let mock = try await MockFCMProcess.start(executable: mockFCM ?? Workspace.siblingExecutable("mock-fcm"), workspace: workspace)
        defer { print(mock.stop()) }

        var configuration = FCMClientConfiguration(
            baseURL: "https://127.0.0.1:\(mock.port)",
            credentials: FCMCredentials(fallback: mock.account),
            additionalTrustRootsPEMPath: mock.caPath
        )
        configuration.connections = 1  // as h2load's `-c 1`: the same connection count on both sides
        let client = try FCMHTTPClient(
            configuration: configuration,
            metricsFactory: HeraldApplication.metricsFactory(PrometheusCollectorRegistry()),
            logger: logger
        )
        let part = try FCMEventPart(
            json: Array(#"{"package":"\#(Self.package)","message":\#(Self.message)}"#.utf8),
            priority: 10,
            expiration: nil,
            collapseID: nil,
            nowMilliseconds: 0
        )
        let targets = SenderBenchmark.randomTokens(tokens)
        let requestsToSend = (0..<requests).map { part.request(to: .token(targets[$0 % targets.count])) }
        let h2loadClient = FCMH2LoadClient(executable: h2load, mock: mock, workspace: workspace)
        try h2loadClient.prepare(body: part.request(to: .token(targets[0])).body(nowMilliseconds: 0))

        print("FCM sender benchmark: \(requests) requests per round, \(inFlight) in flight on one connection, mock on port \(mock.port)")
        print("round  client   requests/s   CPU µs/request   p50 µs   p99 µs")
        var ratios: [Double] = []
        var heraldRuns: [(run: ClientRun, p50: Int64, p99: Int64)] = []
        var h2loadRuns: [(run: ClientRun, p50: Int64, p99: Int64)] = []
        var bareRuns: [(run: ClientRun, p50: Int64, p99: Int64)] = []
        let bare = try BareAsyncHTTPClient(mock: mock, body: part.request(to: .token(targets[0])).body(nowMilliseconds: 0), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await client.run() }
            defer { group.cancelAll() }
            // Warm-up: the access token, the connection and the pool's stream limit.
            _ = try await Self.sendAll(Array(requestsToSend.prefix(inFlight * 2)), through: client, inFlight: inFlight)
            _ = try await bare.sendAll(count: inFlight * 2, inFlight: inFlight)
            for round in 1...rounds {
                var latencies: [Int64] = []
                let heraldRun = try await ClientRun.measure(requests: requests, cpu: .thisProcess) {
                    latencies = try await Self.sendAll(requestsToSend, through: client, inFlight: inFlight)
                }
                latencies.sort()
                let herald: (run: ClientRun, p50: Int64, p99: Int64) = (heraldRun, percentile(latencies, 0.5), percentile(latencies, 0.99))
                let bareResult = try await bare.timedRound(requests: requests, inFlight: inFlight)
                let h2loadResult = try await h2loadClient.run(requests: requests, streams: inFlight)
                heraldRuns.append(herald)
                bareRuns.append(bareResult)
                h2loadRuns.append(h2loadResult)
                ratios.append(heraldRun.cpuMicrosecondsPerRequest / h2loadResult.run.cpuMicrosecondsPerRequest)
                for (name, result) in [("herald", herald), ("ahc   ", bareResult), ("h2load", h2loadResult)] {
                    print(
                        "\(round)      \(name)\(column(result.run.requestsPerSecond, decimals: 0, width: 13))\(column(result.run.cpuMicrosecondsPerRequest, width: 17))\(column(Double(result.p50), decimals: 0, width: 9))\(column(Double(result.p99), decimals: 0, width: 9))"
                    )
                }
            }
        }
        try await bare.shutdown()
        for (name, runs) in [("herald", heraldRuns), ("ahc", bareRuns), ("h2load", h2loadRuns)] {
            print(
                "median \(name): \(column(runs.map(\.run.requestsPerSecond).median, decimals: 0, width: 0)) requests/s, \(column(runs.map(\.run.cpuMicrosecondsPerRequest).median, width: 0)) CPU µs/request, latency p50 \(column(runs.map { Double($0.p50) }.median, decimals: 0, width: 0)) µs, p99 \(column(runs.map { Double($0.p99) }.median, decimals: 0, width: 0)) µs"
            )
        }
        print("herald/h2load CPU per request: median of rounds \(column(ratios.median, decimals: 2, width: 0)) (target <= 3)")
        print(
            "bare AsyncHTTPClient's CPU per request against Herald's: \(column(bareRuns.map(\.run.cpuMicrosecondsPerRequest).median / heraldRuns.map(\.run.cpuMicrosecondsPerRequest).median, decimals: 2, width: 0)) times"
        )
        print(
            "herald/h2load throughput: \(column(heraldRuns.map(\.run.requestsPerSecond).median / h2loadRuns.map(\.run.requestsPerSecond).median, decimals: 2, width: 0))"
        )
    }

    /// Sends every request with at most `inFlight` in flight, as the pipeline sends: each batch is
    /// as many requests as there are free slots, sent by one ``FCMHTTPClient/sendAll(_:deadline:answered:)``.
    /// Returns each request's latency in µs from its batch's start; throws unless every answer was a 200.
    static func sendAll(_ requests: [FCMRequest], through client: FCMHTTPClient, inFlight: Int) async throws -> [Int64] {
        try await sendInFreeSlotBatches(requests, inFlight: inFlight, service: "mock FCM") { batch, start, answered in
            await client.sendAll(batch, deadline: start + .seconds(10)) { _, answer in
                let response = try? answer.get()
                let refusal = response.map { "\($0.status) \($0.reason ?? "")" } ?? "no answer"
                answered(response?.status == 200 ? nil : refusal)
            }
        }
    }
}

/// Sends every request with at most `inFlight` in flight, as the pipeline sends: each batch is
/// as many requests as there are free slots, handed to `send` with its start, and `send` calls
/// `answered` once per request as its answer arrives, with nil for the expected answer or what
/// came instead. Returns each request's latency in µs from its batch's start; throws the last
/// unexpected answer of `service` when there was one.
func sendInFreeSlotBatches<Request: Sendable>(
    _ requests: [Request],
    inFlight: Int,
    service: String,
    send:
        @escaping @Sendable (_ batch: [Request], _ start: ContinuousClock.Instant, _ answered: @escaping @Sendable (_ refusal: String?) -> Void)
        async -> Void
) async throws -> [Int64] {
    let slots = FreeSlots(inFlight)
    let answers = AnswerLog()
    await withDiscardingTaskGroup { group in
        var next = requests.startIndex
        while next < requests.endIndex {
            let free = await slots.takeAll()
            let batch = Array(requests[next..<min(next + free, requests.endIndex)])
            next += batch.count
            group.addTask {
                let start = ContinuousClock.now
                await send(batch, start) { refusal in
                    answers.record(refusal, after: start.duration(to: .now))
                    slots.giveBack(delivered: refusal == nil)
                }
            }
        }
    }
    let (latencies, refusal) = answers.recorded
    if let refusal { throw ValidationError("\(service) answered \(refusal)") }
    return latencies
}

/// The sender benchmarks' answers: each request's latency in µs and the last answer that was
/// not the expected one.
private final class AnswerLog: Sendable {
    private let state = Mutex<(latencies: [Int64], refusal: String?)>(([], nil))

    /// Records an answer that came `latency` after its request: nil when it was the expected
    /// one, else what came instead.
    func record(_ refusal: String?, after latency: Duration) {
        let elapsed = latency.components
        state.withLock { state in
            state.latencies.append(elapsed.seconds * 1_000_000 + elapsed.attoseconds / 1_000_000_000_000)
            if let refusal { state.refusal = refusal }
        }
    }

    var recorded: (latencies: [Int64], refusal: String?) { state.withLock { $0 } }
}

/// AsyncHTTPClient alone, configured as ``FCMHTTPClient`` configured it before it sent over
/// Herald's own HTTP/2 client, posting one pre-built body with the mock's static access token:
/// what that HTTP client costs without Herald's code.
struct BareAsyncHTTPClient {
    let client: HTTPClient
    let url: String
    let token: String
    let body: ByteBuffer
    let logger: Logger

    init(mock: MockFCMProcess, body: [UInt8], logger: Logger) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(mock.caPath))]
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            redirectConfiguration: .disallow,
            timeout: HTTPClient.Configuration.Timeout(connect: .seconds(10)),
            decompression: .disabled
        )
        configuration.httpVersion = .automatic
        client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        url = "https://127.0.0.1:\(mock.port)/v1/projects/\(FCMSenderBenchmark.projectID)/messages:send"
        token = mock.staticToken
        self.body = ByteBuffer(bytes: body)
        self.logger = logger
    }

    func shutdown() async throws { try await client.shutdown() }

    func timedRound(requests: Int, inFlight: Int) async throws -> (run: ClientRun, p50: Int64, p99: Int64) {
        var latencies: [Int64] = []
        let run = try await ClientRun.measure(requests: requests, cpu: .thisProcess) {
            latencies = try await sendAll(count: requests, inFlight: inFlight)
        }
        latencies.sort()
        return (run, percentile(latencies, 0.5), percentile(latencies, 0.99))
    }

    /// `count` posts with `inFlight` workers; each answer's body is read; latencies in µs.
    func sendAll(count: Int, inFlight: Int) async throws -> [Int64] {
        let next = NextIndex()
        return try await withThrowingTaskGroup(of: [Int64].self) { group in
            for _ in 0..<inFlight {
                group.addTask {
                    var latencies: [Int64] = []
                    while next.take() < count {
                        let start = ContinuousClock.now
                        var post = HTTPClientRequest(url: url)
                        post.method = .POST
                        post.headers.add(name: "authorization", value: "Bearer \(token)")
                        post.headers.add(name: "content-type", value: "application/json; charset=utf-8")
                        post.body = .bytes(body)
                        let answer = try await client.execute(post, timeout: .seconds(10), logger: logger)
                        _ = try await answer.body.collect(upTo: 64 * 1024)
                        guard answer.status == .ok else { throw ValidationError("mock FCM answered \(answer.status)") }
                        let elapsed = start.duration(to: .now).components
                        latencies.append(elapsed.seconds * 1_000_000 + elapsed.attoseconds / 1_000_000_000_000)
                    }
                    return latencies
                }
            }
            var all: [Int64] = []
            for try await latencies in group { all += latencies }
            return all
        }
    }
}

/// The index of the next request to send, shared by the workers.
private final class NextIndex: Sendable {
    private let value = Atomic<Int>(0)

    func take() -> Int { value.add(1, ordering: .relaxed).oldValue }
}

/// `mock-fcm` as a child process: a generated service account and a static access token for h2load.
struct MockFCMProcess {
    let process: Process
    let port: Int
    let caPath: String
    let logPath: String
    let account: FCMServiceAccount
    /// The service-account key file the mock wrote (HERALD_FCM_SERVICE_ACCOUNT_PATH).
    let accountPath: String
    let staticToken: String

    static func start(executable: String, workspace: Workspace, extraArguments: [String] = []) async throws -> MockFCMProcess {
        let portFile = workspace.path("mock-fcm.port")
        let accountPath = workspace.path("fcm-service-account.json")
        let staticToken = "bench-" + UUID().uuidString.lowercased()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments =
            [
                "--port", "0", "--port-file", portFile, "--ca-out", workspace.path("mock-fcm-ca.pem"),
                "--write-service-account", "\(FCMSenderBenchmark.projectID)=\(accountPath)",
                "--static-access-token", "\(FCMSenderBenchmark.projectID)=\(staticToken)",
            ] + extraArguments
        process.standardOutput = FileHandle.nullDevice
        let logPath = workspace.path("mock-fcm.log")
        guard FileManager.default.createFile(atPath: logPath, contents: nil) else { throw ValidationError("cannot create \(logPath)") }
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        try process.run()
        for _ in 0..<400 {
            if let text = try? String(contentsOfFile: portFile, encoding: .utf8), let port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                let account = try FCMServiceAccount(json: Array(try Data(contentsOf: URL(fileURLWithPath: accountPath))))
                return MockFCMProcess(
                    process: process,
                    port: port,
                    caPath: workspace.path("mock-fcm-ca.pem"),
                    logPath: logPath,
                    account: account,
                    accountPath: accountPath,
                    staticToken: staticToken
                )
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.terminate()
        throw ValidationError("mock-fcm (\(executable)) did not start listening")
    }

    /// SIGTERM, then waits; returns the summary the mock prints as it stops.
    func stop() -> String {
        process.terminate()
        process.waitUntilExit()
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return log.split(separator: "\n").last.map(String.init) ?? ""
    }
}

/// `h2load` sending Herald's FCM message (one registration token: h2load cannot vary the body)
/// with the mock's static access token.
struct FCMH2LoadClient {
    let executable: String
    let mock: MockFCMProcess
    let workspace: Workspace

    private var bodyPath: String { workspace.path("fcm-body.json") }
    private var logPath: String { workspace.path("h2load-fcm.log") }

    func prepare(body: [UInt8]) throws {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ValidationError("h2load not found at \(executable) (Debian: apt-get install nghttp2-client)")
        }
        try Data(body).write(to: URL(fileURLWithPath: bodyPath))
    }

    /// One h2load run over one connection (``runH2Load(_:arguments:requests:logPath:)``).
    func run(requests: Int, streams: Int) async throws -> (run: ClientRun, p50: Int64, p99: Int64) {
        let arguments = [
            "-n", "\(requests)", "-c", "1", "-m", "\(streams)", "-t", "1",
            "-H", "authorization: Bearer \(mock.staticToken)", "-H", "content-type: application/json; charset=utf-8",
            "-d", bodyPath, "--log-file", logPath,
            "https://127.0.0.1:\(mock.port)/v1/projects/\(FCMSenderBenchmark.projectID)/messages:send",
        ]
        return try await runH2Load(executable, arguments: arguments, requests: requests, logPath: logPath)
    }
}

/// One h2load run with `arguments`, which write its per-request log to `logPath`: CPU from the
/// reaped child's rusage, latency percentiles (µs) from the log; throws unless every one of
/// `requests` succeeded with a 2xx.
func runH2Load(_ executable: String, arguments: [String], requests: Int, logPath: String) async throws -> (run: ClientRun, p50: Int64, p99: Int64) {
    try? FileManager.default.removeItem(atPath: logPath)
    var output = ""
    let run = try await ClientRun.measure(requests: requests, cpu: .reapedChildren) {
        output = try ChildProcess.runToCompletion(executable, arguments: arguments)
    }
    guard output.contains("\(requests) succeeded"), output.contains("\(requests) 2xx") else {
        throw ValidationError("h2load did not get \(requests) answers 2xx:\n\(output)")
    }
    // Each line: start time (µs since the epoch), status, time to the answer (µs).
    let log = try String(contentsOfFile: logPath, encoding: .utf8)
    let latencies = log.split(separator: "\n").compactMap { line in line.split(separator: "\t").dropFirst(2).first.flatMap { Int64($0) } }.sorted()
    return (run, percentile(latencies, 0.5), percentile(latencies, 0.99))
}
