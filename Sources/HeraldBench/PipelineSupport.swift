import KafkaMessages
import APNSCore
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PostgresNIO

/// The local services of `scripts/services.sh` (source `.local/run/services.env`).
struct BenchServices {
    let brokers: String
    let postgresURL: String
    let tansuBinary: String
    let tansuURL: String

    init() throws {
        func variable(_ name: String) throws -> String {
            guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
                throw BenchFailure("\(name) is not set: run `scripts/services.sh start` and `source .local/run/services.env`")
            }
            return value
        }
        brokers = try variable("HERALD_KAFKA_BROKERS")
        postgresURL = try variable("HERALD_POSTGRES_URL")
        tansuBinary = try variable("HERALD_TANSU_BIN")
        tansuURL = try variable("HERALD_TANSU_URL")
    }

    /// Client settings as the integration tests use them (Tansu's first join waits half the session timeout).
    var kafka: KafkaConfiguration {
        KafkaConfiguration(bootstrapServers: brokers, properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "1000"])
    }

    /// Creates topics with Tansu's CLI (Herald never creates topics).
    func createTopics(_ names: [String], partitions: Int) throws {
        for name in names {
            _ = try ChildProcess.runToCompletion(
                tansuBinary,
                arguments: ["topic", "create", name, "--broker", tansuURL, "--partitions", "\(partitions)"]
            )
        }
    }

    /// Deletes topics (best effort), so the in-memory broker does not grow run after run.
    func deleteTopics(_ names: [String]) {
        for name in names {
            _ = try? ChildProcess.runToCompletion(tansuBinary, arguments: ["topic", "delete", name, "--broker", tansuURL])
        }
    }

    /// The broker's processes: Tansu and the ApiVersions proxy in front of it.
    func brokerPIDs() -> (tansu: [Int32], proxy: [Int32]) {
        (
            ProcStats.pids { _, line in line.contains("broker --listener-url \(tansuURL)") },
            ProcStats.pids { _, line in line.contains("kafka-apiversions-proxy") && line.contains("--listen \(brokers)") }
        )
    }

    /// Autovacuum and autoanalyze runs so far of push.device_tokens and the ledger's partitions.
    func autovacuumCounts(logger: Logger) async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        try await withPostgres(logger: logger) { client in
            let rows = try await client.query(
                """
                SELECT relname, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables
                WHERE schemaname = 'push' AND (relname = 'device_tokens' OR relname LIKE 'delivery\\_ledger\\_%')
                """,
                logger: logger
            )
            for try await (table, vacuums, analyzes) in rows.decode((String, Int, Int).self) {
                counts["\(table) autovacuum"] = vacuums
                counts["\(table) autoanalyze"] = analyzes
            }
        }
        return counts
    }

    /// Runs `body` with a PostgreSQL client that is closed afterwards.
    func withPostgres(logger: Logger, _ body: (PostgresClient) async throws -> Void) async throws {
        let client = try PostgresClient(configuration: PostgresURL(postgresURL).clientConfiguration(), backgroundLogger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await body(client)
        }
    }
}

/// A small, fast, seedable generator (SplitMix64), so a seed gives the same workload.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// How the events of a run address users.
enum PipelineShape: String, CaseIterable {
    case single, fanout, mixed

    var summary: String {
        switch self {
        case .single: "one user per event"
        case .fanout: "1,000 users per event"
        case .mixed: "90 % one user, 10 % 100 users per event"
        }
    }

    /// Users of the next event.
    func nextEventUsers(_ random: inout SplitMix64) -> Int {
        switch self {
        case .single: 1
        case .fanout: 1_000
        case .mixed: random.next() % 10 == 0 ? 100 : 1
        }
    }
}

/// The users, devices and events of one shape. Users are numbered; every user has 1 to 3
/// production devices and appears in exactly one event, so each token has exactly one
/// expected result, and a result's token tells its event.
struct Workload {
    /// The first app's bundle ID; the others add `.<n>` to it (``topic(ofEvent:)``).
    let bundleID: String
    /// How many apps the events take turns addressing.
    let apps: Int
    let eventPrefix: String
    private(set) var tokens: [String] = []
    /// Whether each token is an Android (FCM) device's, registered under the app's ID as its package.
    private(set) var tokenIsFCM: [Bool] = []
    /// The share of devices on Android (0: an APNs-only workload, and events carry no `fcm` part).
    let androidShare: Double
    /// The user (`u<n>`) of each token.
    private(set) var tokenUsers: [Int32] = []
    /// The event of each token.
    private(set) var tokenEvents: [Int32] = []
    /// Event i addresses users eventUserStarts[i] ..< eventUserStarts[i + 1].
    private(set) var eventUserStarts = [0]
    let tokenIndex: [String: Int32]

    var eventCount: Int { eventUserStarts.count - 1 }
    var userCount: Int { eventUserStarts.last ?? 0 }

    init(shape: PipelineShape, notifications: Int, seed: UInt64, tag: String, apps: Int, androidShare: Double = 0) {
        bundleID = "com.example.bench.\(tag)"
        self.apps = apps
        self.androidShare = androidShare
        eventPrefix = "\(tag)-"
        var random = SplitMix64(state: seed &+ UInt64(PipelineShape.allCases.firstIndex(of: shape) ?? 0))
        var users = 0
        while tokens.count < notifications {
            for _ in 0..<shape.nextEventUsers(&random) {
                for _ in 0..<Int.random(in: 1...3, using: &random) {
                    tokens.append(Self.hexToken(&random))
                    // No draw without Android devices: the APNs-only workload stays as it was.
                    tokenIsFCM.append(androidShare > 0 && Double.random(in: 0..<1, using: &random) < androidShare)
                    tokenUsers.append(Int32(users))
                    tokenEvents.append(Int32(eventUserStarts.count - 1))
                }
                users += 1
            }
            eventUserStarts.append(users)
        }
        tokenIndex = Dictionary(zip(tokens, tokens.indices.map { Int32($0) }), uniquingKeysWith: { first, _ in first })
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// 64 hex digits (32 bytes), as APNs device tokens are.
    private static func hexToken(_ random: inout SplitMix64) -> String {
        String(unsafeUninitializedCapacity: 64) { buffer in
            for word in 0..<4 {
                var bits = random.next()
                for digit in 0..<16 {
                    buffer[word * 16 + digit] = hexDigits[Int(bits & 15)]
                    bits >>= 4
                }
            }
            return 64
        }
    }

    /// The event's id, whose number follows `eventPrefix`.
    func eventID(_ index: Int) -> String { "\(eventPrefix)\(index)" }

    /// The event's number, if `id` is one of this workload's.
    func eventIndex(_ id: String) -> Int? {
        guard id.hasPrefix(eventPrefix), let index = Int(id.dropFirst(eventPrefix.count)), index < eventCount else { return nil }
        return index
    }

    /// The app event `index` addresses (and its users' devices are registered for).
    func topic(ofEvent index: Int) -> String {
        index % apps == 0 ? bundleID : "\(bundleID).\(index % apps)"
    }

    /// How many tokens are Android devices'.
    var fcmTokenCount: Int { tokenIsFCM.lazy.filter { $0 }.count }

    /// Event `index` as push.requests JSON (the shape of HeraldTestbed.publishEvent); with
    /// Android devices, with an `fcm` part for the package of the app's ID.
    func eventJSON(_ index: Int) -> [UInt8] {
        let users = (eventUserStarts[index]..<eventUserStarts[index + 1]).map { "\"u\($0)\"" }.joined(separator: ",")
        let fcm =
            androidShare > 0
            ? #","fcm":{"package":"\#(topic(ofEvent: index))","message":{"notification":{"title":"Bench","body":"Event \#(index)"}}}"# : ""
        return Array(
            #"{"id":"\#(eventID(index))","user_ids":[\#(users)],"topic":"\#(topic(ofEvent: index))","payload":{"aps":{"alert":{"title":"Bench","body":"Event \#(index)"}}}\#(fcm)}"#
                .utf8
        )
    }

    /// Inserts every token straight into push.device_tokens, 20,000 rows per statement (as an
    /// app API's bulk load would); then ANALYZE if asked.
    func load(into client: PostgresClient, analyze: Bool, logger: Logger) async throws {
        for start in stride(from: 0, to: tokens.count, by: 20_000) {
            let rows = start..<min(start + 20_000, tokens.count)
            let batchTokens = Array(tokens[rows])
            let batchUsers = rows.map { "u\(tokenUsers[$0])" }
            let batchTopics = rows.map { topic(ofEvent: Int(tokenEvents[$0])) }
            let batchPlatforms = rows.map { tokenIsFCM[$0] ? "fcm" : "apns" }
            try await client.query(
                """
                INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at, platform, fcm_target)
                SELECT topic, token, user_id, 'production', now(), now(), platform, CASE platform WHEN 'fcm' THEN 'token' END
                FROM unnest(\(batchTopics)::text[], \(batchTokens)::text[], \(batchUsers)::text[], \(batchPlatforms)::text[])
                  AS rows(topic, token, user_id, platform)
                """,
                logger: logger
            )
        }
        if analyze { try await client.query("ANALYZE push.device_tokens", logger: logger) }
    }

    /// Removes this workload's tokens, so runs do not grow the registry, and vacuums it, so its
    /// dead rows do not set off autovacuum during the next shape. The ledger's rows stay, as in
    /// production, until their day's partition is dropped.
    func delete(from client: PostgresClient, logger: Logger) async throws {
        let topics = (0..<apps).map { topic(ofEvent: $0) }
        try await client.query("DELETE FROM push.device_tokens WHERE topic = ANY(\(topics))", logger: logger)
        try await client.query("VACUUM push.device_tokens", logger: logger)
    }
}

/// Kafka loops of the pipeline benchmark.
enum KafkaLoad {
    /// Runs `body` while `producer` and `consumer` run (they flush and leave the group afterwards).
    static func withClients<Result: Sendable>(
        _ producer: KafkaProducer,
        _ consumer: KafkaConsumer,
        _ body: () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            group.addTask { try await consumer.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// Polls until the consumer has its partitions (its topic is still empty); 60 s at most.
    static func waitUntilJoined(_ consumer: KafkaConsumer) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !consumer.hasJoinedGroup {
            guard ContinuousClock.now < deadline else { throw BenchFailure("the result reader did not join its group in 60 s") }
            _ = try await consumer.poll(maxMessages: 100, timeout: .milliseconds(100))
        }
    }

    /// Produces every message as fast as librdkafka takes them, or at `perSecond` messages a
    /// second (an open load, for latency below saturation), with at most `window` awaiting
    /// their delivery report; returns each message's produce time and the time of its delivery
    /// report (ms since 1970), and the seconds until the last report.
    static func produceAll(
        _ messages: [KafkaOutgoingMessage],
        producer: KafkaProducer,
        perSecond: Double? = nil,
        window: Int = 5_000
    ) async throws -> (times: [Int64], acknowledged: [Int64], seconds: Double) {
        let start = ContinuousClock.now
        return try await withThrowingTaskGroup(of: (Int, Int64).self) { group in
            var times = [Int64](repeating: 0, count: messages.count)
            var acknowledged = [Int64](repeating: 0, count: messages.count)
            for (index, message) in messages.enumerated() {
                if let perSecond {
                    while Double(index) >= (ContinuousClock.now - start).inSeconds * perSecond {
                        try await Task.sleep(for: .milliseconds(2))
                    }
                }
                if index >= window, let (done, at) = try await group.next() { acknowledged[done] = at }
                try Task.checkCancellation()
                times[index] = wallMilliseconds()
                group.addTask {
                    try await producer.send(message)
                    return (index, wallMilliseconds())
                }
            }
            for try await (done, at) in group { acknowledged[done] = at }
            return (times, acknowledged, (ContinuousClock.now - start).inSeconds)
        }
    }

    /// Polls `consumer`, handing every record to `handle`, until `done()` reaches `target`;
    /// calls `everySecond` once a second and throws after 60 s without progress.
    static func drain(
        _ consumer: KafkaConsumer,
        target: Int,
        done: () -> Int,
        handle: (KafkaMessage) -> Void,
        everySecond: () -> Void
    ) async throws {
        let clock = ContinuousClock()
        var lastDone = done()
        var lastProgress = clock.now
        var nextTick = clock.now + .seconds(1)
        while done() < target {
            for message in try await consumer.poll(maxMessages: 10_000, timeout: .milliseconds(100)) { handle(message) }
            let now = clock.now
            if done() > lastDone {
                lastDone = done()
                lastProgress = now
            } else if now - lastProgress > .seconds(60) {
                throw BenchFailure("FAILED: no progress for 60 s, \(lastDone) of \(target) read")
            }
            if now >= nextTick {
                everySecond()
                nextTick += .seconds(1)
            }
        }
    }

    /// The broker alone: `records` small records produced to a fresh topic and read back by a
    /// fresh group with the same clients; records/s from the first produce to the last read.
    static func brokerAlone(services: BenchServices, records: Int, partitions: Int, logger: Logger) async throws -> Double {
        let topic = "hb\(UUID().uuidString.prefix(8).lowercased()).bench.broker"
        try services.createTopics([topic], partitions: partitions)
        let producer = try KafkaProducer(configuration: services.kafka, logger: logger)
        let consumer = try KafkaConsumer(configuration: services.kafka, groupID: "\(topic).reader", topics: [topic], logger: logger)
        let padding = String(repeating: "x", count: 80)
        let messages = (0..<records).map { KafkaOutgoingMessage(topic: topic, key: Array("\($0)".utf8), value: Array("record \($0) \(padding)".utf8)) }
        defer { services.deleteTopics([topic]) }
        return try await withClients(producer, consumer) {
            try await waitUntilJoined(consumer)
            let start = ContinuousClock.now
            async let produced = produceAll(messages, producer: producer)
            var count = 0
            try await drain(consumer, target: records, done: { count }, handle: { _ in count += 1 }, everySecond: {})
            let seconds = (ContinuousClock.now - start).inSeconds
            _ = try await produced
            return Double(records) / seconds
        }
    }
}

extension KafkaLoad {
    /// The broker alone under an open load: records produced at `perSecond` for `seconds` to a
    /// fresh topic and read back by a fresh group, with the clients Herald's run uses; the
    /// latency from produce to read (ms) of the records produced after the warm-up.
    static func brokerAloneAtRate(
        services: BenchServices,
        perSecond: Int,
        seconds: Int,
        partitions: Int,
        logger: Logger
    ) async throws -> (read: Percentiles, acknowledged: Percentiles) {
        let topic = "hb\(UUID().uuidString.prefix(8).lowercased()).bench.broker-rate"
        try services.createTopics([topic], partitions: partitions)
        defer { services.deleteTopics([topic]) }
        let producer = try KafkaProducer(configuration: services.kafka, logger: logger)
        let consumer = try KafkaConsumer(configuration: services.kafka, groupID: "\(topic).reader", topics: [topic], logger: logger)
        let records = max(1, perSecond * seconds)
        let padding = String(repeating: "x", count: 80)
        let messages = (0..<records).map { KafkaOutgoingMessage(topic: topic, key: Array("\($0)".utf8), value: Array("\($0) \(padding)".utf8)) }
        return try await withClients(producer, consumer) {
            try await waitUntilJoined(consumer)
            async let produced = produceAll(messages, producer: producer, perSecond: Double(perSecond))
            var readAt = [Int64](repeating: -1, count: records)
            var count = 0
            try await drain(consumer, target: records, done: { count }) { message in
                guard let value = message.value, let index = Int(String(decoding: value.prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self)),
                    index < records, readAt[index] < 0
                else { return }
                readAt[index] = wallMilliseconds()
                count += 1
            } everySecond: {
            }
            let (times, acknowledged, _) = try await produced
            let warmFrom = (times.first ?? 0) + Int64(PipelineRun.warmUp.components.seconds * 1000)
            func after(warmUp: [Int64]) -> Percentiles {
                Percentiles(zip(times, warmUp).filter { $0.0 >= warmFrom }.map { $1 - $0 })
            }
            return (after(warmUp: readAt), after(warmUp: acknowledged))
        }
    }
}

/// A benchmark run that went wrong (printed as `Error: …`, exit code 1, without the usage text).
struct BenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Wall-clock time in milliseconds since 1970, comparable with Kafka record timestamps.
func wallMilliseconds() -> Int64 { WallClock.millisecondsSince1970() }

/// The string value of `"key":"…"` in compact JSON as Herald writes it (no spaces, and the
/// values read here, ids, hex tokens and statuses, need no escapes); nil when absent or null.
func jsonString(_ key: [UInt8], in bytes: [UInt8]) -> String? {
    guard let range = bytes.firstRange(of: key),
        let end = bytes[range.upperBound...].firstIndex(of: UInt8(ascii: "\""))
    else { return nil }
    return String(decoding: bytes[range.upperBound..<end], as: UTF8.self)
}

/// The non-negative integer after `key` (which ends with `:`), read as digits.
func jsonInteger(_ key: [UInt8], in bytes: [UInt8]) -> Int64? {
    guard let range = bytes.firstRange(of: key) else { return nil }
    let digits = bytes[range.upperBound...].prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    guard !digits.isEmpty else { return nil }
    return digits.reduce(0) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
}
