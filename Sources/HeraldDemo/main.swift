import APNSCore
import AsyncHTTPClient
import PushCore
import KafkaMessages
import ArgumentParser
import Crypto
import Foundation
import KafkaTransport
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL

/// The demo's client side: makes a provider key, registers sample devices, publishes sample
/// events and prints what Herald reported on its result topics.
@main
struct HeraldDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald-demo",
        abstract: "Drives the Herald demo (see scripts/demo.sh).",
        subcommands: [MakeKey.self, Publish.self]
    )
}

struct MakeKey: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Write a new ES256 provider key as a .p8 (PKCS#8 PEM) file.")

    @Argument(help: "Where to write the key.") var path: String

    func run() throws {
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: path, atomically: true, encoding: .utf8)
    }
}

struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Register sample devices, publish sample events and summarise Herald's results."
    )

    @Option(help: "Kafka bootstrap servers.") var brokers: String
    @Option(help: "The app's bundle ID.") var bundleID = "com.example.shop"
    @Option(help: "The Android app's package.") var androidPackage = "com.example.shop.android"
    @Option(help: "How many notification events to publish.") var events = 20
    @Option(help: "A device token the mock APNs reports as unregistered (410).") var unregisteredToken: String
    @Option(help: "The web app's id (the registry's topic for its browsers).") var webApp = "shop-web"
    @Option(help: "The push service origin alice's browser subscribes at (the mock's).") var pushService: String
    @Option(help: "PEM of the CA the mock push service's certificate is issued by.") var pushServiceCA: String
    @Option(help: "Seconds to wait for all results.") var timeout = 90

    func run() async throws {
        var logger = Logger(label: "herald-demo")
        logger.logLevel = .error
        let kafka = KafkaConfiguration(
            bootstrapServers: brokers,
            properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "1000"]
        )
        let producer = try KafkaProducer(configuration: kafka, logger: logger)

        try await registerDevices(through: producer)
        // Registrations and events travel on different topics: give Herald a moment to store them.
        try await Task.sleep(for: .seconds(3))
        try await publishEvents(through: producer)

        let reader = try KafkaConsumer(
            configuration: kafka,
            groupID: "herald-demo-\(UUID().uuidString)",
            topics: ["push.results", "push.unregistered", "push.dlq", "push.channel-results"],
            logger: logger
        )
        var results = ResultLog(reader: reader, deadline: ContinuousClock.now + .seconds(timeout))

        // A Live Activity broadcast channel for a match, created through push.channels, and one
        // score update sent to every subscriber with one request.
        let channel = try await createBroadcastChannel(through: producer, results: &results)
        try await publishScoreUpdate(to: channel, through: producer)

        // alice has 4 devices, bob 1 (unregistered after the first 410), carol 0: 6 results per
        // event, plus the broadcast's one.
        let expectedResults = events * 6 + 1
        try await results.readResults(expecting: expectedResults)
        Self.printSummary(records: results.records, expectedResults: expectedResults)
    }

    /// Registers alice's and bob's devices on push.tokens: the app devices (APNs and FCM), then
    /// alice's browser once it has subscribed at the mock push service.
    private func registerDevices(through producer: KafkaProducer) async throws {
        // alice: an iPhone (production), an iPad (sandbox), a Pixel (Android, through FCM) and a
        // browser (Web Push); bob: one iPhone whose app was deleted (APNs answers 410); carol: no
        // device at all.
        let devices: [(user: String, token: String, environment: String, platform: String)] = [
            ("alice", Self.token(seed: 1), "production", "apns"),
            ("alice", Self.token(seed: 2), "sandbox", "apns"),
            ("alice", Self.pixelToken, "production", "fcm"),
            ("bob", unregisteredToken, "production", "apns"),
        ]
        for device in devices {
            try await producer.send(
                KafkaOutgoingMessage(
                    topic: "push.tokens",
                    key: Array(device.token.utf8),
                    value: Self.json([
                        "action": "register", "user_id": device.user, "token": device.token,
                        "topic": device.platform == "fcm" ? androidPackage : bundleID, "environment": device.environment,
                        "platform": device.platform, "timestamp": "2026-11-01T09:00:00Z",
                    ])
                )
            )
        }
        let browser = try await Self.subscribe(at: pushService, trusting: pushServiceCA)
        try await producer.send(
            KafkaOutgoingMessage(
                topic: "push.tokens",
                key: Array(browser.endpoint.utf8),
                value: Self.json([
                    "action": "register", "user_id": "alice", "topic": webApp, "platform": "webpush", "timestamp": "2026-11-01T09:00:00Z",
                    "subscription": ["endpoint": browser.endpoint, "keys": ["p256dh": browser.p256dh, "auth": browser.auth]],
                ])
            )
        )
        print("registered \(devices.count + 1) devices for alice (one Android, one browser) and bob; carol has none")
    }

    /// Publishes `events` "order shipped" notifications for alice, bob and carol on push.requests
    /// (APNs, FCM and Web Push content each), then one malformed message.
    private func publishEvents(through producer: KafkaProducer) async throws {
        for index in 1...events {
            try await producer.send(
                KafkaOutgoingMessage(
                    topic: "push.requests",
                    key: Array("order-\(index)".utf8),
                    value: Self.json([
                        "id": "order-\(index)-shipped", "user_ids": ["alice", "bob", "carol"], "topic": bundleID,
                        "collapse_id": "order-\(index)",
                        "payload": ["aps": ["alert": ["title": "Shipped", "body": "Order \(index) is on its way"]]],
                        "fcm": [
                            "package": androidPackage,
                            "message": ["notification": ["title": "Shipped", "body": "Order \(index) is on its way"], "data": ["order": "\(index)"]],
                        ],
                        "webpush": ["app": webApp, "message": ["title": "Shipped", "body": "Order \(index) is on its way"]],
                    ])
                )
            )
        }
        try await producer.send(
            KafkaOutgoingMessage(topic: "push.requests", key: Array("broken".utf8), value: Array("{this is not json".utf8))
        )
        print("published \(events) events for alice, bob and carol, and 1 malformed message")
    }

    /// Asks Herald for a broadcast channel on push.channels and waits for its ID on
    /// push.channel-results; exits with code 1 if none comes before the deadline.
    private func createBroadcastChannel(through producer: KafkaProducer, results: inout ResultLog) async throws -> BroadcastChannel {
        let requestID = "demo-match-\(UUID().uuidString.prefix(8))"
        try await producer.send(
            KafkaOutgoingMessage(
                topic: "push.channels",
                key: Array(bundleID.utf8),
                value: Self.json(["request_id": requestID, "action": "create", "topic": bundleID, "message_storage_policy": 1])
            )
        )
        guard let channelID = try await results.readChannelID() else {
            print("no answer on push.channel-results within \(timeout) s")
            throw ExitCode(1)
        }
        print("created broadcast channel \(channelID) through push.channels")
        return BroadcastChannel(requestID: requestID, channelID: channelID)
    }

    /// Sends one score update to every subscriber of `channel` with a single request on push.requests.
    private func publishScoreUpdate(to channel: BroadcastChannel, through producer: KafkaProducer) async throws {
        try await producer.send(
            KafkaOutgoingMessage(
                topic: "push.requests",
                key: Array(channel.requestID.utf8),
                value: Self.json([
                    "id": "\(channel.requestID)-goal", "channel_id": channel.channelID, "topic": bundleID,
                    "payload": ["aps": ["timestamp": WallClock.millisecondsSince1970() / 1000, "event": "update", "content-state": ["home": 1, "away": 0]]],
                ])
            )
        )
        print("published a score update to the channel")
    }

    static func object(_ record: KafkaMessage) -> [String: Any]? {
        record.value.flatMap { try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] }
    }

    static func printSummary(records: [KafkaMessage], expectedResults: Int) {
        let results = records.filter { $0.topic == "push.results" }.compactMap(object)
        print("\n== Herald results (push.results: \(results.count) of \(expectedResults) expected)")
        var byUserAndStatus: [String: Int] = [:]
        for result in results {
            let audience = (result["user_id"] as? String) ?? (result["channel_id"] != nil ? "channel" : "?")
            let key = "\(audience)\t\(result["platform"] as? String ?? "-")\t\(result["status"] as? String ?? "?")"
            byUserAndStatus[key, default: 0] += 1
        }
        print("user\tplatform\tstatus\tcount")
        for (key, count) in byUserAndStatus.sorted(by: { $0.key < $1.key }) {
            print("\(key)\t\(count)")
        }
        let latencies = results.compactMap { $0["latency_ms"] as? Int }.sorted()
        if !latencies.isEmpty {
            print("latency_ms: median \(latencies[latencies.count / 2]), max \(latencies.last!)")
        }
        let unregistered = records.filter { $0.topic == "push.unregistered" }.count
        print("push.unregistered events: \(unregistered)")
        for deadLetter in records.filter({ $0.topic == "push.dlq" }) {
            let error = deadLetter.headers.first { $0.key == "herald-error" }?.value.map { String(decoding: $0, as: UTF8.self) }
            print("push.dlq: herald-error=\(error ?? "?")")
        }
    }

    /// A browser's push subscription at `origin`, as `pushManager.subscribe()` makes one: the
    /// mock push service's `POST /subscribe`.
    static func subscribe(at origin: String, trusting caPath: String) async throws -> (endpoint: String, p256dh: String, auth: String) {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.file(caPath)]
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: HTTPClient.Configuration(tlsConfiguration: tls))
        var request = HTTPClientRequest(url: origin + "/subscribe")
        request.method = .POST
        let answer: (HTTPClientResponse, ByteBuffer)
        do {
            let response = try await client.execute(request, timeout: .seconds(10))
            answer = (response, try await response.body.collect(upTo: 64 * 1024))
        } catch {
            try await client.shutdown()
            throw error
        }
        try await client.shutdown()
        let (response, body) = answer
        guard response.status == .created, let object = try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any],
            let endpoint = object["endpoint"] as? String, let keys = object["keys"] as? [String: String],
            let p256dh = keys["p256dh"], let auth = keys["auth"]
        else {
            throw ValidationError("the push service at \(origin) gave no subscription (\(response.status))")
        }
        return (endpoint, p256dh, auth)
    }

    /// alice's Pixel: an FCM registration token as an app gets one (opaque, mixed case).
    static let pixelToken = "dEm0PiXeL:APA91b" + String(repeating: "Hk3_", count: 36)

    static func token(seed: UInt8) -> String {
        String(repeating: String(format: "%02x", seed), count: 32)
    }

    static func json(_ object: [String: Any]) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data())
    }
}

/// A broadcast channel the demo created: the request ID it was asked for with (the score
/// update's key and ID prefix) and the channel ID Herald answered with.
private struct BroadcastChannel {
    let requestID: String
    let channelID: String
}

/// Herald's answers as the demo reads them: the consumer of the result topics, the time by which
/// every answer is due, and the records read so far (from every topic, in arrival order).
private struct ResultLog {
    let reader: KafkaConsumer
    let deadline: ContinuousClock.Instant
    var records: [KafkaMessage] = []

    /// Reads until an answer on push.channel-results names a channel or the deadline passes; that
    /// channel's ID, or nil if none came in time.
    mutating func readChannelID() async throws -> String? {
        var channelID: String?
        while ContinuousClock.now < deadline, channelID == nil {
            try await readMore()
            channelID = records.filter { $0.topic == "push.channel-results" }.compactMap { Publish.object($0)?["channel_id"] as? String }.first
        }
        return channelID
    }

    /// Reads until push.results holds `expectedResults` records and push.dlq at least one, or the
    /// deadline passes.
    mutating func readResults(expecting expectedResults: Int) async throws {
        while ContinuousClock.now < deadline,
            records.filter({ $0.topic == "push.results" }).count < expectedResults
                || !records.contains(where: { $0.topic == "push.dlq" })
        {
            try await readMore()
        }
    }

    /// Appends what the result topics deliver within the next 250 ms (at most 1000 records).
    private mutating func readMore() async throws {
        records += try await reader.poll(maxMessages: 1000, timeout: .milliseconds(250))
    }
}
