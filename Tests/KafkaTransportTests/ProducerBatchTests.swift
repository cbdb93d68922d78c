import KafkaMessages
import KafkaTransport
import Logging
import Testing

/// `KafkaProducer.send(_:)` of a batch on librdkafka's built-in mock cluster
/// (`test.mock.num.brokers`): one wait for every delivery report, each error at its record's
/// place.
@Suite(.timeLimit(.minutes(1)))
struct ProducerBatchTests {
    static func producer(_ properties: [String: String] = [:]) throws -> KafkaProducer {
        var configuration = KafkaConfiguration(bootstrapServers: "", properties: ["test.mock.num.brokers": "1"])
        configuration.properties.merge(properties) { _, new in new }
        return try KafkaProducer(configuration: configuration, logger: Logger(label: "test.producer"))
    }

    static func record(_ index: Int, size: Int = 16) -> KafkaOutgoingMessage {
        KafkaOutgoingMessage(topic: "batch", key: Array("k\(index)".utf8), value: Array(repeating: UInt8(ascii: "x"), count: size))
    }

    /// Runs `body` with `producer` running, then stops it.
    static func withRunning<Result: Sendable>(_ producer: KafkaProducer, _ body: () async throws -> Result) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    @Test func everyRecordOfABatchIsAcknowledged() async throws {
        let producer = try Self.producer()
        let errors = try await Self.withRunning(producer) {
            await producer.send((0..<500).map { Self.record($0) })
        }
        #expect(errors.count == 500)
        #expect(errors.allSatisfy { $0 == nil }, "\(errors.compactMap { $0 }.prefix(3))")
    }

    @Test func aRefusedRecordsErrorStandsAtItsPlaceAndTheOthersGoThrough() async throws {
        // librdkafka refuses a record above message.max.bytes: its report carries the error.
        let producer = try Self.producer(["message.max.bytes": "2000"])
        let errors = try await Self.withRunning(producer) {
            await producer.send([Self.record(0), Self.record(1, size: 3000), Self.record(2)])
        }
        #expect(errors.count == 3)
        #expect(errors[0] == nil && errors[2] == nil)
        let refusal = try #require(errors[1] as? KafkaError)
        #expect(refusal.isRecordTooLarge, "\(refusal)")
        #expect(!refusal.isRetriable)
    }

    @Test func anEmptyBatchReturnsAtOnce() async throws {
        let producer = try Self.producer()
        let errors = try await Self.withRunning(producer) { await producer.send([KafkaOutgoingMessage]()) }
        #expect(errors.isEmpty)
    }
}
