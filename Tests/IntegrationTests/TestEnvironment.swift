import KafkaMessages
import Crypto
import Foundation
import KafkaTransport
import Logging
import MockAPNS
import ServiceLifecycle
import Synchronization
import Testing

/// Where the real services of the integration tests are: `scripts/services.sh start` writes
/// these variables and the test command exports them. Without them a test that needs one is
/// skipped (cancelled) with a message that says so; the other tests still run.
enum TestEnvironment {
    /// The second broker, reached over TLS only (scripts/services.sh starts it when openssl is
    /// there): its address, its Tansu's own URL (for creating topics) and the CA to trust.
    struct TLSBroker: Sendable {
        var brokers: String
        var tansuURL: String
        var caPath: String

        /// The broker the services offer, or nil (the test then says it skipped).
        static var offered: TLSBroker? {
            let environment = ProcessInfo.processInfo.environment
            guard let brokers = environment["HERALD_TEST_KAFKA_TLS_BROKERS"], let tansuURL = environment["HERALD_TEST_KAFKA_TLS_TANSU_URL"],
                let caPath = environment["HERALD_TEST_KAFKA_TLS_CA"]
            else { return nil }
            return TLSBroker(brokers: brokers, tansuURL: tansuURL, caPath: caPath)
        }
    }

    /// Set for a test that runs everything (Herald, the testbed's clients, topic creation) on
    /// the TLS broker instead of the plain one.
    @TaskLocal static var tlsBroker: TLSBroker?

    static var brokers: String { get throws { try tlsBroker?.brokers ?? variable("HERALD_KAFKA_BROKERS") } }
    static var postgresURL: String { get throws { try variable("HERALD_POSTGRES_URL") } }
    static var tansuBinary: String { get throws { try variable("HERALD_TANSU_BIN") } }
    static var tansuURL: String { get throws { try tlsBroker?.tansuURL ?? variable("HERALD_TANSU_URL") } }

    /// The `herald` executable the tests start (a release build: a debug one is about 50 times slower).
    static var heraldBinary: String { get throws { try variable("HERALD_BIN") } }

    /// Whether a skipped test has said why yet.
    private static let saidWhy = Atomic(false)

    /// The variable's value; without it the test is skipped. The first test skipped says plainly
    /// why and what to run, the others only that they skipped, so a plain `swift test` says it once.
    private static func variable(_ name: String) throws -> String {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
            if !saidWhy.exchange(true, ordering: .relaxed) {
                try Test.cancel(
                    "The integration tests need the local services and a release build of herald: run scripts/test.sh, which starts them (\(name) is not set). Every integration test skips."
                )
            }
            try Test.cancel("skipped: no local services")
        }
        return value
    }

    /// Librdkafka settings for Tansu, for Herald and the tests' own clients: its first group join
    /// waits half of session.timeout.ms, so a short session makes every join (each instance,
    /// each result reader) short.
    /// On the TLS broker, also the documented TLS settings.
    static var kafkaProperties: [String: String] {
        let properties = ["session.timeout.ms": "3000", "heartbeat.interval.ms": "500"]
        guard let tlsBroker else { return properties }
        return properties.merging(["security.protocol": "ssl", "ssl.ca.location": tlsBroker.caPath]) { $1 }
    }

    static var kafka: KafkaConfiguration {
        get throws { KafkaConfiguration(bootstrapServers: try brokers, properties: kafkaProperties) }
    }

    /// Creates a topic with Tansu's own CLI (Herald never creates topics).
    static func createTopic(_ name: String, partitions: Int = 3) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try tansuBinary)
        process.arguments = ["topic", "create", name, "--broker", try tansuURL, "--partitions", String(partitions)]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestFailure("tansu topic create \(name) exited with \(process.terminationStatus)")
        }
    }

    static func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("herald-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Unique topic names for one test, created on the broker.
struct TestTopics {
    let requests: String
    /// The bulk lane's topic; it exists only when asked for (Herald without it serves push.requests alone).
    let bulkRequests: String
    let tokens: String
    let results: String
    let unregistered: String
    let deadLetters: String
    let channels: String
    let channelResults: String

    init(partitions: Int = 3, bulkLane: Bool = false) throws {
        let prefix = "t\(UUID().uuidString.prefix(8).lowercased())"
        requests = "\(prefix).push.requests"
        bulkRequests = "\(prefix).push.requests.bulk"
        tokens = "\(prefix).push.tokens"
        results = "\(prefix).push.results"
        unregistered = "\(prefix).push.unregistered"
        deadLetters = "\(prefix).push.dlq"
        channels = "\(prefix).push.channels"
        channelResults = "\(prefix).push.channel-results"
        for topic in [requests, tokens, results, unregistered, deadLetters, channels, channelResults] + (bulkLane ? [bulkRequests] : []) {
            try TestEnvironment.createTopic(topic, partitions: partitions)
        }
    }

    /// The HERALD_TOPIC_* variables that point Herald at these topics.
    var environment: [String: String] {
        [
            "HERALD_TOPIC_REQUESTS": requests,
            "HERALD_TOPIC_BULK_REQUESTS": bulkRequests,
            "HERALD_TOPIC_TOKENS": tokens,
            "HERALD_TOPIC_RESULTS": results,
            "HERALD_TOPIC_UNREGISTERED": unregistered,
            "HERALD_TOPIC_DLQ": deadLetters,
            "HERALD_TOPIC_CHANNELS": channels,
            "HERALD_TOPIC_CHANNEL_RESULTS": channelResults,
        ]
    }
}

/// A provider key as Apple issues it, written as a `.p8` file, and the mock's public half.
struct TestProviderKey {
    let keyID: String
    let teamID = "TEAM123456"
    let privateKey = P256.Signing.PrivateKey()
    let path: String

    init(directory: URL, keyID: String = "KEY1234567") throws {
        self.keyID = keyID
        path = directory.appendingPathComponent("AuthKey_\(keyID).p8").path
        try privateKey.pemRepresentation.write(toFile: path, atomically: true, encoding: .utf8)
    }
}

/// Reads every record of some topics with a fresh consumer group until a condition holds.
struct TopicReader {
    let consumer: KafkaConsumer

    init(topics: [String]) throws {
        consumer = try KafkaConsumer(
            configuration: try TestEnvironment.kafka,
            groupID: "reader-\(UUID().uuidString)",
            topics: topics,
            logger: Logger(label: "test.reader")
        )
    }

    /// Polls until `done(records so far)` is true or `timeout` passes; returns all records read.
    func read(
        timeout: Duration,
        until done: ([KafkaMessage]) -> Bool
    ) async throws -> [KafkaMessage] {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var records: [KafkaMessage] = []
        while clock.now < deadline, !done(records) {
            records += try await consumer.poll(maxMessages: 1000, timeout: .milliseconds(200))
        }
        return records
    }
}

extension KafkaMessage {
    /// The value parsed as a JSON object.
    var json: [String: Any]? {
        guard let value else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(value))) as? [String: Any]
    }

    func header(_ key: String) -> String? {
        headers.first { $0.key == key }?.value.map { String(decoding: $0, as: UTF8.self) }
    }
}

/// Runs `body` with services running in the background, then shuts them down gracefully.
func withRunningServices<Result: Sendable>(
    _ group: ServiceGroup,
    _ body: () async throws -> Result
) async throws -> Result {
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        do {
            let result = try await body()
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
    }
}
