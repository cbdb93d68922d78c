import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import HeraldService
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Prometheus
import PushCore
import WebPushCore
import WebPushHTTP

/// Herald's Web Push sender (``WebPushHTTPClient`` over Herald's own HTTP/2 client) against
/// `h2load`, both sending to the same `mock-webpush` process, in alternating rounds, beside the
/// CPU of the message encryption alone: what the transport costs and what the encryption does.
struct WebPushSenderBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webpush-sender",
        abstract: "Herald's Web Push sender vs h2load on the same mock push service: throughput, client CPU and latency per request.",
        discussion: """
            Starts mock-webpush as a child process with one origin, makes --subscriptions \
            subscriptions there (POST /subscribe, bound to the benchmark's VAPID key), then \
            alternates rounds of WebPushHTTPClient.sendAll (batches of the free slots, as the \
            pipeline sends; every request encrypted afresh, its VAPID token cached) and of h2load \
            (one subscription's message encrypted and signed once: h2load cannot vary the body), \
            each sending --requests requests with --in-flight in flight over one HTTP/2 connection. \
            Herald's CPU time is this process's; h2load's is its own (wait4 rusage). After each round \
            it times --encrypt-messages encryptions of the same message alone. Prints each round, \
            the medians and the mock's summary; fails if the mock delivered fewer messages than were sent.
            """
    )

    @Option(help: "Requests per round and client.") var requests = 5_000
    @Option(help: "Rounds per client (medians are reported).") var rounds = 5
    @Option(help: "Requests in flight (one HTTP/2 connection; the mock allows 1,000 streams).") var inFlight = 100
    @Option(help: "Subscriptions Herald's requests cycle through.") var subscriptions = 1_000
    @Option(help: "Messages encrypted alone after each round (the encryption's share of the CPU).") var encryptMessages = 5_000
    @Option(name: .customLong("mock-webpush"), help: "Path of the mock-webpush executable (default: next to herald-bench).")
    var mockWebPush: String?
    @Option(help: "Path of h2load.") var h2load = "/usr/bin/h2load"

    /// The web app every request is for (the VAPID fallback key serves it).
    static let app = "bench-webapp"
    /// What the service worker receives: a notification of about 200 bytes.
    static let plaintext = Array(
        #"{"title":"Your order shipped","body":"Order 4711 is on its way and arrives tomorrow","icon":"/icons/parcel.png","tag":"order-4711","data":{"order":"4711","url":"https://shop.example.com/orders/4711"}}"#
            .utf8)

    func validate() throws {
        guard requests > 0, rounds > 0, inFlight > 0, subscriptions > 0, encryptMessages > 0 else {
            throw ValidationError("--requests, --rounds, --in-flight, --subscriptions and --encrypt-messages must be positive")
        }
    }

    func run() async throws {
        var logger = Logger(label: "herald-bench")
        logger.logLevel = .error
        let workspace = try Workspace()
        let mock = try await MockWebPushProcess.start(
            executable: mockWebPush ?? Workspace.siblingExecutable("mock-webpush"), workspace: workspace, origins: 1)
        var stopped = false
        defer { if !stopped { print(mock.stop()) } }

        let signer = VAPIDSigner(key: P256.Signing.PrivateKey(), subject: "mailto:bench@example.com")
        let allowList = WebPushHostAllowList(["127.0.0.1"])
        let made = try await MockWebPushSubscriber.subscribe(
            count: subscriptions, origins: mock.origins, applicationServerKey: signer.publicKeyText, caPath: mock.caPath, logger: logger)
        let targets = try made.map { try WebPushSubscription(endpoint: $0.endpoint, p256dh: $0.p256dh, auth: $0.auth, allowing: allowList) }
        let requestsToSend = (0..<requests).map {
            WebPushRequest(app: Self.app, subscription: targets[$0 % targets.count], plaintext: Self.plaintext, ttl: .seconds(3600), urgency: .high)
        }
        var configuration = WebPushClientConfiguration(
            credentials: WebPushCredentials(fallback: WebPushCredentials.Entry(apps: [], current: signer)),
            allowList: allowList,
            additionalTrustRootsPEMPath: mock.caPath
        )
        configuration.connectionsPerOrigin = 1  // as h2load's `-c 1`: the same connection count on both sides
        let client = try WebPushHTTPClient(
            configuration: configuration,
            metricsFactory: HeraldApplication.metricsFactory(PrometheusCollectorRegistry()),
            logger: logger
        )
        // h2load sends one subscription's message, encrypted once and signed once.
        let first = targets[0]
        let authorization = try signer.authorization(origin: first.origin, nowSeconds: WallClock.secondsSince1970())
        let h2loadClient = WebPushH2LoadClient(executable: h2load, workspace: workspace, endpoint: first.endpoint, authorization: authorization)
        let body = try WebPushEncryption.encrypt(Self.plaintext, to: first.keys)
        try h2loadClient.prepare(body: body)

        print(
            "Web Push sender benchmark: \(requests) requests per round, \(inFlight) in flight on one connection, \(Self.plaintext.count)-byte message, \(targets.count) subscriptions, mock at \(mock.origins[0])"
        )
        print("round  client   requests/s   CPU µs/request   p50 µs   p99 µs")
        let results = try await measureRounds(requestsToSend, through: client, h2load: h2loadClient, keys: first.keys)
        results.report(encryptMessages: encryptMessages)

        let summary = mock.stop()
        stopped = true
        print(summary)
        let sent = results.heraldSent + results.h2loadSent
        guard let delivered = MockWebPushProcess.delivered(in: summary) else { throw BenchFailure("cannot read mock-webpush's summary '\(summary)'") }
        guard delivered >= sent else {
            throw BenchFailure(
                "mock-webpush delivered \(delivered) messages, fewer than the \(sent) sent (herald \(results.heraldSent), h2load \(results.h2loadSent))")
        }
    }

    /// The alternating rounds: Herald's sender, h2load, then the encryption alone.
    private func measureRounds(
        _ requestsToSend: [WebPushRequest],
        through client: WebPushHTTPClient,
        h2load: WebPushH2LoadClient,
        keys: WebPushSubscriptionKeys
    ) async throws -> WebPushSenderRounds {
        var results = WebPushSenderRounds()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await client.run() }
            defer { group.cancelAll() }
            // Warm-up: the connection, the VAPID token and the pool's stream limit.
            let warmUp = Array(requestsToSend.prefix(inFlight * 2))
            _ = try await Self.sendAll(warmUp, through: client, inFlight: inFlight)
            results.heraldSent += warmUp.count
            for round in 1...rounds {
                var latencies: [Int64] = []
                let heraldRun = try await ClientRun.measure(requests: requestsToSend.count, cpu: .thisProcess) {
                    latencies = try await Self.sendAll(requestsToSend, through: client, inFlight: inFlight)
                }
                latencies.sort()
                let herald: TimedRun = (heraldRun, percentile(latencies, 0.5), percentile(latencies, 0.99))
                let h2loadResult = try await h2load.run(requests: requestsToSend.count, streams: inFlight)
                let encryption = try Self.encryptionCPU(messages: encryptMessages, keys: keys)
                results.heraldSent += requestsToSend.count
                results.h2loadSent += requestsToSend.count
                results.herald.append(herald)
                results.h2load.append(h2loadResult)
                results.encryption.append(encryption)
                results.ratios.append(heraldRun.cpuMicrosecondsPerRequest / h2loadResult.run.cpuMicrosecondsPerRequest)
                for (name, result) in [("herald", herald), ("h2load", h2loadResult)] {
                    print(
                        "\(round)      \(name)\(column(result.run.requestsPerSecond, decimals: 0, width: 13))\(column(result.run.cpuMicrosecondsPerRequest, width: 17))\(column(Double(result.p50), decimals: 0, width: 9))\(column(Double(result.p99), decimals: 0, width: 9))"
                    )
                }
                print("\(round)      encryption alone\(column(encryption, width: 10)) CPU µs/message")
            }
        }
        return results
    }

    /// Sends every request with at most `inFlight` in flight, as the pipeline sends: each batch is
    /// as many requests as there are free slots, sent by one ``WebPushHTTPClient/sendAll(_:deadline:answered:)``.
    /// Returns each request's latency in µs from its batch's start; throws unless every answer was a 2xx.
    static func sendAll(_ requests: [WebPushRequest], through client: WebPushHTTPClient, inFlight: Int) async throws -> [Int64] {
        try await sendInFreeSlotBatches(requests, inFlight: inFlight, service: "mock-webpush") { batch, start, answered in
            await client.sendAll(batch, deadline: start + .seconds(10)) { _, answer in
                let response = try? answer.get()
                let refusal = response.map { "\($0.status) \($0.reason ?? "")" } ?? "no answer"
                answered((200..<300).contains(response?.status ?? 0) ? nil : refusal)
            }
        }
    }

    /// This process's CPU µs per message for encrypting `plaintext` to `keys` `messages` times in a row.
    static func encryptionCPU(messages: Int, keys: WebPushSubscriptionKeys) throws -> Double {
        var bytes = 0
        let before = CPUTime.thisProcess.microseconds
        for _ in 0..<messages { bytes &+= try WebPushEncryption.encrypt(plaintext, to: keys).count }
        let used = CPUTime.thisProcess.microseconds - before
        guard bytes > 0 else { throw ValidationError("no message was encrypted") }
        return Double(used) / Double(messages)
    }
}

/// A client's round: what it did, and its latency's p50 and p99 in µs.
private typealias TimedRun = (run: ClientRun, p50: Int64, p99: Int64)

/// What the Web Push sender benchmark's rounds measured.
private struct WebPushSenderRounds {
    var herald: [TimedRun] = []
    var h2load: [TimedRun] = []
    /// CPU µs per message of the encryption alone, per round.
    var encryption: [Double] = []
    /// Herald's CPU per request over h2load's, per round.
    var ratios: [Double] = []
    /// Requests sent by each client, the warm-up included.
    var heraldSent = 0
    var h2loadSent = 0

    /// Prints the medians, the ratio to h2load and the encryption's share.
    func report(encryptMessages: Int) {
        for (name, runs) in [("herald", herald), ("h2load", h2load)] {
            print(
                "median \(name): \(column(runs.map(\.run.requestsPerSecond).median, decimals: 0, width: 0)) requests/s, \(column(runs.map(\.run.cpuMicrosecondsPerRequest).median, width: 0)) CPU µs/request, latency p50 \(column(runs.map { Double($0.p50) }.median, decimals: 0, width: 0)) µs, p99 \(column(runs.map { Double($0.p99) }.median, decimals: 0, width: 0)) µs"
            )
        }
        let heraldCPU = herald.map(\.run.cpuMicrosecondsPerRequest).median
        let h2loadCPU = h2load.map(\.run.cpuMicrosecondsPerRequest).median
        let encryptionCPU = encryption.median
        print("herald/h2load CPU per request: median of rounds \(column(ratios.median, decimals: 2, width: 0))")
        print(
            "encryption alone (WebPushEncryption.encrypt, \(encryptMessages) messages a round): median \(column(encryptionCPU, width: 0)) CPU µs/message, \(column(100 * encryptionCPU / heraldCPU, decimals: 0, width: 0)) % of herald's CPU per request"
        )
        print(
            "herald without the encryption: \(column(heraldCPU - encryptionCPU, width: 0)) CPU µs/request (transport, VAPID header, batching), \(column((heraldCPU - encryptionCPU) / h2loadCPU, decimals: 2, width: 0)) times h2load's \(column(h2loadCPU, width: 0)) (which sends a pre-encrypted body)"
        )
        print(
            "herald/h2load throughput: \(column(herald.map(\.run.requestsPerSecond).median / h2load.map(\.run.requestsPerSecond).median, decimals: 2, width: 0))"
        )
    }
}

/// `mock-webpush` as a child process: its origins (`https://127.0.0.1:<port>`) and its CA.
struct MockWebPushProcess {
    let process: Process
    let origins: [String]
    let caPath: String
    let logPath: String

    /// Starts the mock with `count` origins on ephemeral ports and waits until it listens.
    static func start(executable: String, workspace: Workspace, origins count: Int, extraArguments: [String] = []) async throws -> MockWebPushProcess {
        let originsPath = workspace.path("mock-webpush.origins")
        let caPath = workspace.path("mock-webpush-ca.pem")
        let logPath = workspace.path("mock-webpush.log")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        let ports: [String] = (0..<count).flatMap { _ in ["--port", "0"] }
        process.arguments = ports + ["--origins-file", originsPath, "--ca-out", caPath] + extraArguments
        process.standardOutput = FileHandle.nullDevice
        guard FileManager.default.createFile(atPath: logPath, contents: nil) else { throw ValidationError("cannot create \(logPath)") }
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        try process.run()
        for _ in 0..<400 {
            // The mock writes the file atomically once every origin listens.
            if let text = try? String(contentsOfFile: originsPath, encoding: .utf8) {
                let origins = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                if origins.count == count, FileManager.default.fileExists(atPath: caPath) {
                    return MockWebPushProcess(process: process, origins: origins, caPath: caPath, logPath: logPath)
                }
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.terminate()
        throw ValidationError("mock-webpush (\(executable)) did not start listening")
    }

    /// SIGTERM, then waits; returns the summary the mock prints as it stops.
    func stop() -> String {
        process.terminate()
        process.waitUntilExit()
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return log.split(separator: "\n").last.map(String.init) ?? ""
    }

    /// The `delivered=` counter of the mock's summary line.
    static func delivered(in summary: String) -> Int? {
        summary.split(separator: " ").first { $0.hasPrefix("delivered=") }.flatMap { Int($0.dropFirst("delivered=".count)) }
    }
}

/// Subscriptions made through the mock's `POST /subscribe`, with AsyncHTTPClient trusting the
/// mock's CA, as a web app's page would make them in browsers.
enum MockWebPushSubscriber {
    /// A subscription as `PushSubscription.toJSON()` gives it.
    struct Made: Sendable {
        var endpoint: String
        var p256dh: String
        var auth: String
    }

    /// The mock's answer: `{"endpoint":…,"keys":{"p256dh":…,"auth":…}}`.
    private struct Answer: Decodable {
        struct Keys: Decodable {
            var p256dh: String
            var auth: String
        }
        var endpoint: String
        var keys: Keys
    }

    /// `count` subscriptions, the i-th on `origins[i % origins.count]`, bound to
    /// `applicationServerKey` (base64url of the VAPID public key), at most `concurrency` at a time.
    static func subscribe(
        count: Int,
        origins: [String],
        applicationServerKey: String,
        caPath: String,
        concurrency: Int = 64,
        logger: Logger
    ) async throws -> [Made] {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(caPath))]
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            redirectConfiguration: .disallow,
            timeout: HTTPClient.Configuration.Timeout(connect: .seconds(10)),
            decompression: .disabled
        )
        configuration.httpVersion = .automatic
        let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        let urls = origins.map { "\($0)/subscribe?applicationServerKey=\(applicationServerKey)" }
        let made: [Made]
        do {
            made = try await withThrowingTaskGroup(of: (Int, Made).self) { group in
                var collected = [Made?](repeating: nil, count: count)
                for index in 0..<count {
                    // With `concurrency` under way, one must finish before the next starts.
                    if index >= concurrency, let finished = try await group.next() { collected[finished.0] = finished.1 }
                    let url = urls[index % urls.count]
                    group.addTask {
                        let subscription = try await Self.subscribeOne(url: url, through: client, logger: logger)
                        return (index, subscription)
                    }
                }
                for try await (index, subscription) in group { collected[index] = subscription }
                return collected.compactMap { $0 }
            }
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
        guard made.count == count else { throw ValidationError("mock-webpush made \(made.count) of \(count) subscriptions") }
        return made
    }

    /// One `POST /subscribe`; throws unless the mock answered 201 with a subscription.
    private static func subscribeOne(url: String, through client: HTTPClient, logger: Logger) async throws -> Made {
        var post = HTTPClientRequest(url: url)
        post.method = .POST
        let answer = try await client.execute(post, timeout: .seconds(10), logger: logger)
        let body = try await answer.body.collect(upTo: 64 * 1024)
        guard answer.status == .created else {
            throw ValidationError("mock-webpush answered \(answer.status) to POST /subscribe: \(String(decoding: body.readableBytesView, as: UTF8.self))")
        }
        let decoded = try JSONDecoder().decode(Answer.self, from: Data(body.readableBytesView))
        return Made(endpoint: decoded.endpoint, p256dh: decoded.keys.p256dh, auth: decoded.keys.auth)
    }
}

/// `h2load` sending one subscription's message, encrypted once and signed once (h2load cannot
/// vary the body; the mock decrypts each copy as it would a fresh one), with RFC 8030's headers.
struct WebPushH2LoadClient {
    let executable: String
    let workspace: Workspace
    let endpoint: String
    /// `vapid t=<JWT>, k=<public key>` for the endpoint's origin.
    let authorization: String

    private var bodyPath: String { workspace.path("webpush-body.bin") }
    private var logPath: String { workspace.path("h2load-webpush.log") }

    func prepare(body: [UInt8]) throws {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ValidationError("h2load not found at \(executable) (Debian: apt-get install nghttp2-client)")
        }
        try Data(body).write(to: URL(fileURLWithPath: bodyPath))
    }

    /// One h2load run over one connection (``runH2Load(_:arguments:requests:logPath:)``); h2load
    /// POSTs the `-d` file.
    func run(requests: Int, streams: Int) async throws -> (run: ClientRun, p50: Int64, p99: Int64) {
        let arguments = [
            "-n", "\(requests)", "-c", "1", "-m", "\(streams)", "-t", "1", "-d", bodyPath,
            "-H", "ttl: 3600", "-H", "content-encoding: aes128gcm", "-H", "content-type: application/octet-stream",
            "-H", "urgency: high", "-H", "authorization: \(authorization)", "--log-file", logPath, endpoint,
        ]
        return try await runH2Load(executable, arguments: arguments, requests: requests, logPath: logPath)
    }
}
