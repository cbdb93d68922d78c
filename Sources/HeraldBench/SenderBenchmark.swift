import APNSCore
import PushCore
import APNSHTTP2
import ArgumentParser
import Crypto
import PushStores
import Foundation
import HeraldService
import Logging
import Prometheus
import PushPipeline
import Synchronization

/// Herald's sender (``RetryingSender`` over ``APNSHTTP2Client``) against `h2load`, both
/// sending the same requests to the same `mock-apns` process, in alternating rounds.
struct SenderBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sender",
        abstract: "Herald's APNs sender vs h2load on the same mock: throughput and client CPU per request.",
        discussion: """
            Starts mock-apns (token authentication) as a child process, then alternates rounds of \
            Herald's sender and of h2load (Debian's nghttp2-client), each sending --requests \
            POST /3/device/<token> requests with the same headers and payload over --connections \
            HTTP/2 connections with --streams concurrent streams each. Herald's CPU time is this \
            process's; h2load's is its own (wait4 rusage). Prints each round and the medians.
            """
    )

    @Option(help: "Requests per round and client.") var requests = 20_000
    @Option(help: "Rounds per client (medians are reported).") var rounds = 5
    @Option(help: "HTTP/2 connections per client.") var connections = 2
    @Option(help: "Concurrent streams per connection (the mock advertises this limit).") var streams = 100
    @Option(help: "Distinct device tokens the requests cycle through.") var tokens = 1_000
    @Option(help: "Path of the mock-apns executable (default: next to herald-bench).") var mockAPNS: String?
    @Option(help: "Path of h2load.") var h2load = "/usr/bin/h2load"
    @Option(help: "After the rounds, a steady load of this many requests/s for 10 s (0: none).") var steadyRate = 0
    @Option(help: "Requests per batch of the steady load (a poll batch's sends).") var steadyBatch = 16

    func run() async throws {
        var logger = Logger(label: "herald-bench")
        logger.logLevel = .error
        let workspace = try Workspace()
        let mock = try await MockAPNSProcess.start(
            executable: mockAPNS ?? Workspace.siblingExecutable("mock-apns"),
            workspace: workspace,
            maxConcurrentStreams: streams
        )
        defer { print(mock.stop()) }

        let tokens = Self.randomTokens(tokens)
        let payload = Self.payload
        let topic = Self.topic
        let herald = try HeraldSenderClient(mock: mock, connections: connections, logger: logger)
        let h2loadClient = H2LoadClient(
            executable: h2load,
            mock: mock,
            workspace: workspace,
            tokens: tokens,
            topic: topic,
            payload: payload
        )
        try h2loadClient.prepare()

        print("sender benchmark: \(requests) requests per round, \(connections) connections x \(streams) streams, mock on port \(mock.port)")
        print("round  client   requests/s   CPU µs/request")
        var ratios: [Double] = []
        var heraldRuns: [ClientRun] = []
        var h2loadRuns: [ClientRun] = []
        try await herald.withRunningClient { sender in
            // Warm-up: connections open and the pool learns the mock's stream limit.
            _ = await HeraldSenderClient.sendAll(
                Self.requests(count: connections * streams, tokens: tokens, topic: topic, payload: payload),
                through: sender,
                concurrency: connections * streams
            )
            for round in 1...rounds {
                let batch = Self.requests(count: requests, tokens: tokens, topic: topic, payload: payload)
                let heraldRun = try await HeraldSenderClient.timedRound(batch, through: sender, concurrency: connections * streams)
                let h2loadRun = try await h2loadClient.run(requests: requests, connections: connections, streams: streams)
                heraldRuns.append(heraldRun)
                h2loadRuns.append(h2loadRun)
                ratios.append(heraldRun.cpuMicrosecondsPerRequest / h2loadRun.cpuMicrosecondsPerRequest)
                print(
                    "\(round)      herald\(column(heraldRun.requestsPerSecond, decimals: 0, width: 13))\(column(heraldRun.cpuMicrosecondsPerRequest, width: 17))"
                )
                print(
                    "\(round)      h2load\(column(h2loadRun.requestsPerSecond, decimals: 0, width: 13))\(column(h2loadRun.cpuMicrosecondsPerRequest, width: 17))"
                )
            }
            if steadyRate > 0 {
                let steady = try await HeraldSenderClient.steadyLoad(rate: steadyRate, batch: steadyBatch, seconds: 10, through: sender) {
                    Self.requests(count: $0, tokens: tokens, topic: topic, payload: payload)
                }
                let (p50, p99) = (percentile(steady.latencies, 0.5), percentile(steady.latencies, 0.99))
                print(
                    "steady load: \(steady.requests) requests at \(steadyRate)/s in batches of \(steadyBatch): batch start -> outcome p50 \(p50) µs, p99 \(p99) µs, max \(steady.latencies.last ?? 0) µs; CPU \(column(steady.cpuMicrosecondsPerRequest, width: 0)) µs/request"
                )
            }
        }
        let heraldCPU = heraldRuns.map(\.cpuMicrosecondsPerRequest).median
        let h2loadCPU = h2loadRuns.map(\.cpuMicrosecondsPerRequest).median
        print(
            "median herald: \(column(heraldRuns.map(\.requestsPerSecond).median, decimals: 0, width: 0)) requests/s, \(column(heraldCPU, width: 0)) CPU µs/request"
        )
        print(
            "median h2load: \(column(h2loadRuns.map(\.requestsPerSecond).median, decimals: 0, width: 0)) requests/s, \(column(h2loadCPU, width: 0)) CPU µs/request"
        )
        print("herald/h2load CPU per request: median of rounds \(column(ratios.median, decimals: 2, width: 0)) (target <= 2)")
        print(
            "herald/h2load throughput: \(column(heraldRuns.map(\.requestsPerSecond).median / h2loadRuns.map(\.requestsPerSecond).median, decimals: 2, width: 0))"
        )
    }

    static let payload = Array(#"{"aps":{"alert":{"title":"Your order shipped","body":"Order 4711 is on its way"},"sound":"default"}}"#.utf8)
    static let topic = "com.example.bench"

    /// `count` random 32-byte device tokens in hex.
    static func randomTokens(_ count: Int) -> [String] {
        (0..<count).map { _ in (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined() }
    }

    /// `count` alert requests cycling through `tokens`, each with its own apns-id.
    static func requests(count: Int, tokens: [String], topic: String, payload: [UInt8]) -> [APNSRequest] {
        (0..<count).map { index in
            APNSRequest(
                deviceToken: tokens[index % tokens.count],
                topic: topic,
                pushType: .alert,
                priority: .immediate,
                apnsID: UUID().uuidString.lowercased(),
                payload: payload
            )
        }
    }
}

/// Herald's sender pointed at the mock: the production client with its default retry policy.
struct HeraldSenderClient {
    let client: APNSHTTP2Client
    let sender: RetryingSender

    /// The client and sender record their metrics in a Prometheus registry, with the factory
    /// `herald run` uses, so each request pays what it pays in Herald.
    init(mock: MockAPNSProcess, connections: Int, logger: Logger) throws {
        let endpoint = APNSClientConfiguration.Endpoint(host: "127.0.0.1", port: mock.port)
        let metricsFactory = HeraldApplication.metricsFactory(PrometheusCollectorRegistry())
        client = try APNSHTTP2Client(
            configuration: APNSClientConfiguration(
                authentication: .token(mock.credentials),
                production: endpoint,
                sandbox: endpoint,
                additionalTrustRootsPEMPath: mock.caPath,
                connectionsPerEndpoint: connections
            ),
            metricsFactory: metricsFactory,
            logger: logger
        )
        sender = RetryingSender(client: client, policy: RetryPolicy(), metrics: SenderMetrics(factory: metricsFactory))
    }

    /// Runs `body` while the client's connections are open.
    func withRunningClient(_ body: (RetryingSender) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await client.run() }
            defer { group.cancelAll() }
            try await body(sender)
        }
    }

    /// One timed round: `requests` (built before the clock starts) with `concurrency` in flight,
    /// wall and CPU time of this process; throws unless every request was delivered.
    static func timedRound(_ requests: [APNSRequest], through sender: RetryingSender, concurrency: Int) async throws -> ClientRun {
        var delivered = 0
        let run = await ClientRun.measure(requests: requests.count, cpu: .thisProcess) {
            delivered = await sendAll(requests, through: sender, concurrency: concurrency)
        }
        guard delivered == requests.count else {
            throw ValidationError("Herald's sender delivered \(delivered) of \(requests.count) requests")
        }
        return run
    }

    /// The sender alone, as the pipeline benchmark's baseline: a client of `connections`
    /// connections to `mock`, a warm-up of `concurrency` requests, then one timed round of
    /// `count`. Returns the round and how many requests the mock got (warm-up included).
    static func alone(mock: MockAPNSProcess, count: Int, connections: Int, concurrency: Int, logger: Logger) async throws -> (run: ClientRun, sent: Int) {
        let client = try HeraldSenderClient(mock: mock, connections: connections, logger: logger)
        let tokens = SenderBenchmark.randomTokens(1_000)
        func requests(_ count: Int) -> [APNSRequest] {
            SenderBenchmark.requests(count: count, tokens: tokens, topic: SenderBenchmark.topic, payload: SenderBenchmark.payload)
        }
        var run: ClientRun?
        try await client.withRunningClient { sender in
            _ = await sendAll(requests(concurrency), through: sender, concurrency: concurrency)
            run = try await timedRound(requests(count), through: sender, concurrency: concurrency)
        }
        guard let run else { throw ValidationError("the sender round did not run") }
        return (run, concurrency + count)
    }

    /// Delivers every request with at most `concurrency` in flight, as the pipeline sends: each
    /// batch is as many requests as there are free slots (the pipeline's send permits), sent by one
    /// ``RetryingSender/deliverAll(_:consumedAt:fence:report:)``. Returns how many were delivered.
    static func sendAll(_ requests: [APNSRequest], through sender: RetryingSender, concurrency: Int) async -> Int {
        let slots = FreeSlots(concurrency)
        await withDiscardingTaskGroup { group in
            var next = requests.startIndex
            while next < requests.endIndex {
                let free = await slots.takeAll()
                let batch = requests[next..<min(next + free, requests.endIndex)].map { (request: $0, environment: APNSEnvironment.production) }
                next += batch.count
                group.addTask {
                    await sender.deliverAll(batch, consumedAt: .now, fence: { _ in .open }) { _, result in
                        slots.giveBack(delivered: (try? result.get())?.status == .delivered)
                    }
                }
            }
        }
        return slots.delivered
    }
}

/// The sender benchmarks' request slots: all free ones taken at once, each given back by its answer.
final class FreeSlots: Sendable {
    private struct State {
        var free: Int
        var delivered = 0
        var waiter: CheckedContinuation<Int, Never>?
    }

    private let state: Mutex<State>

    init(_ count: Int) { state = Mutex(State(free: count)) }

    /// Requests delivered so far.
    var delivered: Int { state.withLock { $0.delivered } }

    /// Takes every free slot, waiting for one when none is free; returns how many it took.
    func takeAll() async -> Int {
        await withCheckedContinuation { continuation in
            let free = state.withLock { state -> Int? in
                guard state.free > 0 else {
                    state.waiter = continuation
                    return nil
                }
                defer { state.free = 0 }
                return state.free
            }
            if let free { continuation.resume(returning: free) }
        }
    }

    /// Gives a slot back once its request was answered.
    func giveBack(delivered: Bool) {
        let waiter = state.withLock { state -> CheckedContinuation<Int, Never>? in
            if delivered { state.delivered += 1 }
            state.free += 1
            guard let waiter = state.waiter else { return nil }
            state.waiter = nil
            state.free = 0
            return waiter
        }
        waiter?.resume(returning: 1)
    }
}

/// `h2load` sending Herald's requests: the same paths, headers (one apns-id, since h2load cannot
/// vary headers per request) and payload.
struct H2LoadClient {
    let executable: String
    let mock: MockAPNSProcess
    let workspace: Workspace
    let tokens: [String]
    let topic: String
    let payload: [UInt8]

    private var urisPath: String { workspace.path("h2load-uris.txt") }
    private var payloadPath: String { workspace.path("payload.json") }

    func prepare() throws {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ValidationError("h2load not found at \(executable) (Debian: apt-get install nghttp2-client)")
        }
        let uris = tokens.map { "https://127.0.0.1:\(mock.port)/3/device/\($0)\n" }.joined()
        try uris.write(toFile: urisPath, atomically: true, encoding: .utf8)
        try Data(payload).write(to: URL(fileURLWithPath: payloadPath))
    }

    /// One h2load run; its CPU time is read from the rusage of the reaped child.
    func run(requests: Int, connections: Int, streams: Int) async throws -> ClientRun {
        let token = try mock.credentials.signToken(issuedAt: WallClock.secondsSince1970())
        let arguments = [
            "-n", "\(requests)", "-c", "\(connections)", "-m", "\(streams)", "-t", "1",
            "-H", "apns-topic: \(topic)", "-H", "apns-push-type: alert", "-H", "apns-priority: 10",
            "-H", "apns-id: \(UUID().uuidString.lowercased())", "-H", "authorization: bearer \(token)",
            "-d", payloadPath, "-i", urisPath,
        ]
        var output = ""
        let run = try await ClientRun.measure(requests: requests, cpu: .reapedChildren) {
            output = try ChildProcess.runToCompletion(executable, arguments: arguments)
        }
        guard output.contains("\(requests) succeeded"), output.contains("\(requests) 2xx") else {
            throw ValidationError("h2load did not get \(requests) answers 200:\n\(output)")
        }
        return run
    }
}
